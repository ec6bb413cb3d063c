"""`kwsniff read`: capture files to Parquet tables, with a one-screen summary."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kwsniff.capture import CaptureError
from kwsniff.run import CaptureResult, run_capture
from kwsniff.session import SessionOptions
from kwsniff.sinks import ParquetSink

STATUSES = ("ok", "no_response_expected", "unanswered", "decode_error")


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n:.1f} GB"


def _fail(message: str) -> None:
    click.echo(f"kwsniff: error: {message}", err=True)


def _options(broker_port: tuple[int, ...], auto_detect: bool, max_frame_size: int) -> SessionOptions:
    return SessionOptions(
        broker_ports=frozenset(broker_port or (9092,)),
        auto_detect=auto_detect,
        max_frame_size=max_frame_size,
    )


def print_summary(r: CaptureResult, out: Path | None, rows: dict[str, int]) -> None:
    t, st = r.totals, r.stats
    mbps = r.file_bytes / 1e6 / r.seconds if r.seconds else 0.0
    echo = click.echo
    echo(f"{r.name}: {st.packets:,} packets, {_size(r.file_bytes)} in {r.seconds:.2f} s ({mbps:.1f} MB/s)")
    skipped = ", ".join(f"{k} {v:,}" for k, v in sorted(st.skipped_packets.items())) or "none"
    echo(f"  packets skipped (not Kafka/TCP): {skipped}")
    echo(
        f"  connections {t['connections']:,} (Kafka {t['kafka_connections']:,})   "
        f"frames {t['frames_to_broker']:,} to broker, {t['frames_to_client']:,} to client"
    )
    total = sum(r.status.values())
    parts = ", ".join(f"{s} {r.status.get(s, 0):,}" for s in STATUSES)
    echo(f"  requests {total:,}: {parts}")
    echo(
        f"  orphan responses {t['orphan_responses']:,}   gaps {t['gaps']:,} ({_size(t['gap_bytes'])})   "
        f"skipped {_size(t['skipped_bytes'])}   not Kafka {_size(t['not_kafka_bytes'])}   "
        f"retransmitted {_size(t['duplicate_bytes'])}"
    )
    if r.decode_errors:
        echo("  decode errors: " + ", ".join(f"{k} {v}" for k, v in r.decode_errors.most_common(5)))
    if r.notes:
        echo("  notes: " + ", ".join(f"{k} ({v})" for k, v in r.notes.most_common(5)))
    for w in r.warnings:
        echo(f"  warning: {w}")
    if out is not None:
        echo("  tables: " + ", ".join(f"{out / k}/ ({v:,} rows)" for k, v in rows.items()))


@click.command()
@click.argument("captures", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--out",
    "-o",
    type=click.Path(path_type=Path),
    default=Path("tables"),
    show_default=True,
    help="Directory of the Parquet datasets (one sub-directory per table).",
)
@click.option(
    "--broker-port",
    "-p",
    type=int,
    multiple=True,
    help="TCP port a broker listens on (repeatable; default 9092). Other ports are detected.",
)
@click.option(
    "--no-auto-detect",
    "auto_detect",
    flag_value=False,
    default=True,
    help="Only treat --broker-port ports as Kafka.",
)
@click.option(
    "--max-frame-size",
    type=int,
    default=100 * 1024 * 1024,
    show_default=True,
    help="Largest plausible Kafka frame (a broker's socket.request.max.bytes).",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary.")
def read(
    captures: tuple[Path, ...],
    out: Path,
    broker_port: tuple[int, ...],
    auto_detect: bool,
    max_frame_size: int,
    quiet: bool,
) -> None:
    """Decode CAPTURES (pcap, pcapng, optionally gzipped) into Parquet tables under --out."""
    options = _options(broker_port, auto_detect, max_frame_size)
    failed = 0
    for path in captures:
        sink = ParquetSink(out, path.name)
        try:
            result = run_capture(path, sink, options, progress=not quiet and sys.stderr.isatty())
        except CaptureError as exc:
            # Raised before any row exists: nothing was written for this file.
            _fail(str(exc))
            failed += 1
            continue
        sink.close()
        if not quiet:
            print_summary(result, out, sink.counts)
    if failed:
        sys.exit(1)
