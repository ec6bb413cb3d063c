"""`kwsniff capture IFACE`: live capture to rotating Parquet tables, with a live view and metrics."""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from kwsniff import codecache
from kwsniff.capture.live import CaptureCounters, LiveCapture, LiveCaptureError, open_interface
from kwsniff.commands import messages
from kwsniff.commands.fields import options_of
from kwsniff.commands.options import (
    BYTE_SIZE,
    PORT,
    Decoding,
    broker_ports,
    decoding_options,
    idle_timeout_option,
    session_options,
)
from kwsniff.commands.signals import stop_on_signals
from kwsniff.commands.values import BoundedInt, Checked, Duration, seconds
from kwsniff.core.options import ReadOptions
from kwsniff.core.values import out_location
from kwsniff.defaults import DEFAULT_BROKER_PORT, DEFAULT_METRICS_MAX_SERIES
from kwsniff.memory import QUEUE, MemoryBudget
from kwsniff.pipeline.run import capture_result
from kwsniff.tables import DEFAULT_TABLES
from kwsniff.view.group_status import STATUS_WINDOW
from kwsniff.view.screen import log_line, render
from kwsniff.view.stats import LiveStats, add_view_evictions
from kwsniff.view.summary import print_capture_line, print_summary

if TYPE_CHECKING:
    from kwsniff.pipeline.run_live import LiveDecoder

VIEW_INTERVAL_S = 1.0  # live view refresh on a terminal
LOG_INTERVAL_S = 10.0  # one log line this often when stderr is not a terminal
JOIN_TIMEOUT_S = 30.0


def default_filter(ports: frozenset[int], tunnels: dict | None = None) -> str:
    """tcp port of each broker port, and whatever may carry Kafka inside: the tunnel UDP ports, GRE,
    IP in IP, IP fragments and MPLS. The inner broker port is not filtered in the kernel (VXLAN's
    inner IP header has a variable length), so all tunnelled traffic reaches kwsniff and its
    non-Kafka flows cost a parse each in Python."""
    tcp = [f"tcp port {p}" for p in sorted(ports)]
    if tunnels is None:
        return " or ".join(tcp)
    udp = [f"udp port {p}" for p in sorted(tunnels["vxlan_ports"] | tunnels["geneve_ports"])]
    carriers = [
        "ip proto 47",
        "ip proto 4",
        "ip proto 41",
        "ip6 proto 47",
        "ip6 proto 4",
        "ip6 proto 41",
        "ip6 proto 44",
        "(ip[6:2] & 0x3fff != 0)",
        "mpls",  # last: `mpls` shifts the offsets of what follows it
    ]
    return " or ".join(tcp + udp + carriers)


