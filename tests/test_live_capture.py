"""`kwsniff capture lo` against a real tansu broker and real clients: exit 0 on SIGINT, Produce record
counts equal to the acknowledged ones, rotation without lost or doubled rows, and `--write-pcap`
read back to the same tables."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from tests.realparts import (
    capture_metric,
    consume_with_confluent,
    create_topics,
    free_port,
    produce_with_confluent,
    start_broker,
    stop_process,
    wait_until,
)

READY_TIMEOUT_S = 15.0
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
RECORDS_PER_CODEC = 40


def kwsniff(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kwsniff", *args], capture_output=True, text=True, timeout=60, **kw
    )


def start_capture(
    out: Path, port: int, pcap: Path, err_path: Path, metrics_port: int
) -> subprocess.Popen[bytes]:
    err = open(err_path, "wb")  # noqa: SIM115 - the child owns it
    proc = subprocess.Popen(
        [sys.executable, "-m", "kwsniff", "capture", "lo", "--out", str(out), "--broker-port", str(port)]
        + ["--workers", "1"]
        + ["--rotate-seconds", "2", "--write-pcap", str(pcap), "--metrics-port", str(metrics_port)],
        stdout=subprocess.PIPE,
        stderr=err,
    )
    err.close()
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if b"kwsniff: capturing on lo" in err_path.read_bytes():
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    stop_process(proc, signal.SIGKILL)
    raise AssertionError(f"capture not ready: {err_path.read_text()}")


def committed(table: Path) -> bool:
    """A table folder holds a committed file (not a temporary one, named with a leading dot)."""
    return any(not p.name.startswith(".") for p in table.glob("*.parquet"))


def rows(directory: Path, table: str) -> list[tuple]:
    """The table's rows without the capture-name column, sorted (file layout ignored)."""
    found = []
    for path in sorted((directory / table).glob("*.parquet")):
        for row in pq.read_table(path).to_pylist():
            row.pop("capture")
            found.append(tuple(sorted((k, repr(v)) for k, v in row.items())))
    return sorted(found)


def test_capture_lo_counts_rotation_and_pcap(tmp_path: Path) -> None:
    out, pcap, err = tmp_path / "live", tmp_path / "live.pcap", tmp_path / "capture.err"
    acked: Counter[tuple[str, int]] = Counter()
    with start_broker() as broker:
        topics = {f"live-{codec}": 1 for codec in CODECS}
        create_topics(broker.bootstrap, topics)
        metrics_port = free_port()
        proc = start_capture(out, broker.port, pcap, err, metrics_port)
        try:
            for codec in CODECS:
                n = produce_with_confluent(
                    broker.bootstrap,
                    f"live-{codec}",
                    RECORDS_PER_CODEC,
                    300,
                    compression=codec,
                    flush_each=False,
                    linger_ms=5,
                )
                acked[(f"live-{codec}", 0)] = n
            # Past a rotation boundary with traffic on both sides: the first period's files are in.
            wait_until(lambda: committed(out / "requests"), "the first rotation's files", READY_TIMEOUT_S)
            seen, _ = consume_with_confluent(
                broker.bootstrap, list(topics), "live-group", sum(acked.values()), timeout_s=30
            )
            # The consumer's last request (LeaveGroup, as it closes) decoded: all before it is too.
            leave = 'kwsniff_requests_total{api="LeaveGroup"}'
            wait_until(
                lambda: capture_metric(metrics_port, leave) >= 1, "the LeaveGroup decoded", READY_TIMEOUT_S
            )
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                stdout, _ = proc.communicate(timeout=30)
            finally:
                stop_process(proc, signal.SIGKILL)
    message = err.read_text()
    assert proc.returncode == 0, message
    assert "Traceback" not in message
    assert sum(acked.values()) == len(CODECS) * RECORDS_PER_CODEC
    assert seen == sum(acked.values())
    assert b"rotation periods" in stdout

    produced: Counter[tuple[str, int]] = Counter()
    for path in (out / "partitions").glob("*.parquet"):
        for row in pq.read_table(path).to_pylist():
            if row["api_name"] == "Produce" and row["error_code"] == 0:
                produced[(row["topic"], row["partition"])] += row["record_count"]
    assert produced == acked

    for table in ("requests", "partitions", "connections", "errors", "capture_stats"):
        files = list((out / table).glob("*.parquet"))
        assert len(files) >= 2, (table, files)  # a rotation happened
        assert not list((out / table).glob(".*")), table  # no temporary file left
    for table in ("requests", "partitions"):
        live = rows(out, table)
        assert len(live) == len(set(live)), table  # no row written twice
    stats = [r for p in (out / "capture_stats").glob("*.parquet") for r in pq.read_table(p).to_pylist()]
    assert sum(r["kernel_drops"] + r["queue_drops"] for r in stats) == 0
    assert sum(r["packets"] for r in stats) > 0

    again = tmp_path / "again"
    done = kwsniff("read", str(pcap), "--out", str(again), "-p", str(broker.port), "-q")
    assert done.returncode == 0, done.stderr
    apis = Counter(dict(r)["api_name"] for r in rows(out, "requests"))
    assert apis["'Produce'"] >= len(CODECS) and apis["'Fetch'"] >= 1 and apis["'JoinGroup'"] >= 1, apis
    for table in ("requests", "partitions", "connections", "errors"):
        assert rows(again, table) == rows(out, table), table
