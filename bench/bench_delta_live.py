"""A live capture's commit time at its first and its last period (issue 47): `kwsniff capture lo
--rotate-seconds 1` into Delta tables on a real S3 server (SeaweedFS, tests/seaweed.py) and, as the
peer, the same capture into a directory dataset (each commit swaps the whole directory: its cost grows
with the files already there), both capturing the same traffic at once while a confluent-kafka
producer sends --rate records/s to a tansu broker.

    python bench/bench_delta_live.py                 # 10 minutes: about 600 periods each
    python bench/bench_delta_live.py --minutes 2

Each capture's commit durations come from its metrics (`kwsniff_commit_duration_seconds`, a histogram:
its count and sum polled every POLL_S; a poll that saw one commit more has that commit's duration,
one that saw several their mean). It prints, for each capture, the commits, the first commit's
duration, the median of commits 2-11, the median of the last 10, the last, and the files each
dataset ends with; then the last/first-ten ratio (flat: about 1) and the machine's load (`uptime`),
before and after: on a shared machine the figures move with it. Not a test: it never fails on a figure.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from seaweed import seaweed_s3  # noqa: E402

from tests import realparts  # noqa: E402

POLL_S = 0.1
TOPIC = "live"
PRODUCER = """
import sys, time
from confluent_kafka import Producer
bootstrap, seconds, rate, topic = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
end = time.monotonic() + seconds
p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "client.id": "bench-producer"})
sent = 0
while time.monotonic() < end:
    tick = time.monotonic()
    for _ in range(max(1, rate // 10)):
        p.produce(topic, value=b"live record %d" % sent)
        sent += 1
    p.poll(0)
    time.sleep(max(0.0, 0.1 - (time.monotonic() - tick)))  # the pace: RATE records/s
p.flush(30)
"""


def commit_series(port: int) -> tuple[int, float] | None:
    """(count, sum) of the capture's commit-duration histogram; None while it does not answer."""
    try:
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return None
    values = {}
    for line in page.splitlines():
        name, _, value = line.partition(" ")
        if name in ("kwsniff_commit_duration_seconds_count", "kwsniff_commit_duration_seconds_sum"):
            values[name] = float(value)
    if len(values) < 2:
        return None
    return int(values["kwsniff_commit_duration_seconds_count"]), values["kwsniff_commit_duration_seconds_sum"]


class Commits:
    """A capture's commit durations as its polled metrics give them (see the module's text)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.count, self.total = 0, 0.0
        self.durations: list[float] = []  # per commit; several commits in one poll share their mean

    def poll(self) -> None:
        seen = commit_series(self.port)
        if seen is None or seen[0] <= self.count:
            return
        count, total = seen
        mean = (total - self.total) / (count - self.count)
        self.durations += [mean] * (count - self.count)
        self.count, self.total = count, total


def start_capture(
    out: str, port: int, metrics: int, err: Path, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "kwsniff", "capture", "lo", "--out", out, "-p", str(port)]
    command += ["--rotate-seconds", "1", "--workers", "1", "--metrics-port", str(metrics), "--host", "bench"]
    with err.open("wb") as sink:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=sink, cwd=ROOT, env=env)
    deadline = time.monotonic() + 60
    while b"kwsniff: capturing on" not in err.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"bench_delta_live: capture did not start: {err.read_text()}")
        time.sleep(POLL_S)
    return proc


def files_in(path: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(path))


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=200, help="records/s the producer sends")
    args = parser.parse_args()
    seconds = args.minutes * 60
    print("load before:", load(), flush=True)
    with (
        tempfile.TemporaryDirectory(prefix="kwsniff-delta-live-") as tmp,
        seaweed_s3(Path(tmp) / "seaweed") as s3,
        realparts.start_broker() as broker,
    ):
        realparts.create_topics(broker.bootstrap, {TOPIC: 4})
        ports = realparts.free_ports(2)
        outs = {"delta (S3)": s3.uri("live"), "directory": str(Path(tmp) / "dir")}
        procs, commits = {}, {}
        producer = None
        try:
            for (label, out), port in zip(outs.items(), ports, strict=True):
                err = Path(tmp) / f"{label.split()[0]}.err"
                procs[label] = start_capture(out, broker.port, port, err, s3.env())
                commits[label] = Commits(port)
            producer = subprocess.Popen(
                [sys.executable, "-c", PRODUCER, broker.bootstrap, str(seconds), str(args.rate), TOPIC]
            )
            while producer.poll() is None:
                for c in commits.values():
                    c.poll()
                time.sleep(POLL_S)
            for c in commits.values():
                c.poll()
        finally:
            if producer is not None and producer.poll() is None:
                producer.kill()
            for proc in procs.values():
                proc.send_signal(signal.SIGINT)
            for proc in procs.values():
                try:
                    proc.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    proc.kill()
        delta_files = len([k for k in s3.keys("live/") if k.endswith(".parquet")])
        files = {"delta (S3)": delta_files, "directory": files_in(Path(outs["directory"]))}
        print(
            f"\n{'capture':<12} {'commits':>7} {'first s':>8} {'2-11 median':>11} {'last 10 median':>14}"
            f" {'last s':>7} {'last10/2-11':>11} {'files':>6}"
        )
        for label, c in commits.items():
            d = c.durations
            if len(d) < 12:
                print(f"{label:<12} {len(d):>7} (too few commits)")
                continue
            early, late = statistics.median(d[1:11]), statistics.median(d[-10:])
            print(
                f"{label:<12} {len(d):>7} {d[0]:>8.3f} {early:>11.3f} {late:>14.3f} {d[-1]:>7.3f}"
                f" {late / early:>11.2f} {files[label]:>6}"
            )
    print("\nload after:", load())


if __name__ == "__main__":
    main()
