"""The parts of `kwsniff capture` that need no broker: rotation under a fake clock, the decode thread
against `read` of the same packets, one-line errors, the metrics exposition, and `read -` decoding
a pipe as it fills."""

from __future__ import annotations

import datetime
import fcntl
import gc
import os
import queue
import re
import signal
import subprocess
import sys
import termios
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import dpkt
import pyarrow.parquet as pq
import pytest

from kwsniff.capture import open_capture, open_stream
from kwsniff.capture.live import CaptureCounters
from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.run_live import LiveDecoder, LiveOptions
from kwsniff.pipeline.session import Session, SessionOptions
from kwsniff.rows import ListSink
from kwsniff.sinks import ParquetSink
from kwsniff.sinks.rotating import RotatingSink
from kwsniff.tables import DEFAULT_TABLES
from kwsniff.view.metrics import Metrics
from kwsniff.view.screen import api_lines, log_line
from kwsniff.view.stats import LiveStats, StatsSink
from tests.realparts import free_port, stop_process, wait_until

CAPTURES = Path(__file__).parent / "data" / "captures"
SAMPLE = CAPTURES / "kafka_python.pcap"
# As `kwsniff capture`: every table but `captures` (one row per input file, read's and spark's).
ROW_TABLES = tuple(t for t in DEFAULT_TABLES if t != "captures")
TABLES = (*ROW_TABLES, "capture_stats")


def kwsniff(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kwsniff", *args], capture_output=True, text=True, timeout=60, **kw
    )


def dataset(directory: Path, table: str) -> list[dict[str, Any]]:
    return [r for p in sorted((directory / table).glob("*.parquet")) for r in pq.read_table(p).to_pylist()]


def test_rotation_fake_clock_every_row_once_and_only_closed_files_visible(tmp_path: Path) -> None:
    periods: list[tuple[float, float]] = []
    sink = RotatingSink(tmp_path, "cap", ("requests",), 10.0, 1000.0, lambda s, e: periods.append((s, e)))
    row = {"capture": "cap", "conn_id": 0, "correlation_id": 0, "api_key": 0}
    for i in range(95):
        now = 1000.0 + i  # one row a second: periods of 10 rows
        sink.maybe_rotate(now)
        sink.add("requests", {**row, "correlation_id": i})
        for path in (tmp_path / "requests").glob("*.parquet"):
            pq.read_metadata(path)  # every visible file is complete
    visible = sorted(p.name for p in (tmp_path / "requests").glob("*.parquet"))
    assert visible == [f"cap-{n:06d}.parquet" for n in range(1, 10)]
    sink.close(1095.0)
    files = sorted((tmp_path / "requests").glob("*.parquet"))
    assert [p.name for p in files] == [f"cap-{n:06d}.parquet" for n in range(1, 11)]
    per_file = [[r["correlation_id"] for r in pq.read_table(p).to_pylist()] for p in files]
    assert per_file == [list(range(n, min(n + 10, 95))) for n in range(0, 95, 10)]
    assert periods == [(1000.0 + n, 1010.0 + n) for n in range(0, 90, 10)] + [(1090.0, 1095.0)]
    assert not [p for p in (tmp_path / "requests").iterdir() if p.name.startswith(".")]
    assert sink.counts == {"requests": 95}


class FakeCapture:
    """The capture thread's side of the queue, fed from a capture file in batches."""

    def __init__(self, path: Path, batch: int) -> None:
        self.queue: queue.Queue[Any] = queue.Queue()
        with open_capture(path) as reader:
            packets = list(reader.packets())
        self.linktype = packets[0][1]
        self.counters = CaptureCounters()
        for i in range(0, len(packets), batch):
            part = [(ts, data) for ts, _, data in packets[i : i + batch]]
            self.queue.put((self.linktype, part))
            self.counters.captured += len(part)
            self.counters.captured_bytes += sum(len(data) for _, data in part)
        self.queue.put(None)
        self.packets = len(packets)

    def snapshot(self) -> CaptureCounters:
        return self.counters


