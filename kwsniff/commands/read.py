"""`kwsniff read`: capture files to Parquet tables, with a one-screen summary."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import click

from kwsniff.capture import STDIN, CaptureError
from kwsniff.commands import messages
from kwsniff.commands.options import BYTE_SIZE, broker_port_option, broker_ports
from kwsniff.defaults import MAX_DECOMPRESSED, MAX_FRAME_SIZE
from kwsniff.run import CaptureResult, run_capture
from kwsniff.session import SessionOptions
from kwsniff.sinks import (
    ExistingOutput,
    OutputError,
    ParquetSink,
    output_name,
    prepare_output,
    remove_empty_dirs,
)
from kwsniff.tables import DEFAULT_TABLES

STATUSES = ("ok", "no_response_expected", "unanswered", "response_cut", "decode_error")
# `--strict` exit status: everything was read, but not everything was decoded.
EXIT_STRICT = 3
_DIRS = ("to_broker", "to_client")
_ACCOUNTED = (
    ("frame", "framed"),
    ("gap", "gaps"),
    ("skipped", "skipped"),
    ("sasl", "SASL tokens"),
    ("encrypted", "encrypted"),
    ("not_kafka", "not Kafka"),
)


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n:.1f} GB"


def _options(
    broker_port: tuple[int, ...],
    auto_detect: bool,
    max_frame_size: int,
    records: bool = False,
    record_payloads: bool = False,
    max_decompressed: int = MAX_DECOMPRESSED,
) -> SessionOptions:
    return SessionOptions(
        broker_ports=broker_ports(broker_port),
        auto_detect=auto_detect,
        max_frame_size=max_frame_size,
        records=records or record_payloads,
        record_payloads=record_payloads,
        max_decompressed=max_decompressed,
    )


def accounting_line(r: CaptureResult) -> str:
    """The accounting invariant over the capture (README "Accounting"), with a verdict."""
    t = r.totals
    wire = sum(t[f"stream_bytes_{d}"] for d in _DIRS)
    terms = [(label, sum(t[f"{kind}_bytes_{d}"] for d in _DIRS)) for kind, label in _ACCOUNTED]
    rhs = " + ".join(f"{n:,} {label}" for label, n in terms)
    diff = wire - sum(n for _, n in terms)
    bad = r.stats.accounting_mismatches
    verdict = "✓" if not diff and not bad else f"✗ off by {diff:,} bytes, {bad:,} connections do not add up"
    return f"accounting: {wire:,} bytes on the wire = {rhs} {verdict}"


def strict_reasons(r: CaptureResult) -> list[str]:
    """What `--strict` counts as not decoded. Orphan responses, unanswered requests and acks=0
    Produce requests are capture edges, not decode failures; SASL tokens are understood; TCP
    connections on ports no broker uses are someone else's traffic."""
    t, st = r.totals, r.stats
    found = [
        (r.status.get("decode_error", 0), "requests with status decode_error"),
        (r.undecodable_frames, "frames whose header could not be read"),
        (t["skipped_bytes"], "bytes skipped by the frame splitter"),
        (t["kafka_gap_bytes"], "bytes of Kafka connections the capture lost (gaps)"),
        (t["kafka_encrypted_bytes"], "bytes encrypted by TLS on Kafka connections"),
        (st.not_kafka_on_broker_ports, "connections to a broker port that did not speak Kafka"),
        (st.accounting_mismatches, "connections whose bytes do not add up"),
        (int(r.truncated), "capture file cut short"),
        (r.record_damage["crc_errors"], "record batches whose CRC did not match"),
        (r.record_damage["capped_batches"], "record batches not decompressed (over --max-decompressed)"),
        (r.record_damage["record_errors"], "damaged record batches or message sets"),
    ]
    return [f"{n:,} {what}" for n, what in found if n]


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
    damage = ", ".join(f"{k} {v:,}" for k, v in r.record_damage.items() if v)
    if damage:
        echo(f"  record damage: {damage}")
    if r.notes:
        echo("  notes: " + ", ".join(f"{k} ({v})" for k, v in r.notes.most_common(5)))
    if t["held_rows_overflow"] or t["unresolved_topic_rows"]:
        echo(
            f"  topic ids without a name: {t['unresolved_topic_rows']:,} rows"
            f" (+{t['held_rows_overflow']:,} written before a name could be learned)"
        )
    echo("  " + accounting_line(r))
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
    "--overwrite",
    is_flag=True,
    help="Replace the dataset already in --out (its Parquet files are removed first).",
)
@click.option(
    "--append",
    is_flag=True,
    help="Add to the dataset already in --out (an input read before replaces its own files).",
)
@broker_port_option
@click.option(
    "--no-auto-detect",
    "auto_detect",
    flag_value=False,
    default=True,
    help="Only treat --broker-port ports as Kafka.",
)
@click.option(
    "--max-frame-size",
    type=BYTE_SIZE,
    default=MAX_FRAME_SIZE,
    show_default="100MiB",
    help="Largest plausible Kafka frame (a broker's socket.request.max.bytes); bytes, or e.g. 100MiB.",
)
@click.option(
    "--records",
    is_flag=True,
    help="Also write the `records` table: one row per record of every Produce and Fetch (decompresses).",
)
@click.option(
    "--record-payloads",
    is_flag=True,
    help="Put record keys and values in the `records` table (implies --records).",
)
@click.option(
    "--max-decompressed",
    type=BYTE_SIZE,
    default=MAX_DECOMPRESSED,
    show_default="64MiB",
    help="Most bytes one compressed batch may expand to (bytes, or e.g. 64MiB); a batch past it is "
    "counted as capped.",
)
@click.option(
    "--strict",
    is_flag=True,
    help=f"Exit with status {EXIT_STRICT} if anything was not decoded (reasons on stderr); for CI.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary.")
