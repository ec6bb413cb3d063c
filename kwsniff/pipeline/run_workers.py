"""The coordinator of a live capture spread over worker processes (`kwsniff capture --workers N`).

It starts the workers (:mod:`kwsniff.pipeline.live_worker`), waits until every one has joined the
fanout group, then starts them all at once. A thread of its own reads their messages:

- ``stats``: the rows' view fields go into the one LiveStats the live view and metrics read; each
  worker's counters are kept, and the view shows their sum (kernel drops per worker too);
  brokers a worker learned are passed on to the others;
- every ``rotate_s`` it asks each worker to close its period; once all have answered, their files
  are moved from the spool into the dataset's stage and committed together (docs/datasets.md), so a
  reader sees every worker's rows of a period or none of them;
- ``done`` (after :meth:`WorkerPool.stop` sent SIGTERM to each worker's PID): the last files, row
  counts and each worker's result, merged for the summary; then the last commit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import queue
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kwsniff.capture.live import CaptureCounters
from kwsniff.pipeline.live_worker import WorkerSpec, worker_main
from kwsniff.pipeline.run import CaptureResult
from kwsniff.sinks.dataset import Output, OutputError
from kwsniff.view.metrics import Metrics
from kwsniff.view.stats import LiveStats

READY_TIMEOUT_S = 60.0  # for every worker to open its socket (each imports kwsniff afresh)
STOP_TIMEOUT_S = 60.0  # for a stopped worker to decode what it holds and close its files
KILL_WAIT_S = 5.0


def fanout_group() -> int:
    """A fanout group id of this run: ids are per network namespace, 16 bits; the PID keeps two
    captures of one namespace apart (a clash is refused by the kernel when the modes differ)."""
    return os.getpid() & 0xFFFF


class WorkerPool:
    def __init__(
        self,
        specs: list[WorkerSpec],
        output: Output,
        rotate_s: float,
        stats: LiveStats,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.specs = specs
        self.output = output
        self.rotate_s = rotate_s
        self.stats = stats
        self.metrics = metrics
        self.clock = clock
        context = multiprocessing.get_context("spawn")  # no threads or open handles inherited
        self.events: Any = context.Queue()
        self.controls: list[Any] = [context.Queue() for _ in specs]
        self.processes = [
            context.Process(
                target=worker_main, args=(s, self.events, c), name=f"kwsniff-worker-{s.index}", daemon=True
            )
            for s, c in zip(specs, self.controls, strict=True)
        ]
        self.counters = [CaptureCounters() for _ in specs]
        self._open = [0 for _ in specs]
        self.results: list[CaptureResult] = []
        self.counts: Counter[str] = Counter()
        self.errors: list[str] = []
        self.seq = 0  # periods committed
        self.started = 0.0  # clock() when the workers were told to start
        self._done: set[int] = set()
        self._stopping = False
        self._awaiting: set[int] = set()  # workers yet to answer the current rotation
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="kwsniff-workers", daemon=True)

    # -- starting --------------------------------------------------------------------------------
    def start(self) -> str | None:
        """Start the workers and wait for each to join the group; None, or the first error (then
        every worker is stopped)."""
        for process in self.processes:
            process.start()
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
        self.started = self.clock()
        for control in self.controls:
            control.put(("start", self.started))
        self._thread.start()
        return None

    def _abort(self, message: str) -> str:
        for process in self.processes:
            if process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)
        self._reap()
        return message

    # -- what the view reads ----------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def snapshot(self) -> CaptureCounters:
        with self._lock:
            total = CaptureCounters()
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
            if index not in self._done and process.pid is not None and process.exitcode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)

    def join(self) -> None:
        self._thread.join(STOP_TIMEOUT_S + KILL_WAIT_S)
        self._reap()

    def _reap(self) -> None:
        for process in self.processes:
            process.join(KILL_WAIT_S)
            if process.exitcode is None:
                process.kill()  # by its PID
                process.join(KILL_WAIT_S)

    # -- the coordinator thread -------------------------------------------------------------------
    def _run(self) -> None:
        period_started = self.started
        try:
            while len(self._done) < len(self.processes):
                with contextlib.suppress(queue.Empty):
                    self._handle(self.events.get(timeout=0.2))
                self._notice_dead()
                now = self.clock()
                if self._awaiting and not self._awaiting - self._done:
                    self._awaiting.clear()
                    self._commit(again=True)
                # Once stopping, the last period is each worker's own until it is done.
                if not self._awaiting and not self._stopping and now - period_started >= self.rotate_s:
                    period_started = now
                    self._awaiting = set(range(len(self.processes))) - self._done
                    for index in self._awaiting:
                        self.controls[index].put(("rotate", now))
            self._commit(again=False)
        except OutputError as err:
            self.errors.append(str(err))
            self.stop()

    def _handle(self, message: tuple[Any, ...]) -> None:
        kind, index, *rest = message
        if kind == "stats":
            counters, open_connections, rows, learned = rest
            if learned:
                for other, control in enumerate(self.controls):
                    if other != index and other not in self._done:
                        control.put(("brokers", learned))
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
            self._awaiting.discard(index)
        elif kind == "done":
            files, counts, result = rest
            self._stage(files)
            self.counts.update(counts)
            if result is not None:
                self.results.append(result)
            self._done.add(index)
            self._open[index] = 0
        elif kind == "error":
            self.errors.append(f"worker {index}: {rest[0]}")

    def _notice_dead(self) -> None:
        """A worker that ended without saying it was done (killed, crashed) is counted as done."""
        for index, process in enumerate(self.processes):
            if index not in self._done and process.exitcode is not None:
                # Its last messages may still be in the queue: read them before deciding.
                with contextlib.suppress(queue.Empty):
                    while index not in self._done:
                        self._handle(self.events.get(timeout=0.5))
                if index not in self._done:
                    self.errors.append(f"worker {index} exited with status {process.exitcode}")
                    self._done.add(index)

    def _stage(self, files: list[str]) -> None:
        """A worker's closed files into the stage of the next commit (same filesystem: renames)."""
        for name in files:
            path = Path(name)
            target = self.output.stage / path.parent.name / path.name
            target.parent.mkdir(exist_ok=True)
            os.replace(path, target)

    def _commit(self, again: bool) -> None:
        self.output.commit(again=again)
        self.seq += 1


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
        if isinstance(values[0], dict):
            total: Counter[str] = Counter()
            for value in values:
                total.update(value)
            setattr(merged.stats, field.name, dict(total))
        else:
            setattr(merged.stats, field.name, sum(values))
    return merged
