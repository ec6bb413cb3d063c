"""`kwsniff capture --workers N` (N > 1): the capture spread over worker processes by AF_PACKET fanout
(kwsniff.pipeline.run_workers); the command's checks, live view and summary are capture.py's."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import click

from kwsniff.commands import messages
from kwsniff.commands.signals import stop_on_signals
from kwsniff.memory import MemoryBudget
from kwsniff.pipeline.live_worker import WorkerRun, WorkerSpec
from kwsniff.pipeline.run import CaptureResult
from kwsniff.pipeline.run_workers import WorkerPool, fanout_group, merge_results
from kwsniff.pipeline.session import SessionOptions
from kwsniff.sinks.dataset import Output
from kwsniff.sinks.delta_output import DeltaOutput
from kwsniff.view.metrics import Metrics
from kwsniff.view.stats import LiveStats, add_view_evictions
from kwsniff.view.summary import print_capture_line, print_summary


def capture_with_workers(
    run: WorkerRun,
    workers: int,
    output: Output | DeltaOutput,
    name: str,
    tables: tuple[str, ...],
    session: SessionOptions,
    keylog: tuple[Path, ...],
    queue_bytes: int,
    budget: MemoryBudget,
    metrics: Metrics | None,
    new_stats: Callable[[], LiveStats],
    quiet: bool,
    watch: Callable[..., None],
) -> int:
    """Runs the capture until a signal, --duration or a failure; the exit status. ``new_stats``
    makes the coordinator's LiveStats (as a one-process capture makes its own)."""
    if run.write_pcap is not None:
        # The period files are made by the coordinator later: a folder it cannot write is refused now.
        try:
            with tempfile.TemporaryFile(dir=run.write_pcap.parent or "."):
                pass
        except OSError as err:
            messages.error(f"--write-pcap {run.write_pcap}: {err.strerror or err}")
            return 1
    spool = output.spool()
    try:
        specs = [
            WorkerSpec(
                index=i,
                workers=workers,
                run=run,
                group=fanout_group(),
                spool=spool.path,
                name=name,
                tables=tables,
                session=session,
                keylog=keylog,
                queue_bytes=queue_bytes,
                metrics=metrics is not None,
            )
            for i in range(workers)
        ]
        stats = new_stats()

        def restarted(index: int, status: object) -> None:
            messages.warnings(
                run.iface, [f"capture worker {index} exited with status {status}: started again"]
            )
            if metrics is not None:
                metrics.increment_worker_restarts()  # kwsniff_worker_restarts_total

        pool = WorkerPool(specs, output, run.rotate_s, stats, metrics, on_restart=restarted)
        # Set before the workers start: a Ctrl-C while they open their sockets stops them cleanly.
        stop = stop_on_signals()
        started = time.monotonic()
        failure = pool.start()
        if failure is not None:
            messages.error(failure)
            return 1
        if not quiet:
            click.echo(
                f"kwsniff: capturing on {run.iface} with {workers} workers (filter {run.bpf!r}) into "
                f"{output.shown}",
                err=True,
            )
        watch(lambda: pool.running, pool.snapshot, pool.open_connections, stats, stop, started)
        pool.stop()
        pool.join()
    finally:
        spool.drop()
    if metrics is not None:
        metrics.close()
    for error in pool.errors:
        messages.error(f"{run.iface}: {error}")
    if not pool.results or len(pool.results) + pool.unstarted < workers:
        return 1
    result = merge_results(pool.results, name, time.monotonic() - started)
    add_view_evictions(result.totals, stats)
    if not quiet:
        _summary(result, pool, output.shown)
    return 1 if pool.errors else 0


def _summary(result: CaptureResult, pool: WorkerPool, out: Path | str) -> None:
    print_summary(result, out, dict(pool.counts))
    print_capture_line(pool.snapshot(), pool.seq, pool.per_worker())
    if pool.restarts:
        click.echo(
            f"  workers restarted: {pool.restarts} (each died and was started again; packets lost with them, "
            f"taken but not committed or never read from their sockets: at least {pool.lost_packets:,})"
        )
