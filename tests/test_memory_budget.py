"""Memory under one budget (`--memory-limit`, docs/memory.md): every pool stays within its share of
the limit whatever the input, and what was evicted to keep it there is counted, never lost silently."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from kafkawire import BROKER, SYN, tcp, write_pcap
from memory_captures import (
    FramesHandle,
    big_partial_frames,
    bomb_capture,
    one_way_produce,
    single_packet_flows,
)

from kwsniff.capture.live import ByteQueue, LiveCapture
from kwsniff.memory import CONNECTION_COST, FLOWS, QUEUE, RECORD_COST, RECORDS, MemoryBudget
from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import Session, SessionOptions

MIB = 1024 * 1024
TESTS = Path(__file__).resolve().parent
LINKTYPE_RAW = 228


class CountingSink:
    """Counts rows per table and keeps only the few columns a test reads (a ListSink of 100k
    connection rows would itself be the memory problem)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.expired: dict[str | None, int] = {}
        self.partitions: list[dict[str, Any]] = []
        self.connections: list[dict[str, Any]] = []
        self.record_offsets: set[int | None] = set()

    def add(self, table: str, row: dict[str, Any]) -> None:
        self.counts[table] = self.counts.get(table, 0) + 1
        if table == "connections":
            self.expired[row["expired"]] = self.expired.get(row["expired"], 0) + 1
            if len(self.connections) < 10:
                self.connections.append(row)
        elif table == "partitions":
            self.partitions.append(row)
        elif table == "records":
            self.record_offsets.add(row["offset"])


def traced_run(path: Path, options: SessionOptions) -> tuple[CountingSink, Any, int]:
    sink = CountingSink()
    tracemalloc.start()
    try:
        result = run_capture(path, sink, options)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return sink, result, peak


# -- the budget itself ------------------------------------------------------------------------------
def test_the_limit_is_shared_out_in_fixed_shares() -> None:
    budget = MemoryBudget(64 * MIB)
    assert budget.caps == [
        16 * MIB,
        16 * MIB,
        16 * MIB,
        8 * MIB,
        2 * MIB,
        MIB,
        2 * MIB,
        MIB // 2,
        2 * MIB,
        MIB // 2,
    ]
    budget.charge(RECORDS, 16 * MIB)
    assert not budget.over(RECORDS) and not budget.pressure
    budget.charge(RECORDS, 1)
    assert budget.over(RECORDS) and budget.pressure
    budget.release(RECORDS, 16 * MIB + 1)
    assert budget.snapshot() == {
        "flows": 0,
        "reassembly": 0,
        "records": 0,
        "rows": 0,
        "queue": 0,
        "secrets": 0,
        "fragments": 0,
        "names": 0,
        "view": 0,
        "brokers": 0,
    }


def test_one_frame_may_not_take_more_records_than_the_pool_holds() -> None:
    budget = MemoryBudget(64 * MIB)
    assert budget.admit_records(10 * MIB)
    assert not budget.admit_records(7 * MIB)  # 17 MiB > the 16 MiB share: refused, not charged
    assert budget.used(RECORDS) == 10 * MIB


# -- record-count bombs -------------------------------------------------------------------------------
def test_a_record_count_bomb_under_records_is_capped_and_counted(tmp_path: Path) -> None:
    # 2 million 7-byte records: 21 KB on the wire, 14 MB decompressed, 2.2 GB as rows. The records
    # pool of a 64 MiB limit (16 MiB) holds 13,981 records, so the batch is not read: counted.
    path = write_pcap(tmp_path / "bomb.pcap", bomb_capture(2_000_000))
    sink, result, peak = traced_run(path, SessionOptions(records=True, memory_limit=64 * MIB))
    (part,) = sink.partitions
    assert (part["record_count"], part["batch_count"], part["capped_batches"]) == (2_000_000, 1, 1)
    assert "records" not in sink.counts
    assert result.record_damage["capped_batches"] == 1
    assert result.status["ok"] == 1
    assert peak < 64 * MIB  # the 14 MB of decompressed records are the largest thing ever held


def test_a_bomb_under_the_records_share_is_read_in_full(tmp_path: Path) -> None:
    path = write_pcap(tmp_path / "small.pcap", bomb_capture(10_000))
    sink, result, _ = traced_run(path, SessionOptions(records=True, memory_limit=64 * MIB))
    (part,) = sink.partitions
    assert (part["record_count"], part["capped_batches"]) == (10_000, 0)
    assert sink.counts["records"] == 10_000