@click.command()
@click.argument("iface")
@click.option(
    "--out",
    "-o",
    type=Checked(out_location, "path|uri"),
    required=True,
    help="Directory of the datasets, or Delta tables at s3://bucket/prefix or file:///path (docs/delta.md).",
)
@click.option("--overwrite", is_flag=True, help="Replace the dataset already in --out.")
@click.option("--append", is_flag=True, help="Add to the dataset already in --out.")
@options_of(ReadOptions, "host", "storage_option")
# Unlike `read`, the kernel filter decides what reaches the decoder: by default only broker ports, so
# auto-detection of other ports sees traffic only under a wider --filter.
@click.option(
    "--broker-port",
    "-p",
    type=PORT,
    multiple=True,
    help=f"TCP port a broker listens on (repeatable; default {DEFAULT_BROKER_PORT}). The default "
    "--filter passes only these ports.",
)
@click.option(
    "--filter",
    "bpf",
    help="Kernel (BPF) filter [default: 'tcp port P or ...' for each --broker-port, plus tunnel "
    "carriers (the tunnel UDP ports, GRE, IP in IP, IP fragments, MPLS), so no other traffic is seen; "
    "give e.g. 'tcp' to let kwsniff detect Kafka on other ports too].",
)
@decoding_options
@click.option("--duration", type=seconds(zero=False), help="Stop after this many seconds.")
@click.option("--count", type=BoundedInt(1), help="Stop after this many packets.")
@click.option(
    "--rotate-seconds",
    type=seconds(zero=False),
    default=60.0,
    show_default=True,
    help="Close the Parquet files and start new ones this often.",
)
@click.option(
    "--retain",
    type=Duration(),
    default=None,
    help="With Delta tables (an s3:// or file:// --out): keep this long (e.g. 7d), deleting this host's "
    "older days each hour; every hour, the finished hours' files are compacted (docs/delta.md).",
)
@click.option(
    "--write-pcap", type=click.Path(path_type=Path), help="Also write the raw packets to this pcap."
)
@click.option("--snaplen", type=BoundedInt(64, 262144), default=262144, show_default=True)
@click.option(
    "--buffer-mb",
    type=BoundedInt(1, 2047),  # pcap_set_buffer_size takes an int of bytes
    default=64,
    show_default=True,
    help="Kernel ring size (MiB).",
)
@click.option("--metrics-port", type=PORT, help="Serve Prometheus metrics on this port.")
@click.option(
    "--metrics-max-series",
    type=BoundedInt(1),
    default=DEFAULT_METRICS_MAX_SERIES,
    show_default=True,
    help="Most metric series whose labels come from the wire (broker, topic, group, partition, client "
    "id, an API or error code no Kafka release names; client ids at most half); updates past it, or "
    "past the metrics' share of --memory-limit, are dropped and counted in "
    "kwsniff_metrics_series_dropped_total.",
)
@click.option("--metrics-addr", default="127.0.0.1", show_default=True, help="Address of the metrics server.")
@click.option(
    "--group-status-seconds",
    type=seconds(zero=False),
    default=STATUS_WINDOW / 1_000_000,
    show_default=True,
    help="Window of kwsniff_consumer_group_status: a group behind with no commit for this long is STOP; "
    "STALL and WARN are judged on the commits of the last this long (packet time).",
)
@click.option(
    "--group-expiry",
    type=Duration(),
    default="7d",
    show_default=True,
    help="Forget a consumer group not seen acting (committing, fetching, joining) for this long, "
    "packet time: its lag, status and members series are removed.",
)
@idle_timeout_option("Close connections silent this long (seconds; 0: never), so their rows are written.")
@click.option(
    "--max-frame-size", type=BYTE_SIZE, default=100 * 1024 * 1024, show_default="100MiB", hidden=True
)
@click.option("--quiet", "-q", is_flag=True, help="Print only errors: no start line, live view or summary.")
@click.option(
    "--workers",
    type=BoundedInt(1, 64),
    help="Capture and decode in this many processes sharing the packets by flow (AF_PACKET fanout) "
    "[default: one per core; 1 with --count]. 1: one process, a capture thread and a decode thread.",
)
def capture(
    iface: str,
    out: Path | str,
    retain: float | None,
    host: str | None,
    storage_option: tuple[tuple[str, str], ...],
    overwrite: bool,
    append: bool,
    broker_port: tuple[int, ...],
    decoding: Decoding,
    bpf: str | None,
    duration: float | None,
    count: int | None,
    rotate_seconds: float,
    write_pcap: Path | None,
    snaplen: int,
    buffer_mb: int,
    metrics_port: int | None,
    metrics_max_series: int,
    metrics_addr: str,
    group_status_seconds: float,
    group_expiry: float,
    idle_timeout: float,
    max_frame_size: int,
    quiet: bool,
    workers: int | None,
) -> None:
    """Capture Kafka traffic on IFACE into Parquet tables under --out, until Ctrl-C (or --duration/--count)."""
    # pyarrow and prometheus_client only when a capture starts: `kwsniff --help` stays light.
    from kwsniff.core.output import open_output
    from kwsniff.pipeline.run_live import LiveDecoder, LiveOptions
    from kwsniff.sinks import ExistingOutput, OutputError, arrow_without_pandas, stream_name
    from kwsniff.sinks.delta_output import DeltaOutput
    from kwsniff.sinks.delta_upkeep import HOUR_S
    from kwsniff.view.metrics import Metrics

    arrow_without_pandas()
    # The decoders this capture compiles are kept for the next run (kwsniff.codecache).
    codecache.use_directory(codecache.cache_dir(os.environ))

    ports = broker_ports(broker_port)
    bpf = bpf if bpf is not None else default_filter(ports, decoding.tunnels)
    # `captures` describes input files; a live capture's periods are in `capture_stats`.
    tables = (*(t for t in DEFAULT_TABLES if t != "captures"), "capture_stats")
    if overwrite and append:
        raise click.UsageError("--overwrite and --append exclude each other")
    if workers is None:
        workers = 1 if count else len(os.sched_getaffinity(0))
    if count and workers > 1:
        raise click.UsageError("--count needs --workers 1: workers share the packets, each counts its own")
    existing = (
        ExistingOutput.OVERWRITE if overwrite else ExistingOutput.APPEND if append else ExistingOutput.REFUSE
    )
    # Everything the user can get wrong is checked before a thread starts.
    try:
        handle = open_interface(iface, bpf, snaplen, buffer_mb * 1024 * 1024)
    except LiveCaptureError as err:
        messages.error(str(err))
        sys.exit(1)
    try:
        # Each rotation period is committed whole (docs/datasets.md), the first replacing the old
        # dataset under --overwrite: a capture that fails to start leaves --out as it was.
        output = open_output(
            out,
            existing,
            host=host,
            storage_options=storage_option,
            upkeep_s=HOUR_S,  # Delta tables: compacted (and kept --retain) each hour
            retain_s=retain,
        )
    except OutputError as err:
        handle.close()
        messages.error(str(err))
        sys.exit(1)
    if retain is not None and write_pcap is not None and isinstance(output, DeltaOutput):
        # The period pcaps follow the tables' retention (their files end where the next begins).
        from kwsniff.capture.pcap_periods import expire_periods

        output.after_upkeep = functools.partial(expire_periods, write_pcap, retain)
    # However the command ends (sys.exit included), what was staged and not committed is removed.
    click.get_current_context().call_on_close(output.close)
    # The live view's totals and the metrics' series are held in the view pool of this budget; the
    # sessions have budgets of their own, of the same limit (each worker's of its part of it).
    budget = MemoryBudget(decoding.memory_limit)
    metrics = None
    if metrics_port is not None:
        metrics = Metrics(metrics_max_series, budget)
        try:
            metrics.serve(metrics_port, metrics_addr)
        except OSError as err:
            handle.close()
            messages.error(f"--metrics-port {metrics_port}: {err.strerror or err}")
            sys.exit(1)
        output.on_commit = metrics.committed
    new_stats = functools.partial(
        LiveStats,
        collect_pending=metrics is not None,
        budget=budget,
        status_window=round(group_status_seconds * 1_000_000),
        group_expiry=round(group_expiry * 1_000_000) if group_expiry else None,
    )
    # Unique even for two captures started in the same second: `<iface>-<UTC time>-<random>`.
    name = stream_name(iface)
    if workers > 1:
        handle.close()  # it proved the interface and filter; each worker opens its own
        from kwsniff.commands.capture_workers import capture_with_workers
        from kwsniff.pipeline.live_worker import WorkerRun

        run = WorkerRun(
            iface, bpf, snaplen, buffer_mb * 1024 * 1024, rotate_seconds, idle_timeout, write_pcap
        )
        # Each worker follows the key logs itself; reading them once here makes a key log that
        # cannot be read one line, before any worker starts.
        session = session_options(
            decoding,
            broker_ports=ports,
            max_frame_size=max_frame_size,
            idle_timeout_us=int(idle_timeout * 1_000_000),
        )
        session = dataclasses.replace(session, memory_limit=decoding.memory_limit // workers, keylog=None)
        code = capture_with_workers(
            run,
            workers,
            output,
            name,
            tables,
            session,
            decoding.keylog,
            budget.cap(QUEUE) // workers,
            budget,
            metrics,
            new_stats,
            quiet,
            functools.partial(_watch, iface, duration=duration, quiet=quiet),
        )
        sys.exit(code)
    live = LiveCapture(handle, count or 0, queue_bytes=budget.cap(QUEUE))
    stats = new_stats()
    # Clients append a connection's secrets as it opens: the key log is followed as it grows.
    options = session_options(
        decoding,
        follow_keylog=True,
        broker_ports=ports,
        max_frame_size=max_frame_size,
        idle_timeout_us=int(idle_timeout * 1_000_000),
    )
    try:
        decoder = LiveDecoder(
            live,
            options,
            LiveOptions(output, name, tables, rotate_seconds, idle_timeout, write_pcap, snaplen),
            stats,
            metrics,
        )
    except OSError as err:
        handle.close()
        messages.error(f"--write-pcap {write_pcap}: {err.strerror or err}")
        sys.exit(1)

    stop = stop_on_signals()
    started = time.monotonic()
    decoder.start()
    live.start()
    if not quiet:
        click.echo(f"kwsniff: capturing on {iface} (filter {bpf!r}) into {out}", err=True)
    _watch(
        iface,
        lambda: live.running and decoder.running,
        live.snapshot,
        decoder.open_connections,
        stats,
        stop,
        started,
        duration,
        quiet,
    )
    live.stop()
    live.join(JOIN_TIMEOUT_S)
    # The queue is bounded, so draining it ends; what is in it was captured and is decoded.
    decoder.join()
    if metrics is not None:
        metrics.close()
    if live.error:
        messages.error(f"{iface}: {live.error}")
    if decoder.error is not None or decoder.result is None:
        failure = decoder.error
        messages.error(f"{iface}: decoding stopped: {type(failure).__name__}: {failure}")
        sys.exit(1)
    if not quiet:
        _summary(name, live, decoder, stats, out, time.monotonic() - started)
    sys.exit(1 if live.error else 0)


def _watch(
    iface: str,
    running: Callable[[], bool],
    snapshot: Callable[[], CaptureCounters],
    open_connections: Callable[[], int],
    stats: LiveStats,
    stop: threading.Event,
    started: float,
    duration: float | None,
    quiet: bool,
) -> None:
    """Shows the view until a signal, --duration, or the capture thread ends (--count, an error)."""
    tty = sys.stderr.isatty() and not quiet
    interval = VIEW_INTERVAL_S if tty else LOG_INTERVAL_S
    live_view = None
    if tty:
        from rich.console import Console
        from rich.live import Live

        live_view = Live(console=Console(stderr=True), auto_refresh=False)
        live_view.start()
    last = time.monotonic()
    try:
        while running():
            wait = min(0.2, duration - (time.monotonic() - started)) if duration else 0.2
            if stop.wait(max(0.0, wait)) or (duration and time.monotonic() - started >= duration):
                return
            now = time.monotonic()
            if now - last < interval:
                continue
            # Taken when quiet too: the window gathers every row's latency until someone takes it.
            window = stats.take_window()
            view = (iface, now - started, window, now - last, stats.totals, snapshot())
            last = now
            if quiet:
                continue
            if live_view is not None:
                live_view.update(render(*view, open_connections()), refresh=True)
            else:
                click.echo(log_line(*view, open_connections()), err=True)
    finally:
        if live_view is not None:
            live_view.stop()


def _summary(
    name: str, live: LiveCapture, decoder: LiveDecoder, stats: LiveStats, out: Path | str, seconds: float
) -> None:
    c = live.snapshot()
    assert decoder.result is not None
    result = capture_result(
        decoder.session,
        decoder.result,
        name=name,
        path=name,
        file_bytes=c.captured_bytes,
        seconds=seconds,
        truncated=False,
    )
    add_view_evictions(result.totals, stats)
    print_summary(result, out, decoder.sink.counts)
    print_capture_line(c, decoder.sink.seq)