def read(
    captures: tuple[Path, ...],
    out: Path,
    overwrite: bool,
    append: bool,
    broker_port: tuple[int, ...],
    auto_detect: bool,
    max_frame_size: int,
    records: bool,
    record_payloads: bool,
    max_decompressed: int,
    strict: bool,
    quiet: bool,
) -> None:
    """Decode CAPTURES (pcap, pcapng, optionally gzipped; `-` for standard input) into Parquet tables
    under --out."""
    options = _options(broker_port, auto_detect, max_frame_size, records, record_payloads, max_decompressed)
    tables = (*DEFAULT_TABLES, "records") if options.records else DEFAULT_TABLES
    if overwrite and append:
        raise click.UsageError("--overwrite and --append exclude each other")
    existing = (
        ExistingOutput.OVERWRITE if overwrite else ExistingOutput.APPEND if append else ExistingOutput.REFUSE
    )
    try:
        created = prepare_output(out, tables, existing)
    except OutputError as exc:
        messages.error(str(exc))
        sys.exit(1)
    failed = 0
    undecoded = 0
    # Two inputs with the same file name (a/cap.pcap, b/cap.pcap) get their path as the `capture`
    # value, so (capture, conn_id) stays a unique key across the dataset.
    names = Counter(p.name for p in captures)
    for path in captures:
        # Files are written under temporary names and renamed when complete; a failure or Ctrl-C
        # leaves nothing of this input in the dataset.
        sink = ParquetSink(out, "stdin" if str(path) == STDIN else output_name(path), tables)
        try:
            with sink:
                result = run_capture(
                    path,
                    sink,
                    options,
                    progress=not quiet and sys.stderr.isatty(),
                    name=str(path) if names[path.name] > 1 else None,
                )
        except CaptureError as exc:
            messages.error(str(exc))
            failed += 1
            continue
        except OSError as exc:
            messages.error(f"{path}: writing {out}: {exc.strerror or exc}")
            sys.exit(1)
        if not quiet:
            print_summary(result, out, sink.counts)
        messages.warnings(result.name, result.warnings)
        reasons = strict_reasons(result) if strict else []
        if reasons:
            undecoded += 1
            click.echo(f"kwsniff: strict: {result.name}: " + "; ".join(reasons), err=True)
    if failed:
        if failed == len(captures):
            remove_empty_dirs(created)
        sys.exit(1)
    if undecoded:
        sys.exit(EXIT_STRICT)