def test_records_past_the_share_in_one_frame_are_capped_batch_by_batch(tmp_path: Path) -> None:
    # Five partitions of 6,000 records each in one Produce request: 7.2 MB a batch against a 16 MiB
    # share, so two batches are read and three are capped.
    from kafkawire import Flow
    from memory_captures import produce_v3, produce_v3_response, record_count_bomb

    flow = Flow().handshake()
    flow.send(0, produce_v3(1, [record_count_bomb(6_000)] * 5), mss=60_000)
    flow.send(1, produce_v3_response(1, 5))
    flow.close()
    path = write_pcap(tmp_path / "five.pcap", flow.packets)
    sink, result, _ = traced_run(path, SessionOptions(records=True, memory_limit=64 * MIB))
    assert [p["capped_batches"] for p in sink.partitions] == [0, 0, 1, 1, 1]
    assert sink.counts["records"] == 12_000
    assert result.record_damage["capped_batches"] == 3
    assert 6_000 * RECORD_COST * 2 <= 16 * MIB < 6_000 * RECORD_COST * 3


def test_record_count_bomb_stays_under_the_limit_in_a_subprocess(tmp_path: Path) -> None:
    # `kwsniff read --records --memory-limit 64MiB` in a process of its own, its peak RSS read from
    # the kernel: the interpreter and pyarrow (about 100 MB) plus at most the limit.
    path = write_pcap(tmp_path / "bomb.pcap", bomb_capture(4_000_000))
    script = textwrap.dedent(
        f"""
        import sys
        from kwsniff.cli import main
        try:
            main(["read", {str(path)!r}, "--out", {str(tmp_path / "out")!r}, "--records",
                  "--memory-limit", "64MiB", "--quiet"])
        except SystemExit as exc:
            code = exc.code
        else:
            code = 0
        # VmHWM, not ru_maxrss: Linux keeps ru_maxrss across fork and exec, so a child of a large
        # pytest process would report the parent's size.
        hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1]
        print(code, int(hwm) // 1024)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=dict(os.environ)
    )
    code, peak_mb = done.stdout.split()
    assert code in ("0", "None"), done.stderr
    assert int(peak_mb) < 100 + 64 + 64  # base + limit + the 28 MB bomb decompressed (one batch)


# -- held records: one-way payloads ------------------------------------------------------------------
def test_records_held_for_responses_that_never_come_are_written_early_and_counted(tmp_path: Path) -> None:
    # Ten Produce requests of 4 records of 1 MiB each, no response: every request holds 4 MiB 4.8 KB of
    # records, so a 16 MiB records pool holds three; each later request writes the oldest one's
    # records at once (offset unknown) instead of holding them to the end.
    path = write_pcap(tmp_path / "oneway.pcap", one_way_produce(10, 4, MIB))
    options = SessionOptions(records=True, record_payloads=True, memory_limit=64 * MIB)
    sink, result, peak = traced_run(path, options)
    assert sink.counts["records"] == 40
    assert sink.record_offsets == {None}
    assert result.status["unanswered"] == 10
    assert result.totals["records_written_early"] == 28  # requests 1-7; 8, 9 and 10 at the end
    held = 4 * RECORD_COST + len(one_way_batch_body())
    assert result.totals["records_written_early_bytes"] == 7 * held
    assert 3 * held <= 16 * MIB < 4 * held


def one_way_batch_body() -> bytes:
    from memory_captures import record

    return b"".join(record(b"v" * MIB, i) for i in range(4))


def test_written_early_shows_in_the_summary(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from kwsniff.cli import main

    path = write_pcap(tmp_path / "oneway.pcap", one_way_produce(10, 4, MIB))
    out = CliRunner().invoke(
        main,
        ["read", str(path), "--out", str(tmp_path / "t"), "--record-payloads", "--memory-limit", "64MiB"],
    )
    assert out.exit_code == 0, out.output
    assert "  evicted: 28 records written before their response (29.4 MB, offsets unknown)\n" in out.output


# -- flows ---------------------------------------------------------------------------------------------
FLOWS_N = 20_000
EVICTED_N = 19_261


def expected_evictions(flows: int, max_entries: int) -> int:
    """What Session._evict_oldest does to a stream of single-packet flows: at a full table, evict
    the oldest down to 7/8 of it."""
    open_, evicted = 0, 0
    target = int(max_entries * 7 / 8)
    for _ in range(flows):
        if 2 * open_ >= max_entries:
            n = (2 * open_ - target) // 2 + 1
            open_ -= n
            evicted += n
        open_ += 1
    return evicted


def test_single_packet_flows_are_evicted_oldest_first_with_exact_counts() -> None:
    # 20,000 flows against a 16 MiB limit (room for 819 connections) stand for a million against
    # the default 1 GiB (bench/bench_memory.py runs that one).
    budget = MemoryBudget(16 * MIB)
    max_entries = 2 * (budget.cap(FLOWS) // CONNECTION_COST)  # 2 * 819 connections
    sink = CountingSink()
    session = Session("flows", sink, SessionOptions(memory_limit=16 * MIB))
    tracemalloc.start()
    try:
        most = 0
        for ts, data in single_packet_flows(FLOWS_N):
            session.packet(ts, LINKTYPE_RAW, data)
            most = max(most, len(session.flows))
        peak = tracemalloc.get_traced_memory()[1]
        stats = session.finish()
    finally:
        tracemalloc.stop()
    evicted = expected_evictions(FLOWS_N, max_entries)
    assert evicted == EVICTED_N
    assert stats.evicted_connections == evicted
    assert sink.counts["connections"] == FLOWS_N
    assert sink.expired == {"memory": evicted, None: FLOWS_N - evicted}
    assert most <= max_entries
    assert session.budget.used(FLOWS) <= budget.cap(FLOWS)
    assert peak < 16 * MIB
    # The oldest went first: the first connection was evicted, the last one lived to the end.
    assert (sink.connections[0]["client_ip"], sink.connections[0]["expired"]) == ("10.1.0.0", "memory")


def test_read_expires_idle_flows_by_capture_time(tmp_path: Path) -> None:
    # Connection A sends one SYN; B sends one every 100 s of capture time for 20 minutes. After 900 s
    # of silence A is closed as idle at the next sweep (every 120 s of capture time); B is not.
    a = (bytes([10, 0, 0, 1]), 40001)
    b = (bytes([10, 0, 0, 3]), 40002)
    t0 = 1_700_000_000_000_000
    packets = [(t0, tcp(a, BROKER, 1, 0, SYN))]
    packets += [(t0 + k * 100_000_000, tcp(b, BROKER, 1, 0, SYN)) for k in range(1, 13)]
    path = write_pcap(tmp_path / "idle.pcap", packets)
    sink, result, _ = traced_run(path, SessionOptions())
    assert sink.expired == {"idle": 1, None: 1}
    assert [(c["client_port"], c["expired"], c["ts_last"]) for c in sink.connections] == [
        (40001, "idle", t0),
        (40002, None, t0 + 1_200_000_000),
    ]
    assert result.stats.idle_connections == 1
    # 0 turns it off.
    sink, result, _ = traced_run(path, SessionOptions(idle_timeout_us=0))
    assert sink.expired == {None: 2} and result.stats.idle_connections == 0


# -- reassembly -------------------------------------------------------------------------------------
def test_the_connection_holding_the_most_reassembly_bytes_is_evicted_first(tmp_path: Path) -> None:
    # A 64 MiB limit leaves reassembly 16 MiB. Connection B holds 6 MB of a 50 MiB frame, then A
    # sends 64,000-byte packets of another: with A's 169th packet the pool holds more than 16 MiB,
    # and A, now the larger (10.8 MB), is evicted; B keeps its partial frame.
    b_size, a_packets = 94 * 64_000, 169
    path = write_pcap(tmp_path / "big.pcap", big_partial_frames([b_size, a_packets * 64_000]))
    sink, result, _ = traced_run(path, SessionOptions(memory_limit=64 * MIB))
    assert result.stats.evicted_connections == 1
    assert result.stats.evicted_bytes == a_packets * 64_000  # its partial frame, size prefix included
    by_port = {c["client_port"]: c for c in sink.connections}
    assert by_port[41001]["expired"] == "memory"
    assert by_port[41000]["expired"] is None
    # Nothing is lost from the accounting: the evicted partial frame is a frame cut by an edge.
    evicted = by_port[41001]
    assert evicted["stream_bytes_to_broker"] == evicted["frame_bytes_to_broker"] == a_packets * 64_000
    assert result.stats.accounting_mismatches == 0


# -- the live queue ---------------------------------------------------------------------------------
def test_the_queue_is_bounded_in_bytes() -> None:
    q = ByteQueue(max_bytes=128 * MIB, max_items=512)
    q.put_nowait("a", 90 * MIB)
    with pytest.raises(queue.Full):
        q.put_nowait("b", 90 * MIB)  # 180 MiB would be past the share
    q.put(None)  # the end marker always fits
    assert q.held == 90 * MIB
    assert q.get(timeout=1) == "a"
    assert q.held == 0
    q.put_nowait("c", 90 * MIB)
    assert q.peak == 90 * MIB


def test_live_frames_of_90_mib_wait_in_the_queue_only_up_to_its_share() -> None:
    # A 4 GiB limit gives the queue 128 MiB: one batch of 90 MiB waits, the four that come while
    # the decoder is busy are dropped and counted, packet by packet.
    share = MemoryBudget(4 * 1024 * MIB).cap(QUEUE)
    live = LiveCapture(FramesHandle(5), queue_bytes=share)
    packets = 90 * MIB // FramesHandle.PACKET
    live.start()
    for _ in range(100):  # until all five batches were read (at most 10 s)
        c = live.snapshot()
        if c.captured + c.queue_drops == 5 * packets:
            break
        live.join(0.1)
    live.stop()
    live.join(5)
    assert not live.running
    c = live.snapshot()
    assert (c.captured, c.queue_drops) == (packets, 4 * packets)
    assert live.queue.peak == 90 * MIB <= share
    linktype, batch = live.queue.get(timeout=1)
    assert (linktype, len(batch)) == (LINKTYPE_RAW, packets)


# -- every charge is released -------------------------------------------------------------------------
REPOSITORY_CAPTURES = sorted(
    p
    for p in (*(TESTS / "data" / "captures").iterdir(), *(TESTS / "data" / "hostile").iterdir())
    if p.suffix in (".pcap", ".pcapng", ".gz")
)


@pytest.mark.parametrize("path", REPOSITORY_CAPTURES, ids=lambda p: p.name)
def test_every_charge_is_released_by_the_end_of_a_capture(path: Path) -> None:
    # A pool that kept a charge nobody releases would look full for ever and evict for nothing.
    from kwsniff.capture import CaptureError, open_capture

    for options in (SessionOptions(), SessionOptions(records=True, record_payloads=True)):
        session = Session(path.name, CountingSink(), options)
        try:
            with open_capture(path) as reader:
                for ts, linktype, data in reader.packets():
                    session.packet(ts, linktype, data)
        except CaptureError:
            pass  # a hostile file cut short: what was read is still settled by finish
        session.finish()
        held = session.budget.snapshot()
        assert (held["reassembly"], held["records"], len(session.rows.holding)) == (0, 0, 0)


def test_give_back_returns_the_memory_the_allocator_holds_free_to_the_system() -> None:
    """A capture's coordinator grew about 0.4 MiB a minute for hours with its live objects flat:
    memory freed by each commit, kept mapped by glibc between live pieces (a gdb call of
    malloc_trim(0) in the soak's coordinator at minute 42 took it from 224 to 205 MiB). In a child
    process (its own heap): 200 MB of 1 KB blocks, every hundredth kept, the rest freed, stay
    resident until give_back() hands them back."""
    script = textwrap.dedent(
        """
        import gc
        from kwsniff.memory import give_back

        def rss_mib():
            for line in open("/proc/self/status"):
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) // 1024

        blocks = [bytes(1024) + bytes([i % 256]) for i in range(200_000)]
        kept = blocks[::100]
        del blocks
        gc.collect()
        freed = rss_mib()
        print(freed, give_back(), rss_mib(), len(kept))

        import pyarrow as pa  # Arrow's pool (mimalloc) keeps what Arrow freed, as the compaction's

        arrays = [pa.array(range(i, i + 1_000_000)) for i in range(40)]  # 320 MB of int64
        del arrays
        held = rss_mib()
        print(pa.default_memory_pool().bytes_allocated(), held, give_back(), rss_mib())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    heap, arrow = done.stdout.splitlines()
    before, gave, after, kept = heap.split()
    assert (gave, kept) == ("True", "2000")
    assert int(before) - int(after) >= 150  # of the ~200 MiB freed, at least 150 given back
    allocated, held, gave, after = arrow.split()
    assert (allocated, gave) == ("0", "True")  # nothing of Arrow's live, yet held until given back
    assert int(held) - int(after) >= 250  # of the 320 MB Arrow freed, at least 250 MiB given back