def test_decoder_rotating_gives_the_rows_of_read(tmp_path: Path) -> None:
    capture = FakeCapture(SAMPLE, batch=7)
    ticks = iter(range(1_000_000))
    out, pcap = tmp_path / "live", tmp_path / "copy.pcap"
    options = LiveOptions(out, "fake", TABLES, rotate_s=3.0, idle_s=0.0, write_pcap=pcap)
    decoder = LiveDecoder(capture, SessionOptions(), options, LiveStats(), clock=lambda: float(next(ticks)))  # type: ignore[arg-type]
    decoder.start()
    decoder.join(30)
    assert decoder.error is None and not decoder.running
    with ParquetSink(tmp_path / "file", "file", DEFAULT_TABLES) as sink:
        run_capture(SAMPLE, sink, SessionOptions())
    assert decoder.sink.seq > 3  # rotated many times
    for table in ROW_TABLES:
        assert len(list((out / table).glob("*.parquet"))) == decoder.sink.seq
        got = [repr(dict(r, capture="")) for r in dataset(out, table)]
        want = [repr(dict(r, capture="")) for r in dataset(tmp_path / "file", table)]
        assert want and sorted(got) == sorted(want), table
    stats = dataset(out, "capture_stats")
    assert len(stats) == decoder.sink.seq
    assert sum(r["packets"] for r in stats) == capture.packets
    with open_capture(pcap) as copy, open_capture(SAMPLE) as original:
        assert list(copy.packets()) == list(original.packets())


def test_the_decoder_freezes_what_exists_before_the_first_packet(tmp_path: Path) -> None:
    """While the decode thread runs, the objects made before it (the session among them) are in the
    collector's permanent generation, not walked by its passes; they are given back at the end."""
    seen: list[tuple[bool, bool]] = []

    class Watched(FakeCapture):
        def snapshot(self) -> CaptureCounters:
            tracked = gc.get_objects()
            seen.append((any(o is decoder.session for o in tracked), gc.get_freeze_count() > 0))
            return self.counters

    capture = Watched(SAMPLE, batch=50)
    options = LiveOptions(tmp_path / "live", "fake", TABLES, rotate_s=3600.0, idle_s=0.0)
    decoder = LiveDecoder(capture, SessionOptions(), options, LiveStats())  # type: ignore[arg-type]
    assert any(o is decoder.session for o in gc.get_objects())
    decoder.start()
    decoder.join(30)
    assert decoder.error is None and not decoder.running
    assert seen and set(seen) == {(False, True)}  # frozen when the last period's row was made
    assert any(o is decoder.session for o in gc.get_objects())  # and thawed at the end


MICROSECOND = datetime.timedelta(microseconds=1)


def test_capture_stats_rows_are_the_periods_and_the_counters_differences(tmp_path: Path) -> None:
    """One row per rotation period: its bounds are clock readings, its counts what the capture
    counters grew by in it; packets and bytes add up to the capture file's, as dpkt reads it."""
    capture = FakeCapture(SAMPLE, batch=11)
    capture.counters.kernel_drops, capture.counters.if_drops, capture.counters.queue_drops = 5, 2, 3
    ticks = iter(range(1_000_000))
    readings: list[int] = []

    def clock() -> float:
        readings.append(next(ticks))
        return float(readings[-1])

    options = LiveOptions(tmp_path / "live", "fake", TABLES, rotate_s=4.0, idle_s=0.0)
    decoder = LiveDecoder(capture, SessionOptions(), options, LiveStats(), clock=clock)  # type: ignore[arg-type]
    decoder.start()
    decoder.join(30)
    assert decoder.error is None
    stats = sorted(dataset(tmp_path / "live", "capture_stats"), key=lambda r: r["period_start"])
    assert len(stats) == decoder.sink.seq > 3
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    bounds = [
        ((r["period_start"] - epoch) // MICROSECOND, (r["period_end"] - epoch) // MICROSECOND) for r in stats
    ]
    assert bounds[0][0] == readings[0] * 1_000_000
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))  # back to back
    assert {t for b in bounds for t in b} <= {r * 1_000_000 for r in readings}
    assert all(end - start >= 4_000_000 for start, end in bounds[:-1])
    with SAMPLE.open("rb") as f:
        frames = [len(data) for _, data in dpkt.pcap.Reader(f)]
    assert sum(r["packets"] for r in stats) == len(frames)
    assert sum(r["bytes"] for r in stats) == sum(frames)
    # The drops were there before the first period ended: all in it, none after.
    assert [(r["kernel_drops"], r["if_drops"], r["queue_drops"]) for r in stats] == [(5, 2, 3)] + [
        (0, 0, 0)
    ] * (len(stats) - 1)
    assert {r["capture"] for r in stats} == {"fake"}


