"""The operator's soak (issue 48): `kwsniff capture lo` left running as it would be on a broker host
(the default workers, one-minute periods, `--write-pcap`, Delta tables on local disk with `--retain`,
so each finished hour is compacted) for N minutes, scraped by a real Prometheus with the shipped alert
rules, while real clients run against tansu: a producer, a consumer group that keeps up, one whose
consumer is killed (SIGKILL) after --kill-at minutes, and one that takes 0.1 s per message and falls
further behind all the time.

    python bench/bench_soak.py                      # 120 minutes
    python bench/bench_soak.py --minutes 5 --kill-at 2

Each minute it prints one line: the resident memory (VmRSS) and open files of the coordinating
process and of each worker, the files and bytes in --out and the pcaps, the mean commit duration of
the minute's commits (from the capture's own kwsniff_commit_duration_seconds), the slow group's
kwsniff_consumer_group_lag_seconds (or its lower bound), each group's status, and the alerts firing
in Prometheus. At the end, after SIGINT: the capture's exit status, every acknowledged record (per
partition, from the producer's delivery reports) against the committed Produce rows, the pcaps read
back with `read --continuous` against the live tables, and the slow group's lag in seconds as
Prometheus recorded it each minute against the report's `lag` section at the same second. Not a test:
it never fails on a figure; the machine's load (`uptime`) is printed at the start and the end.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from bench_live_soak import files_in, proc_status, workers_of  # noqa: E402
from test_alerts_prometheus import start_prometheus  # noqa: E402

from kwsniff.sinks.delta import table_dataset  # noqa: E402
from kwsniff.sinks.location import parse_location  # noqa: E402
from tests import realparts  # noqa: E402

TOPIC = "soak"
PARTITIONS = 4
GROUPS = {"soak-steady": 0.0, "soak-killed": 0.0, "soak-slow": 0.1}  # group: seconds per message
SLOW, KILLED = "soak-slow", "soak-killed"
PRODUCER = """
import json, sys, time
from collections import Counter
from confluent_kafka import Producer
bootstrap, seconds, rate, topic, partitions = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
acked = Counter()
def done(err, msg):
    if err is None:
        acked[msg.partition()] += 1
