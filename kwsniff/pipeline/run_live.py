"""The decode side of a live capture: batches from the capture thread through a Session into a
rotating Parquet sink, with idle connections expired, capture_stats per period, the raw packets
optionally written to a pcap, and the live stats and metrics fed per batch."""

from __future__ import annotations

import gc
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kwsniff.capture.live import CaptureCounters, LiveCapture
from kwsniff.capture.pcap_periods import PeriodPcapWriter
from kwsniff.capture.pcap_writer import PcapWriter
from kwsniff.memory import ROWS, MemoryBudget
from kwsniff.pipeline.loop import fed, linked, to_end
from kwsniff.pipeline.session import Session, SessionOptions, SessionStats
from kwsniff.sinks.dataset import Output
from kwsniff.sinks.delta_output import DeltaOutput
from kwsniff.sinks.rotating import RotatingSink
from kwsniff.view.metrics import Metrics
from kwsniff.view.stats import LiveStats, StatsSink

EXPIRE_EVERY_S = 5.0  # how often idle connections are looked for


@dataclass
class LiveOptions:
    out: Path | Output | DeltaOutput  # an output: each period committed whole
    name: str
    tables: tuple[str, ...]
    rotate_s: float
    idle_s: float
    write_pcap: Path | None = None
    snaplen: int = 262144
    worker: int = 0  # this decoder's worker number (capture_stats.worker)
    file_name: str | None = None  # the Parquet files' name when it is not ``name`` (a worker's)


class LiveDecoder:
    """Runs in a thread of its own until the capture's queue ends (after :meth:`LiveCapture.stop`).

    ``clock`` is wall-clock seconds (time.time); rotation and capture_stats use it, idle expiry uses
    the packets' own timestamps."""

    def __init__(
        self,
        capture: LiveCapture,
        session_options: SessionOptions,
        options: LiveOptions,
        stats: LiveStats,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.capture = capture
        self.options = options
        self.stats = stats
        self.metrics = metrics
        self.clock = clock
        self.sink = RotatingSink(
            options.out,
            options.file_name or options.name,
            options.tables,
            options.rotate_s,
            clock(),
            self._period_row,
            row_buffer_bytes=MemoryBudget(session_options.memory_limit).cap(ROWS),
        )
        self.session = Session(options.name, StatsSink(self.sink, stats), session_options)
        # A worker of `capture --workers N` writes one file per period instead (live_worker.py).
        self.pcap: PcapWriter | PeriodPcapWriter | None = (
            PcapWriter(options.write_pcap, capture.linktype, options.snaplen) if options.write_pcap else None
        )
        self.decoded = 0
        self.error: BaseException | None = None
        self.result: SessionStats | None = None
        self._period_counters = CaptureCounters()
        self._thread = threading.Thread(target=self._run, name="kwsniff-decode", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def open_connections(self) -> int:
        return self.session.open_connections()

    def _run(self) -> None:
        # What exists before the first packet (the modules, the decoders, this session) lives as
        # long as the capture: frozen, the cyclic collector's full passes no longer walk it. Those
        # passes stop every thread (the capture thread too) for a time that grows with what they
        # walk, and a pause longer than the kernel ring holds at the packet rate drops packets.
        gc.freeze()
        try:
            self._loop()
            self.before_finish()
            self.result = self.session.finish()
            self._publish()
            self.sink.close(self.clock())
        except BaseException as err:  # noqa: BLE001 - reported by the command after the threads stop
            self.error = err
            # Keep what was decoded: the period's rows so far are closed into place, unless the
            # sink itself is what failed (a full disk), where its temporary files are dropped.
            try:
                self.sink.close(self.clock())
            except BaseException:  # noqa: BLE001
                self.sink.abort()
            # Keep draining so the capture thread can always put its end marker.
            while self.capture.queue.get() is not None:
                pass
        finally:
            if self.pcap is not None:
                self.pcap.close()
            gc.unfreeze()

    def before_batch(self) -> None:
        """Called before each batch is written and decoded (a worker applies the coordinator's
        rotations there: kwsniff.pipeline.live_worker)."""

    def before_finish(self) -> None:
        """Called once every packet is decoded, before the session ends (a worker waits there for
        what the other workers learned: kwsniff.pipeline.live_worker)."""

    def _loop(self) -> None:
        feed = self.session.packet
        get = self.capture.queue.get
        idle_us = int(self.options.idle_s * 1_000_000)
        last_expire = self.clock()
        last_ts = 0
        while True:
            try:
                item = get(timeout=0.2)
            except queue.Empty:
                item = (0, [])
            if item is None:
                return
            linktype, packets = item
            if packets:
                self.before_batch()
                if self.pcap is not None:
                    self.pcap.write(packets)
                to_end(fed(linked(linktype, packets), feed))
                self.decoded += len(packets)
                last_ts = packets[-1][0]
            now = self.clock()
            if idle_us and now - last_expire >= EXPIRE_EVERY_S:
                last_expire = now
                # The capture clock moves with the packets; when none come it moves with the wall clock.
                self.session.expire_idle(max(last_ts, int(now * 1_000_000)), idle_us)
            self._publish()
            self.sink.maybe_rotate(now)

    def _publish(self) -> None:
        if self.metrics is not None:
            self.metrics.update(self.capture.snapshot(), self.stats.take_pending(), self.open_connections())

    def _period_row(self, start: float, end: float) -> None:
        now = self.capture.snapshot()
        before, self._period_counters = self._period_counters, now
        self.sink.add(
            "capture_stats",
            {
                "capture": self.options.name,
                "period_start": int(start * 1_000_000),
                "period_end": int(end * 1_000_000),
                "packets": now.captured - before.captured,
                "bytes": now.captured_bytes - before.captured_bytes,
                "kernel_drops": now.kernel_drops - before.kernel_drops,
                "if_drops": now.if_drops - before.if_drops,
                "queue_drops": now.queue_drops - before.queue_drops,
                "worker": self.options.worker,
            },
        )
