"""The summary printed after `kwsniff read` and `kwsniff capture`: packets, connections, requests by
status, gaps and skips, notes, and the accounting line (docs/summary.md)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from kwsniff.capture.live import CaptureCounters


class CaptureResult(Protocol):
    """What the summary reads of a run (kwsniff.pipeline.run.CaptureResult has it); a protocol, so
    the rendering layer never imports the pipeline it sits below."""

    name: str
    file_bytes: int
    seconds: float
    stats: Any
    status: Counter[str]
    totals: Counter[str]
    decode_errors: Counter[str]
    notes: Counter[str]
    record_damage: Counter[str]
    undecodable_frames: int
    truncated: bool


STATUSES = ("ok", "no_response_expected", "unanswered", "response_cut", "decode_error")
_DIRS = ("to_broker", "to_client")
_ACCOUNTED = (
    ("frame", "framed"),
    ("gap", "gaps"),
    ("skipped", "skipped"),
    ("sasl", "SASL tokens"),
    ("tls_overhead", "TLS overhead"),
    ("encrypted", "encrypted"),
    ("not_kafka", "not Kafka"),
)


_SHOWN_WHEN_SOME = ("TLS overhead", "not captured (snap length)")


def human_size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n:.1f} GB"


def accounting_line(r: CaptureResult) -> str:
    """The accounting invariant over the capture (docs/accounting.md), with a verdict."""
    t = r.totals
    wire = sum(t[f"stream_bytes_{d}"] for d in _DIRS)
    terms = [(label, sum(t[f"{kind}_bytes_{d}"] for d in _DIRS)) for kind, label in _ACCOUNTED]
    # Bytes a snap length did not keep are gap bytes in the tables; the line tells them apart from
    # bytes the capture lost, and names them only when there are some.
    uncaptured = getattr(r.stats, "uncaptured_bytes", 0)
    if uncaptured:
        terms[1] = ("gaps", terms[1][1] - uncaptured)
        terms.insert(2, ("not captured (snap length)", uncaptured))
    # TLS overhead is shown where there is some (a decrypted or handshaking TLS connection).
    rhs = " + ".join(f"{n:,} {label}" for label, n in terms if n or label not in _SHOWN_WHEN_SOME)
    diff = wire - sum(n for _, n in terms)
    bad = r.stats.accounting_mismatches
    verdict = "✓" if not diff and not bad else f"✗ off by {diff:,} bytes, {bad:,} connections do not add up"
    return f"accounting: {wire:,} bytes on the wire = {rhs} {verdict}"


def tunnel_lines(st: Any) -> list[str]:
    """Decapsulated packets by kind, dropped copies and IP fragments, when there were any."""
    lines = []
    if st.decapsulated:
        kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(st.decapsulated.items()))
        lines.append(
            f"decapsulated: {kinds} (tunnel headers {human_size(st.tunnel_overhead_bytes)}, not stream bytes)"
        )
    if st.duplicate_packets:
        lines.append(f"duplicate packets dropped (mirrored twice): {st.duplicate_packets:,}")
    if st.fragments:
        lines.append(
            "IP fragments: " + ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in st.fragments.items())
        )
    return lines


def memory_line(r: CaptureResult) -> str:
    """What the memory budget took (docs/memory.md), or "" when it took nothing. Idle connections
    ended by the idle timeout are listed too: their rows say `expired` like evicted ones."""
    t, st = r.totals, r.stats
    evicted = getattr(st, "evicted_connections", 0)
    idle = getattr(st, "idle_connections", 0)
    early = t["records_written_early"]
    parts = []
    if evicted:
        parts.append(f"{evicted:,} connections ({human_size(st.evicted_bytes)} held)")
    if early:
        parts.append(
            f"{early:,} records written before their response ({human_size(t['records_written_early_bytes'])}"
            ", offsets unknown)"
        )
    if getattr(st, "forgotten_early", 0):
        parts.append(f"{st.forgotten_early:,} closed connections forgotten early")
    if getattr(st, "secrets_evicted", 0):
        parts.append(f"{st.secrets_evicted:,} TLS secrets ({human_size(st.secrets_evicted_bytes)} held)")
    if t["topic_names_evicted"]:
        parts.append(
            f"{t['topic_names_evicted']:,} topic names ({human_size(t['topic_names_evicted_bytes'])} held;"
            " later rows of their ids have no topic unless a response names them again)"
        )
    if t["view_totals_evicted"]:
        parts.append(
            f"{t['view_totals_evicted']:,} live view totals of topics or clients, the smallest"
            f" ({human_size(t['view_totals_evicted_bytes'])} held)"
        )
    if t["view_lag_refused"]:
        parts.append(f"{t['view_lag_refused']:,} rows of partitions the live lag did not follow")
    if t["view_replication_forgotten"]:
        parts.append(
            f"{t['view_replication_forgotten']:,} replication logs of partitions no follower fetched, the oldest"
        )
    if t["view_replication_refused"]:
        parts.append(
            f"{t['view_replication_refused']:,} rows of partitions the live replication lag did not follow"
        )
    if t["view_groups_expired"]:
        parts.append(f"{t['view_groups_expired']:,} consumer groups not seen for --group-expiry")
    if t["view_followers_stale"]:
        parts.append(f"{t['view_followers_stale']:,} followers that stopped fetching a partition")
    if getattr(st, "brokers_evicted", 0):
        parts.append(
            f"{st.brokers_evicted:,} broker map entries ({human_size(st.brokers_evicted_bytes)} held)"
        )
    line = ("evicted: " + ", ".join(parts)) if parts else ""
    if idle:
        line += ("   " if line else "") + f"idle connections expired: {idle:,}"
    return line


def broker_conflicts_line(conflicts: int, disputes: dict[Any, dict[int, list[Any]]]) -> str:
    """Claims of node ids that disagreed (kwsniff.rows.brokers), naming the first addresses: the id
    kept, then the others, each with who claimed it (`its own answer` on a connection to it)."""

    def said(address: Any, by: list[Any]) -> str:
        return ", ".join("its own answer" if c == address else f"said by {endpoint_text(c)}" for c in by)

    shown = [
        f"{endpoint_text(address)} is "
        + ", not ".join(f"node {node} ({said(address, by)})" for node, by in claims.items())
        for address, claims in disputes.items()
    ]
    return f"broker conflicts: {conflicts:,} claims of another node id: " + "; ".join(shown)


def endpoint_text(endpoint: Any) -> str:
    ip, port = endpoint
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


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
        (t["implausible_gaps"], "sequence number jumps past any TCP window (implausible gaps)"),
        (t["kafka_encrypted_bytes"], "bytes encrypted by TLS on Kafka connections"),
        (st.not_kafka_on_broker_ports, "connections to a broker port that did not speak Kafka"),
        (st.accounting_mismatches, "connections whose bytes do not add up"),
        (int(r.truncated), "capture file cut short"),
        (r.record_damage["crc_errors"], "record batches whose CRC did not match"),
        (
            r.record_damage["capped_batches"],
            "record batches not read (over --max-decompressed or the --memory-limit records share)",
        ),
        (r.record_damage["record_errors"], "damaged record batches or message sets"),
        (getattr(st, "evicted_connections", 0), "connections evicted under --memory-limit"),
    ]
    return [f"{n:,} {what}" for n, what in found if n]


def print_summary(r: CaptureResult, out: Path | str | None, rows: dict[str, int]) -> None:
    import click  # only where a command prints: the Python API reads these numbers without click

    for line in summary_lines(r, out, rows):
        click.echo(line)


def summary_lines(r: CaptureResult, out: Path | str | None, rows: dict[str, int]) -> list[str]:
    """The lines of the summary `read` prints for one capture (``out``: where its tables went)."""
    lines: list[str] = []
    t, st = r.totals, r.stats
    mbps = r.file_bytes / 1e6 / r.seconds if r.seconds else 0.0
    echo = lines.append
    echo(
        f"{r.name}: {st.packets:,} packets, {human_size(r.file_bytes)} in {r.seconds:.2f} s ({mbps:.1f} MB/s)"
    )
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
        f"  orphan responses {t['orphan_responses']:,}   gaps {t['gaps']:,} ({human_size(t['gap_bytes'])})   "
        f"skipped {human_size(t['skipped_bytes'])}   not Kafka {human_size(t['not_kafka_bytes'])}   "
        f"retransmitted {human_size(t['duplicate_bytes'])}"
        + (
            f"   implausible gaps {t['implausible_gaps']:,} (sequence jumps past any window: not counted)"
            if t["implausible_gaps"]
            else ""
        )
    )
    for line in tunnel_lines(st):
        echo("  " + line)
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
    if t["broker_held_rows_overflow"] or t["unresolved_broker_rows"]:
        # docs/tables.md "Which broker answered": no response of the run named their broker's node id.
        echo(
            f"  brokers without a node id: {t['unresolved_broker_rows']:,} rows"
            f" (+{t['broker_held_rows_overflow']:,} written before an id could be learned)"
        )
    conflicts = getattr(r.stats, "broker_conflicts", 0)
    if conflicts:
        echo("  " + broker_conflicts_line(conflicts, r.stats.broker_disputes))
    line = memory_line(r)
    if line:
        echo("  " + line)
    echo("  " + accounting_line(r))
    if out is not None:
        # A directory's tables are its sub-directories; a URI's (Delta tables) are below it too.
        at = (lambda k: out / k) if isinstance(out, Path) else (lambda k: f"{str(out).rstrip('/')}/{k}")
        echo("  tables: " + ", ".join(f"{at(k)}/ ({v:,} rows)" for k, v in rows.items()))
    return lines


def print_capture_line(
    c: CaptureCounters, periods: int, per_worker: list[CaptureCounters] | None = None
) -> None:
    """The last line of `kwsniff capture`'s summary: what was captured, and what was dropped before
    decoding; with --workers (``per_worker``), the kernel's drops of each worker's ring too."""
    by, kernel, queues = "", f"{c.kernel_drops:,}", "kwsniff's queue"
    if per_worker is not None:
        by = f" by {len(per_worker)} workers"
        kernel += " (" + ", ".join(f"worker {i} {w.kernel_drops:,}" for i, w in enumerate(per_worker)) + ")"
        queues = "kwsniff's queues"
    import click

    click.echo(
        f"  capture: {c.captured:,} packets ({human_size(c.captured_bytes)}){by}; packets dropped before"
        f" decoding (their bytes are among the gaps above): by the kernel {kernel}, by the interface"
        f" {c.if_drops:,}, by {queues} {c.queue_drops:,}; {periods} rotation periods"
    )