def test_capture_errors_are_one_line(tmp_path: Path) -> None:
    missing = kwsniff("capture", "nosuchif0", "--out", str(tmp_path / "a"))
    assert (missing.returncode, missing.stdout, missing.stderr) == (
        1,
        "",
        "kwsniff: error: nosuchif0: no such interface\n",
    )
    bad = kwsniff("capture", "lo", "--out", str(tmp_path / "b"), "--filter", "tcp port 99999x")
    assert (bad.returncode, bad.stderr) == (
        1,
        "kwsniff: error: bad capture filter 'tcp port 99999x': unknown port '99999x'\n",
    )
    denied = subprocess.run(
        ["setpriv", "--inh-caps=-all", "--bounding-set=-net_raw,-net_admin"]
        + [sys.executable, "-m", "kwsniff", "capture", "lo", "--out", str(tmp_path / "c")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (denied.returncode, denied.stderr) == (
        1,
        "kwsniff: error: lo: permission denied (run as root, or give the python binary CAP_NET_RAW and "
        "CAP_NET_ADMIN with setcap)\n",
    )
    assert not any((tmp_path / d).exists() for d in "abc")  # nothing started, nothing written


def test_metrics_scrape_names_and_counts() -> None:
    metrics = Metrics()
    port = free_port()
    metrics.serve(port, "127.0.0.1")
    try:
        requests = [("Produce", "10.0.0.1:9092", 0.003, "p"), ("Fetch", "10.0.0.2:9092", 0.4, None)]
        metrics.update(CaptureCounters(10, 1500, 2, 0, 1, 4), (requests, [], [], [], [], [], [], [], []), 3)
        error = ("NOT_LEADER_OR_FOLLOWER", "Produce", "p", False)
        metrics.update(
            CaptureCounters(25, 4000, 5, 0, 1, 0),
            ([("Produce", "10.0.0.1:9092", 0.002, "p")], [error], [], [], [], [], [], [], []),
            2,
        )
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        metrics.close()
    lines = set(text.splitlines())
    for line in (
        "kwsniff_packets_total 25.0",
        "kwsniff_captured_bytes_total 4000.0",
        'kwsniff_packets_dropped_total{cause="kernel"} 5.0',
        'kwsniff_packets_dropped_total{cause="interface"} 0.0',
        'kwsniff_packets_dropped_total{cause="queue"} 1.0',
        "kwsniff_queue_depth 0.0",
        'kwsniff_requests_total{api="Produce"} 2.0',
        'kwsniff_requests_total{api="Fetch"} 1.0',
        'kwsniff_errors_total{error="NOT_LEADER_OR_FOLLOWER"} 1.0',
        'kwsniff_request_latency_seconds_count{api="Produce"} 2.0',
        'kwsniff_request_latency_seconds_bucket{api="Produce",le="0.0025"} 1.0',
        'kwsniff_request_latency_seconds_bucket{api="Fetch",le="0.5"} 1.0',
        'kwsniff_broker_request_latency_seconds_count{api="Produce",broker="10.0.0.1:9092"} 2.0',
        'kwsniff_broker_request_latency_seconds_bucket{api="Fetch",broker="10.0.0.2:9092",le="0.25"} 0.0',
        "kwsniff_open_connections 2.0",
        'kwsniff_client_requests_total{api="Produce",client_id="p"} 2.0',
        'kwsniff_client_requests_total{api="Fetch",client_id=""} 1.0',
        'kwsniff_client_errors_total{api="Produce",client_id="p",error="NOT_LEADER_OR_FOLLOWER"} 1.0',
        'kwsniff_client_request_latency_seconds_bucket{api="Fetch",client_id="",le="0.5"} 1.0',
    ):
        assert line in lines, line
    assert not re.search(r"[{,]\w*port\w*=", text)  # no label of client ports (unbounded)


def test_read_stdin_yields_packets_before_end_of_stream(tmp_path: Path) -> None:
    data = SAMPLE.read_bytes()
    with open_capture(SAMPLE) as reader:
        packets = list(reader.packets())
    half = len(packets) // 2
    # The byte offset where the second half starts: header + first half's records.
    cut = 24 + sum(16 + len(p[2]) for p in packets[:half])
    r, w = os.pipe()
    got: list[Any] = []

    def consume() -> None:
        with open_stream(r) as stream:
            for packet in stream.packets():
                got.append(packet)

    thread = threading.Thread(target=consume)
    thread.start()
    try:
        os.write(w, data[:cut])
        # Until the reader has taken every byte written and waits in the kernel for more: whatever
        # it decodes from what it was given is then decoded.
        assert thread.native_id is not None
        wchan = Path(f"/proc/self/task/{thread.native_id}/wchan")

        def waiting_for_more() -> bool:
            unread = int.from_bytes(fcntl.ioctl(w, termios.FIONREAD, b"\0\0\0\0"), sys.byteorder)
            return unread == 0 and "pipe_read" in wchan.read_text()

        wait_until(waiting_for_more, "the reader waiting for more of the stream")
        assert len(got) == half  # the first half decoded while the stream is still open
        os.write(w, data[cut:])
    finally:
        os.close(w)
        thread.join(10)
        os.close(r)
    assert got == packets


def test_read_dash_decodes_a_pipe(tmp_path: Path) -> None:
    done = kwsniff("read", "-", "--out", str(tmp_path), "-q", stdin=SAMPLE.open("rb"))
    assert done.returncode == 0, done.stderr
    again = kwsniff("read", str(SAMPLE), "--out", str(tmp_path / "file"), "-q")
    assert again.returncode == 0
    [name] = [p.name for p in (tmp_path / "requests").glob("*.parquet")]
    assert re.fullmatch(r"stdin-\d{8}T\d{6}Z-[0-9a-f]{6}\.parquet", name), name
    for table in ROW_TABLES:
        a = [dict(r, capture="") for r in dataset(tmp_path, table)]
        b = [dict(r, capture="") for r in dataset(tmp_path / "file", table)]
        assert a == b, table


def test_expire_idle_writes_the_rows_of_silent_connections() -> None:
    with open_capture(SAMPLE) as reader:
        packets = list(reader.packets())[:100]  # three connections still open at the cut
    expired, finished = ListSink(), ListSink()
    session = Session("s", expired, SessionOptions())
    reference = Session("s", finished, SessionOptions())
    for ts, linktype, data in packets:
        session.packet(ts, linktype, data)
        reference.packet(ts, linktype, data)
    open_before = session.open_connections()
    assert open_before == 3
    last = packets[-1][0]
    # Nothing has been silent for an hour yet; an hour later, every open connection has.
    assert session.expire_idle(last, 3_600_000_000) == 0
    assert session.expire_idle(last + 3_600_000_001, 3_600_000_000) == open_before
    assert session.open_connections() == 0
    # The expired connections' flow entries are gone (a later packet starts a new connection).
    assert len(session.flows) == 2 * (7 - open_before)
    rows_then = {t: list(rows) for t, rows in expired.tables.items()}
    session.finish()
    assert expired.tables["connections"] == rows_then["connections"]  # finish found nothing left open
    reference.finish()
    # The same rows as at the end of the capture, but the expired connections say why they ended.
    assert [r["expired"] for r in expired.tables["connections"]].count("idle") == open_before
    assert {r["expired"] for r in finished.tables["connections"]} == {None}
    for rows in (expired.tables["connections"], finished.tables["connections"]):
        for row in rows:
            del row["expired"]
    for table in ("connections", "requests", "partitions"):
        assert sorted(map(repr, expired.tables[table])) == sorted(map(repr, finished.tables[table])), table


def test_view_stats_from_rows() -> None:
    stats = LiveStats(collect_pending=True)
    sink = StatsSink(ListSink(), stats)
    base = {"api_key": 0, "error_code": 0, "error_name": "NONE", "throttle_time_ms": 0, "client_id": "c"}
    for i in range(1, 101):
        sink.add("requests", {**base, "api_name": "Produce", "latency_ms": float(i)})
    sink.add(
        "requests",
        {
            **base,
            "api_name": "Fetch",
            "latency_ms": 500.0,
            "error_code": 6,
            "error_name": "NOT_LEADER_OR_FOLLOWER",
            "throttle_time_ms": 20,
        },
    )
    # The view counts the errors table's rows: this top-level error and one of a partition.
    for path in ("error_code", "responses[].partitions[].error_code"):
        sink.add(
            "errors",
            {"api_name": "Fetch", "path": path, "error_code": 6, "error_name": "NOT_LEADER_OR_FOLLOWER"},
        )
    sink.add("partitions", {"api_name": "Produce", "record_bytes": 1234, "topic": "t", "topic_id": None})
    sink.add("partitions", {"api_name": "Fetch", "record_bytes": 3000, "topic": "t", "topic_id": None})
    sink.add("connections", {"gaps": 2, "gap_bytes": 2920})
    # Rows carry only the columns known for their exchange (seen live when a request was dropped).
    sink.add("partitions", {"api_name": "Produce", "topic": "t"})
    sink.add("requests", {"api_key": 0, "api_name": "Produce", "status": "orphan"})
    window = stats.take_window()
    lines = api_lines(window, 10.0)
    assert [(a.api, a.per_s, a.p50_ms, a.p99_ms) for a in lines] == [
        ("Produce", 10.1, 50.0, 99.0),
        ("Fetch", 0.1, 500.0, 500.0),
    ]
    assert stats.totals.errors == {"NOT_LEADER_OR_FOLLOWER": 2}
    assert (stats.totals.produced_bytes, stats.totals.fetched_bytes) == ({"t": 1234}, {"t": 3000})
    assert stats.totals.throttled == {"c": 1}
    requests, errors, _topics, _lags, _joins, _replication, _statuses, _removed, _forgotten = (
        stats.take_pending()
    )
    assert (len(requests), errors) == (102, [("NOT_LEADER_OR_FOLLOWER", "Fetch", None, False)] * 2)
    assert stats.take_pending() == ([], [], [], [], [], [], [], [], [])
    line = log_line("lo", 10.0, window, 10.0, stats.totals, CaptureCounters(7, 700, 1, 0, 2), 3)
    assert line.startswith(
        "kwsniff: lo 10s packets=7 dropped_packets_kernel=1 dropped_packets_interface=0 dropped_packets_queue=2"
        " stream_gaps=2 stream_gap_bytes=2920 connections_open=3 connections_closed=1 requests=102 "
        "Produce=10.1/s(p50 50.0 p99 99.0 ms) Fetch=0.1/s(p50 500.0 p99 500.0 ms)"
    )
    assert line.endswith(" errors NOT_LEADER_OR_FOLLOWER=2")


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_and_duration_stop_cleanly(tmp_path: Path, workers: int) -> None:
    """SIGTERM and --duration stop the capture, every worker included, and commit one period:
    one capture_stats file (and row) per worker."""
    port = str(free_port())
    err = tmp_path / "err"
    with err.open("wb") as err_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kwsniff", "capture", "lo", "--out", str(tmp_path / "a"), "-p", port]
            + ["--workers", str(workers)],
            stdout=subprocess.PIPE,
            stderr=err_file,
        )
    try:
        deadline = time.monotonic() + 15
        while b"capturing on lo" not in err.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        stdout, _ = proc.communicate(timeout=20)
    finally:
        stop_process(proc, signal.SIGKILL)
    assert proc.returncode == 0, err.read_text()
    assert b"1 rotation periods" in stdout
    assert len(list((tmp_path / "a" / "capture_stats").glob("*.parquet"))) == workers
    timed = kwsniff(
        "capture",
        "lo",
        "--out",
        str(tmp_path / "b"),
        "-p",
        port,
        "--duration",
        "1",
        "-q",
        "--workers",
        str(workers),
    )
    # -q prints only errors: no "capturing on" line, no view, no summary.
    assert (timed.returncode, timed.stdout, timed.stderr) == (0, "", "")
    stats = dataset(tmp_path / "b", "capture_stats")
    assert sorted((r["worker"], r["packets"]) for r in stats) == [(w, 0) for w in range(workers)]
    assert not list(tmp_path.glob(".b.kwsniff-*")), "a spool or stage directory was left beside OUT"


def test_view_and_metrics_count_every_row_of_the_errors_table() -> None:
    """kafka_python.pcap has a top-level error code, legacy_msgset.pcap two per partition: the Errors
    panel and kwsniff_errors_total used to show only the first. Topics keep produced and fetched
    bytes apart, and the connection count is every connection, not only the open ones."""
    from collections import Counter

    from prometheus_client import generate_latest

    from kwsniff.view.screen import render, top_topics

    stats = LiveStats(collect_pending=True)
    tables = ListSink()
    for name in ("kafka_python.pcap", "legacy_msgset.pcap", "produce_codecs.pcap"):
        run_capture(CAPTURES / name, StatsSink(tables, stats), SessionOptions())
    errors = tables.tables["errors"]
    assert sorted({r["path"] for r in errors}) == [
        "error_code",
        "responses[].partition_responses[].error_code",
    ]
    assert sum(stats.totals.errors.values()) == len(errors) == 4
    assert stats.totals.errors == Counter(r["error_name"] for r in errors)
    metrics = Metrics()
    metrics.update(CaptureCounters(), stats.take_pending(), 0)
    scraped = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in generate_latest(metrics.registry).decode().splitlines()
        if line.startswith("kwsniff_errors_total")
    }
    assert scraped == {
        f'kwsniff_errors_total{{error="{k}"}}': float(v) for k, v in stats.totals.errors.items()
    }
    partitions = tables.tables["partitions"]
    for api, counted in (("Produce", stats.totals.produced_bytes), ("Fetch", stats.totals.fetched_bytes)):
        want: Counter[str] = Counter()
        for p in partitions:
            if p["api_name"] == api and p["record_bytes"]:
                want[p["topic"] or p["topic_id"]] += p["record_bytes"]
        assert counted == want and counted, api
    assert top_topics(stats.totals)[0] == "codec-none"
    connections = len(tables.tables["connections"])
    assert connections == stats.totals.connections_closed == 32
    from rich.console import Console

    console = Console(width=200, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(render("lo", 1.0, stats.take_window(), 1.0, stats.totals, CaptureCounters(), 0))
    screen = console.export_text()
    assert f"connections {connections} (0 open)" in screen
    for name, n in stats.totals.errors.items():
        assert f"{name}" in screen and f" {n} " in screen


def test_a_capture_that_fails_to_start_leaves_no_table_directories(tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = kwsniff("capture", "lo", "--out", str(tmp_path / "out" / "t"), "--metrics-port", str(port))
    assert (done.returncode, done.stderr) == (
        1,
        f"kwsniff: error: --metrics-port {port}: Address already in use\n",
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("quiet", [True, False])
def test_the_view_window_is_taken_every_interval_even_when_quiet(
    quiet: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`capture -q` shows no view, but the window of rows the view reads is still taken (and
    dropped) each interval: before, a quiet capture gathered every request's latency in it for
    as long as it ran."""
    from kwsniff.commands import capture as command
    from kwsniff.view.stats import LiveStats

    monkeypatch.setattr(command, "LOG_INTERVAL_S", 0.0)
    stats = LiveStats()
    calls = iter(range(3))  # three passes of the loop, then it ends

    def running() -> bool:
        if next(calls, None) is None:
            return False
        stats.row("requests", {"api_name": "Fetch", "api_key": 1, "latency_ms": 2.5})
        return True

    command._watch(
        "lo", running, CaptureCounters, lambda: 0, stats, threading.Event(), time.monotonic(), None, quiet
    )
    assert stats.window.requests == {} and dict(stats.window.latencies_ms) == {}
    logged = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(logged) == (0 if quiet else 3)  # one log line a pass when not quiet
