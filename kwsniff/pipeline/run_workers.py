"""The coordinator of a live capture spread over worker processes (`kwsniff capture --workers N`).

It starts the workers (:mod:`kwsniff.pipeline.live_worker`), waits until every one has joined the
fanout group, then starts them all at once. A thread of its own reads their messages:

- ``stats``: the rows' view fields go into the one LiveStats the live view and metrics read; each
  worker's counters are kept, and the view shows their sum (kernel drops per worker too);
  brokers a worker learned, the node ids it learned for broker addresses and the names it learned
  for topic ids are passed on to the others;
- every ``rotate_s`` it asks each worker to close its period; once all have answered, their files
  are moved from the spool into the dataset's stage and committed together (docs/datasets.md), so a
  reader sees every worker's rows of a period or none of them. The `--write-pcap` periods keep to
  the grid start + k * rotate_s, each end announced to the workers a period ahead, so each packet
  goes to the file of the period its own time falls in;
- ``drained`` (a stopped worker's packets are decoded): once every worker not done is drained, each
  is told to ``finish`` (after the node ids the others learned: rows held for one are named alike
  in every worker);
- ``done`` (after :meth:`WorkerPool.stop` sent SIGTERM to each worker's PID): the last files, row
  counts and each worker's result, merged for the summary; then the last commit;
- a worker that ends otherwise (killed, crashed) is started again in its place within a second or
  so, counted in ``restarts``, its `--write-pcap` files of the open periods kept. Each worker sends
  its packet socket over a Unix socket once it joined the fanout group, and the coordinator keeps a
  copy until the end: a dead worker's socket then stays in the group, its slot taken (the steering
  program picks slots modulo the number of workers, kwsniff.capture.fanout), its packets left in its
  ring; the worker in its place joins as an extra member no packet is steered to, and once it has,
  the old socket is closed, the kernel moves the last member (the new one) into the freed slot, and
  every connection stays on the worker it was on. ``lost_packets``: what the dead worker had taken
  since it last handed in a period (its rows were never committed) plus what its socket received
  that it never read (the socket's own counters, read as it is closed). More than MAX_RESTARTS in
  RESTART_WINDOW_S stop the capture with an error.
- `--write-pcap`: the workers' files of each period, once all are in, are merged into one file in
  timestamp order by a thread of their own (kwsniff.capture.pcap_periods).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import multiprocessing
import os
import queue
import signal
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kwsniff.capture.fanout import SOL_PACKET
from kwsniff.capture.live import CaptureCounters
from kwsniff.capture.pcap_periods import PeriodMerger
from kwsniff.memory import give_back
from kwsniff.pipeline.live_worker import WorkerSpec, worker_main
from kwsniff.pipeline.run import CaptureResult
from kwsniff.rows.brokers import merged_disputes
from kwsniff.sinks.dataset import Output, OutputError
from kwsniff.sinks.delta_output import DeltaOutput
from kwsniff.view.metrics import Metrics
from kwsniff.view.stats import LiveStats

READY_TIMEOUT_S = 60.0  # for every worker to open its socket (each imports kwsniff afresh)
STOP_TIMEOUT_S = 60.0  # for a stopped worker to decode what it holds and close its files
KILL_WAIT_S = 5.0
SOCKET_WAIT_S = 5.0  # for a ready worker's packet socket on its channel
PACKET_STATISTICS = 6  # linux/if_packet.h: struct tpacket_stats(_v3), tp_packets first
MAX_RESTARTS = 5  # restarts of workers within RESTART_WINDOW_S before the capture gives up
RESTART_WINDOW_S = 600.0


def fanout_group() -> int:
    """A fanout group id of this run: ids are per network namespace, 16 bits; the PID keeps two
    captures of one namespace apart (a clash is refused by the kernel when the modes differ)."""
    return os.getpid() & 0xFFFF


def next_rotation(due: float, now: float, period_s: float) -> float:
    """The rotation after the one ``due`` (asked for at ``now``): the next point of the grid
    start + k * period_s at least half a period after now, so a late rotation (a slow commit, a busy
    machine) is followed by a period of about the usual length, never a very short one."""
    return due + max(1, math.floor((now + period_s / 2 - due) / period_s) + 1) * period_s


class WorkerPool:
    def __init__(
        self,
        specs: list[WorkerSpec],
        output: Output | DeltaOutput,
        rotate_s: float,
        stats: LiveStats,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
        on_restart: Callable[[int, int | None], None] | None = None,
    ) -> None:
        self.specs = specs
        self.on_restart = on_restart  # (worker, the dead one's exit status), as each is restarted
        self.output = output
        self.rotate_s = rotate_s
        self.stats = stats
        self.metrics = metrics
        self.clock = clock
        context = multiprocessing.get_context("spawn")  # no threads or open handles inherited
        self.events: Any = context.Queue()
        self.controls: list[Any] = [context.Queue() for _ in specs]
        self.context = context
        # Each worker's packets taken from the kernel, kept by the worker in shared memory.
        self.taken = [context.Value("q", 0, lock=False) for _ in specs]
        self._channels: dict[int, tuple[socket.socket, socket.socket]] = {}  # slot -> (ours, the worker's)
        self._held: dict[int, socket.socket] = {}  # slot -> our copy of its worker's packet socket
        self.processes = [self._process(s, c) for s, c in zip(specs, self.controls, strict=True)]
        self.counters = [CaptureCounters() for _ in specs]
        self.retired = CaptureCounters()  # the last counters of workers that died (in the totals)
        self.restarts = 0  # workers started again after one died
        self.lost_packets = 0  # taken by a worker that died, its rows not committed (a lower bound)
        self._restarted: list[float] = []  # monotonic times of the restarts
        self._handed = [0 for _ in specs]  # each worker's packets decoded when it last handed in a period
        self._starting: set[int] = set()  # restarted workers yet to be told to start
        self.unstarted = 0  # restarted workers stopped before they started capturing
        self._open = [0 for _ in specs]
        self.results: list[CaptureResult] = []
        self.counts: Counter[str] = Counter()
        self.errors: list[str] = []
        self.seq = 0  # periods committed
        self.started = 0.0  # clock() when the workers were told to start
        self._done: set[int] = set()
        self._drained: set[int] = set()  # workers waiting for `finish`
        self._finished: set[int] = set()  # told to finish
        self._stopping = False
        self._rotating = False  # a rotation was asked for and is not yet committed
        self._awaiting: set[int] = set()  # workers yet to answer the current rotation
        self._answered: set[int] = set()  # workers that closed their period at it
        # `--write-pcap`: each period's files of the workers, merged into one once all are in.
        target = specs[0].run.write_pcap if specs else None
        self.merger = PeriodMerger(target) if target is not None else None
        self._pcaps: dict[int, list[Path]] = {}  # period -> the workers' files so far
        self._period_starts: dict[int, float] = {}  # period -> its start, until merged
        self._pcap_period = 1  # the `--write-pcap` period the workers are in (the last one announced)
        self._pcap_end = 0.0  # its end, announced to them
        self._table_start = 0.0  # when the workers' current table period began (the last rotation)
        self._pcap_paths: set[Path] = set()  # every worker file handed to the merge
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="kwsniff-workers", daemon=True)

    # -- starting --------------------------------------------------------------------------------
    def start(self) -> str | None:
        """Start the workers and wait for each to join the group; None, or the first error (then
        every worker is stopped)."""
        for index, process in enumerate(self.processes):
            process.start()
            self._channels[index][1].close()  # the worker's end: in the worker now
        ready: set[int] = set()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while len(ready) < len(self.processes):
            try:
                kind, index, *rest = self.events.get(timeout=0.2)
            except queue.Empty:
                dead = [p for p in self.processes if p.exitcode is not None]
                if dead:
                    return self._abort(f"capture worker exited with status {dead[0].exitcode} while starting")
                if time.monotonic() > deadline:
                    return self._abort("the capture workers did not start in time")
                continue
            if kind == "error":
                return self._abort(rest[0])
            ready.add(index)
            self._hold_socket(index)
        self.started = self.clock()
        self._pcap_end = self.started + self.rotate_s
        self._table_start = self.started
        self._period_starts[1] = self.started
        self._period_starts[2] = self._pcap_end
        for control in self.controls:
            control.put(("start", self.started, 1, self._pcap_end))
        self._thread.start()
        return None

    def _process(self, spec: WorkerSpec, control: Any) -> Any:
        ours, theirs = self._channels[spec.index] = socket.socketpair()
        return self.context.Process(
            target=worker_main,
            args=(spec, self.events, control, self.taken[spec.index], theirs),
            name=f"kwsniff-worker-{spec.index}",
            daemon=True,
        )

    def _hold_socket(self, index: int) -> socket.socket | None:
        """Our copy of worker ``index``'s packet socket, sent once it joined the group (kept in
        ``_held``); the copy it replaces, if any, is returned, still open. None without one."""
        ours, _ = self._channels.pop(index)
        with ours:
            ours.settimeout(SOCKET_WAIT_S)
            try:
                _, fds, _, _ = socket.recv_fds(ours, 16, 1)
            except OSError:
                fds = []
        old = self._held.pop(index, None)
        if fds:
            self._held[index] = socket.socket(fileno=fds[0])
        elif old is not None:
            self._held[index] = old  # nothing new: the old slot stays as it is
            return None
        return old

    def _release_sockets(self) -> None:
        """Our copies of the packet sockets, closed once every worker is done: closing one while
        others still read would reshuffle the group's slots."""
        for sock in self._held.values():
            sock.close()
        self._held.clear()
        for ours, theirs in self._channels.values():
            ours.close()
            theirs.close()
        self._channels.clear()

    def _abort(self, message: str) -> str:
        for process in self.processes:
            if process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)
        self._reap()
        self._release_sockets()
        if self.merger is not None:
            self.merger.close()
        return message

    # -- what the view reads ----------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def snapshot(self) -> CaptureCounters:
        with self._lock:
            total = dataclasses.replace(self.retired)
            for c in self.counters:
                for field in dataclasses.fields(c):
                    name = field.name
                    setattr(total, name, getattr(total, name) + getattr(c, name))
            return total

    def per_worker(self) -> list[CaptureCounters]:
        with self._lock:
            return list(self.counters)

    def open_connections(self) -> int:
        return sum(self._open)

    # -- stopping ---------------------------------------------------------------------------------
    def stop(self) -> None:
        """SIGTERM to each worker's PID: each stops capturing, decodes what it holds, closes its files."""
        self._stopping = True
        for index, process in enumerate(self.processes):
            if index in self._starting:
                # Still starting: SIGTERM could come before it sets its handler; told instead.
                self.controls[index].put(("stop",))
            elif index not in self._done and process.pid is not None and process.exitcode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)

    def join(self) -> None:
        self._thread.join(STOP_TIMEOUT_S + KILL_WAIT_S)
        self._reap()
        self._release_sockets()
        if self.merger is not None:
            self.merger.close()
            self.errors += self.merger.errors

    def _reap(self) -> None:
        for process in self.processes:
            process.join(KILL_WAIT_S)
            if process.exitcode is None:
                process.kill()  # by its PID
                process.join(KILL_WAIT_S)

    # -- the coordinator thread -------------------------------------------------------------------
    def _run(self) -> None:
        # Rotations keep to the grid start + k * rotate_s (a late one does not push the next).
        due = self.started + self.rotate_s
        try:
            while len(self._done) < len(self.processes):
                wait = 0.2 if self._rotating or self._stopping else min(0.2, max(0.0, due - self.clock()))
                with contextlib.suppress(queue.Empty):
                    self._handle(self.events.get(timeout=wait))
                self._notice_dead()
                if self._rotating and not self._awaiting - self._done:
                    # Every worker closed its period (or is gone): its files go in as one commit.
                    # A rotation no worker answered (all stopped first) was no period of its own.
                    self._rotating = False
                    self._awaiting.clear()
                    if self._answered:
                        self._commit(again=True)
                now = self.clock()
                # Once stopping, the last period is each worker's own until it is done.
                if not self._rotating and not self._stopping and now >= due:
                    # The `--write-pcap` period ends at ``due`` (announced), the next one's end is
                    # announced now: a worker then files each packet by its own time.
                    end, due = due, next_rotation(due, now, self.rotate_s)
                    self._rotating = True
                    self._awaiting = set(range(len(self.processes))) - self._done - self._starting
                    self._answered = set()
                    self._pcap_period += 1
                    self._pcap_end = due
                    self._table_start = now
                    self._period_starts[self._pcap_period + 1] = due
                    for index in self._awaiting:
                        self.controls[index].put(("rotate", now, end, due))
            self._commit(again=False)
        except OutputError as err:
            self.errors.append(str(err))
            self.stop()

    def _handle(self, message: tuple[Any, ...]) -> None:
        kind, index, *rest = message
        if kind == "stats":
            counters, open_connections, rows, learned, node_ids, names = rest
            for kind, news in (("brokers", learned), ("node_ids", node_ids), ("topic_names", names)):
                if news:
                    for other, control in enumerate(self.controls):
                        if other != index and other not in self._done:
                            control.put((kind, news))
            for table, row in rows:
                self.stats.row(table, row)
            with self._lock:
                self.counters[index] = counters
            self._open[index] = open_connections
            if self.metrics is not None:
                self.metrics.update(self.snapshot(), self.stats.take_pending(), self.open_connections())
                self.metrics.update_workers(self.per_worker())
        elif kind == "period":
            self._stage(rest[0])
            self._add_pcaps(rest[1])
            self._handed[index] = rest[2]
            self._awaiting.discard(index)
            self._answered.add(index)
        elif kind == "ready" and index in self._starting and not self._stopping:
            # A worker started in place of one that died (once stopping, it was told to stop). It
            # joined the group as an extra member; closing the dead one's socket moves it into the
            # dead one's slot. What that socket received and nobody read is lost.
            self._starting.discard(index)
            old = self._hold_socket(index)
            if old is not None:
                with old, contextlib.suppress(OSError):
                    self.lost_packets += struct.unpack_from(
                        "I", old.getsockopt(SOL_PACKET, PACKET_STATISTICS, 12)
                    )[0]
            self.controls[index].put(("start", self._table_start, self._pcap_period, self._pcap_end))
        elif kind == "drained":
            self._drained.add(index)
            self._finish_drained()
        elif kind == "done":
            files, counts, result, pcaps = rest
            self._stage(files)
            self._add_pcaps(pcaps)
            self.counts.update(counts)
            if result is not None:
                self.results.append(result)
            elif self.specs[index].generation:
                self.unstarted += 1
            self._done.add(index)
            self._open[index] = 0
        elif kind == "error":
            self.errors.append(f"worker {index}: {rest[0]}")

    def _notice_dead(self) -> None:
        """A worker that ended without saying it was done (killed, crashed) is started again in its
        place while the capture runs (:meth:`_restart`); once stopping, it is counted as done."""
        for index, process in enumerate(self.processes):
            if index not in self._done and process.exitcode is not None:
                # Its last messages may still be in the queue: read them before deciding (for half a
                # second at most: the others' messages keep coming).
                deadline = time.monotonic() + 0.5
                with contextlib.suppress(queue.Empty):
                    while index not in self._done and time.monotonic() < deadline:
                        self._handle(self.events.get(timeout=0.1))
                if index in self._done:
                    continue
                if not self._stopping and index not in self._starting and self._may_restart(index, process):
                    self._restart(index)
                    if self.on_restart is not None:
                        self.on_restart(index, process.exitcode)
                    continue
                if not any(e.startswith(f"worker {index} ") for e in self.errors):
                    self.errors.append(f"worker {index} exited with status {process.exitcode}")
                self._done.add(index)
                self._starting.discard(index)
                self._awaiting.discard(index)
                self._open[index] = 0
                self._finish_drained()

    def _may_restart(self, index: int, process: Any) -> bool:
        """False, with the error said, after MAX_RESTARTS within RESTART_WINDOW_S (then every
        worker is stopped): a worker that keeps dying is not hidden by restarting it for ever."""
        now = time.monotonic()
        self._restarted = [t for t in self._restarted if now - t < RESTART_WINDOW_S]
        if len(self._restarted) < MAX_RESTARTS:
            return True
        self.errors.append(
            f"worker {index} exited with status {process.exitcode}, after {len(self._restarted)} workers "
            f"were restarted within {RESTART_WINDOW_S:.0f} s: not restarted, the capture stops"
        )
        self.stop()
        return False

    def _restart(self, index: int) -> None:
        """A worker in place of worker ``index``, which died: what it took since it last handed in
        a period is counted lost (its rows were never committed; what its ring held then is not
        known), its `--write-pcap` files of the open periods are kept (each written a batch at a
        time), and the new one joins the fanout group and starts in the current period."""
        self._restarted.append(time.monotonic())
        self.restarts += 1
        with self._lock:
            dead = self.counters[index]
            taken = max(self.taken[index].value, dead.captured)
            self.lost_packets += max(0, taken - self._handed[index])
            self.taken[index].value = 0
            for field in dataclasses.fields(dead):
                name = field.name
                setattr(self.retired, name, getattr(self.retired, name) + getattr(dead, name))
            self.counters[index] = CaptureCounters()
        self._handed[index] = 0
        self._open[index] = 0
        self._awaiting.discard(index)  # a rotation in progress no longer waits for it
        spec = self.specs[index]
        if self.merger is not None:  # its files it had not handed in
            self._add_pcaps(
                (int(path.stem.rsplit("-", 1)[1]), str(path))
                for path in sorted((spec.spool / "pcap").glob(f"{spec.tag}-*.pcap"))
                if path not in self._pcap_paths
            )
        self.specs[index] = spec = dataclasses.replace(spec, generation=spec.generation + 1)
        self.controls[index] = self.context.Queue()
        self.processes[index] = self._process(spec, self.controls[index])
        self._starting.add(index)
        self.processes[index].start()
        self._channels[index][1].close()

    def _finish_drained(self) -> None:
        """Once every worker not done is drained, each is told to finish: its control queue then
        holds every node id the others sent before (a worker's stats come before its `drained`)."""
        if set(range(len(self.processes))) - self._done <= self._drained:
            for index in self._drained - self._done - self._finished:
                self.controls[index].put(("finish",))
                self._finished.add(index)

    def _stage(self, files: list[str]) -> None:
        """A worker's closed files into the stage of the next commit (same filesystem: renames)."""
        for name in files:
            path = Path(name)
            target = self.output.stage / path.parent.name / path.name
            target.parent.mkdir(exist_ok=True)
            os.replace(path, target)

    def _add_pcaps(self, pcaps: Iterable[tuple[int, str]]) -> None:
        for period, name in pcaps:
            path = Path(name)
            self._pcap_paths.add(path)
            self._pcaps.setdefault(period, []).append(path)

    def _commit(self, again: bool) -> None:
        self.output.commit(again=again)
        self.seq += 1
        self._merge_pcaps(last=not again)
        give_back()  # what the commit freed, returned to the system (kwsniff.memory.give_back)

    def _merge_pcaps(self, last: bool) -> None:
        """Hand the periods whose files every worker has sent to the merger: a worker's file of a
        period closes at the rotation after it (packets older than a boundary may still be queued),
        so at a commit all periods before the one that just ended are complete; at the end, all."""
        if self.merger is None:
            return
        for period in sorted(p for p in self._pcaps if last or p < self.seq):
            start = self._period_starts.pop(period, self.started)
            self.merger.add(period, start, self._pcaps.pop(period))


def merge_results(results: list[CaptureResult], name: str, seconds: float) -> CaptureResult:
    """The workers' results as one capture's: counters added up (each connection was in one worker)."""
    first = results[0]
    merged = dataclasses.replace(
        first,
        name=name,
        path=name,
        seconds=seconds,
        stats=dataclasses.replace(first.stats),
        status=Counter(),
        totals=Counter(),
        decode_errors=Counter(),
        notes=Counter(),
        record_damage=Counter(),
        file_bytes=sum(r.file_bytes for r in results),
        undecodable_frames=sum(r.undecodable_frames for r in results),
    )
    for r in results:
        for counter in ("status", "totals", "decode_errors", "notes", "record_damage"):
            getattr(merged, counter).update(getattr(r, counter))
    for field in dataclasses.fields(first.stats):
        values = [getattr(r.stats, field.name) for r in results]
        if field.name == "broker_disputes":  # who claimed what, not counters
            merged.stats.broker_disputes = merged_disputes(values)
        elif isinstance(values[0], dict):
            total: Counter[str] = Counter()
            for value in values:
                total.update(value)
            setattr(merged.stats, field.name, dict(total))
        else:
            setattr(merged.stats, field.name, sum(values))
    return merged
