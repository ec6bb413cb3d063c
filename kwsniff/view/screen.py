"""The live view of `kwsniff capture`: a rich table on a terminal, one log line per interval otherwise."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kwsniff.capture.live import CaptureCounters
from kwsniff.view.stats import Totals, Window, percentile

TOP = 8  # rows per section
# Fetch waits on the broker by design (fetch.max.wait.ms): its latency is shown apart, never ranked
# with the APIs whose latency is service time.
WAITING_APIS = frozenset({"Fetch"})


@dataclass
class ApiLine:
    api: str
    per_s: float
    p50_ms: float | None
    p99_ms: float | None


def api_lines(window: Window, seconds: float) -> list[ApiLine]:
    lines = []
    for api, n in window.requests.most_common():
        lat = sorted(window.latencies_ms.get(api, ()))
        p50 = percentile(lat, 0.5) if lat else None
        p99 = percentile(lat, 0.99) if lat else None
        lines.append(ApiLine(api, n / seconds if seconds else 0.0, p50, p99))
    # Fetch last, whatever its rate.
    lines.sort(key=lambda line: line.api in WAITING_APIS)
    return lines


def top_topics(totals: Totals) -> list[str]:
    """The topics with the most record bytes, produced and fetched together, for ranking only: the
    view shows the two apart (a byte fetched by three consumers was produced once)."""
    both = totals.produced_bytes + totals.fetched_bytes
    return [name for name, _ in both.most_common(TOP)]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def log_line(
    iface: str, elapsed: float, window: Window, seconds: float, totals: Totals, c: CaptureCounters, conns: int
) -> str:
    """One plain line per interval (stderr that is not a terminal: logs, journald). ``conns`` is the
    number of connections open; closed ones are in totals."""
    apis = " ".join(
        f"{a.api}={a.per_s:.1f}/s(p50 {_ms(a.p50_ms)} p99 {_ms(a.p99_ms)} ms)"
        for a in api_lines(window, seconds)[:TOP]
    )
    errors = ",".join(f"{k}={v}" for k, v in totals.errors.most_common(3))
    return (
        f"kwsniff: {iface} {elapsed:.0f}s packets={c.captured} dropped_packets_kernel={c.kernel_drops} "
        f"dropped_packets_interface={c.if_drops} dropped_packets_queue={c.queue_drops} "
        f"stream_gaps={totals.gaps} stream_gap_bytes={totals.gap_bytes} "
        f"connections_open={conns} connections_closed={totals.connections_closed} "
        f"requests={sum(totals.requests.values())} {apis}" + (f" errors {errors}" if errors else "")
    )


def render(
    iface: str, elapsed: float, window: Window, seconds: float, totals: Totals, c: CaptureCounters, conns: int
) -> Any:
    """A rich renderable of the whole view."""
    from rich.console import Group
    from rich.table import Table

    # Packets dropped (the capture's own losses, counted by libpcap and our queue) and gaps (bytes
    # missing from TCP streams, whatever lost them) are different units: each says which it is.
    head = (
        f"[bold]kwsniff capture {iface}[/]  {elapsed:.0f} s  packets {c.captured:,}  "
        f"connections {conns + totals.connections_closed:,} ({conns:,} open)\n"
        f"packets dropped: by the kernel {c.kernel_drops:,}, by the interface {c.if_drops:,}, "
        f"by kwsniff's queue {c.queue_drops:,}   "
        f"stream gaps (closed connections): {totals.gaps:,} ({totals.gap_bytes:,} bytes)"
    )
    apis = Table("API", "req/s", "p50 ms", "p99 ms", title="Requests (Fetch waits by design)")
    for a in api_lines(window, seconds)[:TOP]:
        apis.add_row(a.api, f"{a.per_s:.1f}", _ms(a.p50_ms), _ms(a.p99_ms))
    errors = Table("error", "error codes", title="Errors (anywhere in a response, as the errors table)")
    for name, n in totals.errors.most_common(TOP):
        errors.add_row(name, f"{n:,}")
    topics = Table("topic", "produced bytes", "fetched bytes", title="Top topics (record bytes)")
    for name in top_topics(totals):
        topics.add_row(name, f"{totals.produced_bytes[name]:,}", f"{totals.fetched_bytes[name]:,}")
    throttled = Table("client_id", "throttled", title="Throttled clients")
    for name, n in totals.throttled.most_common(TOP):
        throttled.add_row(name, f"{n:,}")
    return Group(head, apis, errors, topics, throttled)