p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "client.id": "soak-producer", "acks": "all"})
end, sent = time.monotonic() + seconds, 0
while time.monotonic() < end:
    tick = time.monotonic()
    for _ in range(max(1, rate // 10)):
        p.produce(topic, value=b"soak record %d" % sent, partition=sent % partitions, on_delivery=done)
        sent += 1
    p.poll(0)
    time.sleep(max(0.0, 0.1 - (time.monotonic() - tick)))
p.flush(60)
print(json.dumps({"sent": sent, "acked": {str(k): v for k, v in acked.items()}}), flush=True)
"""
CONSUMER = """
import sys, time
from confluent_kafka import Consumer
bootstrap, seconds, topic, group, pause = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4], float(sys.argv[5])
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": group + "-consumer",
              "auto.offset.reset": "earliest", "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000})
c.subscribe([topic])
end, read = time.monotonic() + seconds, 0
while time.monotonic() < end:
    msg = c.poll(0.5)
    if msg is not None and msg.error() is None:
        read += 1
        if pause:
            time.sleep(pause)
c.close()
print(read, flush=True)
"""


def prometheus(port: int, promql: str, **params: Any) -> list[dict[str, Any]]:
    path = "query_range" if "step" in params else "query"
    query = urllib.parse.urlencode({"query": promql, **params})
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/{path}?{query}", timeout=30) as reply:
        return json.load(reply)["data"]["result"]


def metric_sums(port: int, names: tuple[str, ...]) -> dict[str, float]:
    """The named unlabelled samples of the capture's metrics endpoint."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    values = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in names:
            values[name] = float(value)
    return values


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def minute_line(
    minute: int, pid: int, out: Path, pcaps: Path, prom: int, metrics: int, last: dict[str, float]
) -> str:
    parts = []
    rss, fds = proc_status(pid)
    parts.append(f"coord {rss / 1024:.0f} MiB/{fds} fds")
    for i, worker in enumerate(workers_of(pid)):
        rss, fds = proc_status(worker)
        parts.append(f"w{i} {rss / 1024:.0f} MiB/{fds}")
    parts.append(f"out {files_in(out)} files {du(out) / 2**20:.1f} MiB")
    parts.append(f"pcaps {len(list(pcaps.glob('*.pcap')))} {du(pcaps) / 2**20:.0f} MiB")
    names = ("kwsniff_commit_duration_seconds_sum", "kwsniff_commit_duration_seconds_count")
    try:
        now = metric_sums(metrics, names)
        count = now[names[1]] - last.get(names[1], 0.0)
        mean = (now[names[0]] - last.get(names[0], 0.0)) / count if count else float("nan")
        last.update(now)
        parts.append(f"commits {count:.0f} mean {mean * 1000:.1f} ms")
    except (OSError, KeyError):
        parts.append("commits ?")
    try:
        lag = prometheus(prom, f'max(kwsniff_consumer_group_lag_seconds{{group="{SLOW}"}})')
        bound = prometheus(prom, f'max(kwsniff_consumer_group_lag_seconds_lower_bound{{group="{SLOW}"}})')
        states = prometheus(prom, "kwsniff_consumer_group_status == 1")
        alerts = prometheus(prom, 'ALERTS{alertstate="firing"}')
        parts.append(
            f"slow lag_seconds {lag[0]['value'][1] if lag else '-'}"
            f" (lower bound {bound[0]['value'][1] if bound else '-'})"
        )
        parts.append(
            "status " + ",".join(sorted({f"{s['metric']['group']}={s['metric']['state']}" for s in states}))
        )
        parts.append(
            "firing "
            + ",".join(
                sorted(
                    {
                        a["metric"]["alertname"]
                        + (f"({a['metric'].get('group')})" if a["metric"].get("group") else "")
                        for a in alerts
                    }
                )
            )
        )
    except OSError as exc:
        parts.append(f"prometheus: {exc}")
    return f"minute {minute:4d}: " + "; ".join(parts)


def produce_counts(out: Path) -> Counter[int]:
    parts = table_dataset(parse_location(f"file://{out}"), "partitions").to_table(
        columns=["api_name", "error_code", "topic", "partition", "record_count"]
    )
    counts: Counter[int] = Counter()
    for row in parts.to_pylist():
        if row["api_name"] == "Produce" and row["error_code"] == 0 and row["topic"] == TOPIC:
            counts[row["partition"]] += row["record_count"]
    return counts


def kwsniff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kwsniff", *args], capture_output=True, text=True, cwd=ROOT, timeout=3600
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=120.0)
    parser.add_argument("--kill-at", type=float, default=10.0, help="minute the killed group's consumer dies")
    parser.add_argument("--rate", type=int, default=20, help="records/s the producer sends")
    parser.add_argument("--period", type=float, default=60.0, help="--rotate-seconds")
    parser.add_argument("--keep", type=Path, help="keep the tables, pcaps and logs in this directory")
    args = parser.parse_args()
    seconds = args.minutes * 60
    print("load:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(), flush=True)
    with tempfile.TemporaryDirectory(prefix="kwsniff-soak-") as tmp_name, realparts.start_broker() as broker:
        tmp = args.keep or Path(tmp_name)
        tmp.mkdir(parents=True, exist_ok=True)
        out, pcaps, err = tmp / "live", tmp / "pcap", tmp / "capture.err"
        pcaps.mkdir(exist_ok=True)
        realparts.create_topics(broker.bootstrap, {TOPIC: PARTITIONS})
        prom_port, metrics_port, am_port = realparts.free_ports(3)
        command = [sys.executable, "-m", "kwsniff", "capture", "lo", "--out", f"file://{out}"]
        command += ["-p", str(broker.port), "--rotate-seconds", str(args.period), "--retain", "7d"]
        command += ["--write-pcap", str(pcaps / "live.pcap"), "--metrics-port", str(metrics_port)]
        with err.open("wb") as err_file:
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err_file, cwd=ROOT)
        prom = None
        clients: dict[str, subprocess.Popen[str]] = {}
        try:
            deadline = time.monotonic() + realparts.CAPTURE_READY_TIMEOUT_S
            while b"kwsniff: capturing on" not in err.read_bytes():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"bench_soak: capture did not start: {err.read_text()}")
                time.sleep(0.25)
            prom_dir = tmp / "prometheus"
            prom_dir.mkdir(exist_ok=True)
            prom = start_prometheus(prom_dir, prom_port, metrics_port, am_port)
            started = time.time()
            run = [broker.bootstrap, str(seconds)]
            clients["producer"] = subprocess.Popen(
                [sys.executable, "-c", PRODUCER, *run, str(args.rate), TOPIC, str(PARTITIONS)],
                stdout=subprocess.PIPE,
                text=True,
            )
            for group, pause in GROUPS.items():
                clients[group] = subprocess.Popen(
                    [sys.executable, "-c", CONSUMER, *run, TOPIC, group, str(pause)],
                    stdout=subprocess.PIPE,
                    text=True,
                )
            last: dict[str, float] = {}
            minute, killed = 0, False
            while time.time() - started < seconds + 30 and proc.poll() is None:
                minute += 1
                while time.time() < started + minute * 60:
                    time.sleep(0.5)
                if not killed and minute >= args.kill_at:
                    clients[KILLED].send_signal(signal.SIGKILL)
                    killed = True
                    print(f"minute {minute:4d}: {KILLED}'s consumer killed (SIGKILL)", flush=True)
                print(minute_line(minute, proc.pid, out, pcaps, prom_port, metrics_port, last), flush=True)
            ended = time.time()
            results = {name: c.communicate(timeout=300)[0].strip() for name, c in clients.items()}
        finally:
            for c in clients.values():
                if c.poll() is None:
                    realparts.stop_process(c)  # type: ignore[arg-type]
            proc.send_signal(signal.SIGINT)
            stdout, _ = proc.communicate(timeout=realparts.CAPTURE_STOP_TIMEOUT_S)
        print(
            "capture exit status",
            proc.returncode,
            "; errors on stderr:",
            err.read_text().count("kwsniff: error"),
        )
        print("summary:", stdout.decode().strip().splitlines()[-1].strip() if stdout.strip() else "-")
        print("clients:", results)
        acked = Counter({int(k): v for k, v in json.loads(results["producer"])["acked"].items()})
        tables = produce_counts(out)
        print(
            f"acknowledged {sum(acked.values())} records; committed Produce records {sum(tables.values())};"
            f" per partition equal: {acked == tables} ({dict(sorted(acked.items()))} vs {dict(sorted(tables.items()))})"
        )
        # The slow group's lag in seconds: Prometheus' samples each minute against the report's.
        report = kwsniff("report", f"file://{out}", "--section", "lag", "--group", SLOW, "--format", "json")
        rows = json.loads(report.stdout)["lag"] if report.returncode == 0 else []
        if report.returncode:
            print("report failed:", report.stderr.strip()[-500:])
        series = prometheus(
            prom_port,
            f'max(kwsniff_consumer_group_lag_seconds{{group="{SLOW}"}}) or '
            f'max(kwsniff_consumer_group_lag_seconds_lower_bound{{group="{SLOW}"}})',
            start=started,
            end=ended,
            step=60,
        )
        gauge = {int(float(t)): float(v) for t, v in (series[0]["values"] if series else [])}
        report_at: dict[int, float] = {}
        for row in rows:
            second = row["second"]
            stamp = int(
                second
                if isinstance(second, (int, float))
                else __import__("datetime")
                .datetime.fromisoformat(str(second).replace("Z", "+00:00"))
                .timestamp()
            )
            if row["lag_seconds"] is not None:
                report_at[stamp] = max(report_at.get(stamp, 0.0), float(row["lag_seconds"]))
        print(
            "slow group's lag in seconds, minute: gauge / report (max over partitions, the report's latest second at or before)"
        )
        known = sorted(report_at)
        diffs = []
        for t, value in sorted(gauge.items()):
            before = [s for s in known if s <= t]
            if not before:
                continue
            theirs = report_at[before[-1]]
            diffs.append(abs(value - theirs))
            m = round((t - started) / 60)
            if m in (1, 2, 5, 10, 20, 30) or m % 15 == 0 or t == max(gauge):
                print(f"  minute {m:4d}: {value:9.1f} / {theirs:9.1f}")
        if diffs:
            print(f"  {len(diffs)} minutes compared; largest difference {max(diffs):.1f} s")
        # The pcaps read back.
        back = tmp / "readback"
        pcap_files = sorted(str(p) for p in pcaps.glob("*.pcap"))
        read = kwsniff("read", "--continuous", *pcap_files, "--out", str(back), "--quiet")
        print(
            f"read --continuous of {len(pcap_files)} pcaps: exit {read.returncode} {read.stderr.strip()[-300:]}"
        )
        if read.returncode == 0:
            import pyarrow.dataset as ds

            parts = (
                ds.dataset(back / "partitions")
                .to_table(columns=["api_name", "error_code", "topic", "partition", "record_count"])
                .to_pylist()
            )
            again = Counter()
            for row in parts:
                if row["api_name"] == "Produce" and row["error_code"] == 0 and row["topic"] == TOPIC:
                    again[row["partition"]] += row["record_count"]
            print(
                f"  Produce records read back {sum(again.values())}; equal to the live tables: {again == tables}"
            )
        print("load:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
        if prom is not None:
            realparts.stop_process(prom)


if __name__ == "__main__":
    main()
