"""The report's plots, drawn with matplotlib's Agg backend from a few rows each: every figure's SQL
reduces its section's answer, in the engine, to what it draws.

Made to stay readable for a fleet: time axes are UTC dates, a legend names the top ``top`` series and
folds the rest into one grey "other" line (their largest value at each time), and figures are saved
with tight bounding boxes so no label is cut off. Made to stay readable for a minute of data and for
a week: a time axis spans the data (never matplotlib's years around a single point), its ticks are
whole seconds, minutes, hours or days as the span asks and all labelled alike; counts start at 0;
logarithmic axes are labelled in plain numbers (0.4, 10, 2,000), never 4×10⁻¹.
"""

from __future__ import annotations

import datetime as dt
import functools
import io
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kwsniff.view.escape import visible

Rows = list[dict[str, Any]]
OTHER_COLOUR = "#9e9e9e"
# Names from the wire (client ids, topics, groups) the font could not draw in full, per draw():
# their undrawable characters are shown as "?" and the names said once (no warning per glyph).
_undrawn: list[str] = []


@functools.cache
def _drawable() -> frozenset[int]:
    """The code points of the font the plots use (matplotlib's DejaVu Sans, which it ships)."""
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font

    font = FT2Font(font_manager.findfont(font_manager.FontProperties(family="DejaVu Sans")))
    return frozenset(font.get_charmap())


def _label(name: str) -> str:
    """A name from the wire as a plot label: control characters escaped, characters the font lacks
    as "?" (noted once in _undrawn), and `$` escaped so it never starts matplotlib's mathtext."""
    text = visible(name)
    drawable = _drawable()
    shown = "".join(c if ord(c) in drawable else "?" for c in text)
    if shown != text:
        _undrawn.append(text)
    return shown.replace("$", r"\$")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# A time axis is at least this wide, so that a few seconds of data still get whole-second ticks.
MIN_SPAN = dt.timedelta(seconds=10)
DAY = dt.timedelta(days=1)


def _utc_axis(ax: Any, times: Sequence[dt.datetime]) -> None:
    """The x axis from the first to the last of ``times`` (a little margin either side), with ticks
    and one label format chosen by that span: seconds under ten minutes, minutes under a day, hours
    and minutes with the date under three days, days above. The date of a short span is in the label."""
    import matplotlib.dates as mdates

    first, last = min(times), max(times)
    span = max(last - first, MIN_SPAN)
    pad = (span - (last - first)) / 2 + span * 0.02
    ax.set_xlim(first - pad, last + pad)
    if span > 3 * DAY:
        locator: Any = mdates.DayLocator(interval=math.ceil(span / DAY / 8), tz=dt.UTC)
        fmt, label = "%Y-%m-%d", "date (UTC)"
    else:
        locator = mdates.AutoDateLocator(tz=dt.UTC, minticks=3, maxticks=9)
        if span > DAY:
            fmt, label = "%m-%d %H:%M", f"time (UTC), {first:%Y}"
        else:
            fmt = "%H:%M" if span >= dt.timedelta(minutes=10) else "%H:%M:%S"
            label = f"time (UTC) on {first:%Y-%m-%d}" if first.date() == last.date() else "time (UTC)"
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.DateFormatter(fmt, tz=dt.UTC))
    ax.set_xlabel(label)


def plain(value: float, _pos: object = None) -> str:
    """A tick value as a person writes it: 0.004, 0.4, 25, 2,000."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def plain_log(axis: Any) -> None:
    """Plain labels on a logarithmic axis: the decades, and between them the ticks matplotlib
    labels when the data spans less than a decade or two."""
    import matplotlib.ticker as mticker

    class PlainLog(mticker.LogFormatter):
        def _num_to_string(self, x: float, vmin: float, vmax: float) -> str:
            return plain(x)

    axis.set_major_formatter(PlainLog(labelOnlyBase=False))
    axis.set_minor_formatter(PlainLog(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


def _png(fig: Any) -> bytes:
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=100, bbox_inches="tight")
    _pyplot().close(fig)
    return out.getvalue()


def series_sql(answer: str, label: str, x: str, y: str, top: int) -> str:
    """SQL over ``answer`` (a query of a section's rows): the points (label, rank, x, y) of the ``top``
    series (rows sharing ``label``) with the largest ``y``, ranked by it (then by label), and per ``x``
    one row of all the others (label and rank NULL): their largest ``y``; ``series`` counts every
    series. A fleet's thousands of series reach Python and matplotlib as ``top`` lines and one."""
    return f"""
WITH s AS (
  SELECT {label} AS label, {x} AS x, {y} AS y FROM ({answer}) AS a WHERE {x} IS NOT NULL AND {y} IS NOT NULL
),
ranked AS (SELECT label, ROW_NUMBER() OVER (ORDER BY MAX(y) DESC, label) AS rank FROM s GROUP BY label),
tagged AS (
  SELECT CASE WHEN r.rank <= {int(top)} THEN r.label END AS label,
         CASE WHEN r.rank <= {int(top)} THEN r.rank END AS rank,
         s.x, s.y
  FROM s JOIN ranked r ON r.label = s.label
)
SELECT label, rank, x, MAX(y) AS y, (SELECT COUNT(*) FROM ranked) AS series
FROM tagged GROUP BY label, rank, x ORDER BY rank NULLS LAST, x"""


def top_rows_sql(answer: str, key: str, top: int, order: str) -> str:
    """SQL over ``answer`` (a query of a section's rows): its ``top`` rows with the largest ``key``
    (ties in the section's ``order``)."""
    return (
        f"SELECT * FROM ({answer}) AS a WHERE {key} IS NOT NULL "
        f"ORDER BY {key} DESC{', ' + order if order else ''} LIMIT {int(top)}"
    )


def _series(rows: list[dict[str, Any]]) -> tuple[list[tuple[str, list[Any], list[float]]], Any]:
    """series_sql's rows as (the top series as (label, xs, ys), (count, xs, ys) of the others or None)."""
    shown: dict[int, tuple[str, list[Any], list[float]]] = {}
    other: tuple[list[Any], list[float]] = ([], [])
    for r in rows:
        xs, ys = (
            shown.setdefault(r["rank"], (_label(r["label"]), [], []))[1:] if r["rank"] is not None else other
        )
        xs.append(r["x"])
        ys.append(float(r["y"]))
    rest = (rows[0]["series"] - len(shown), *other) if other[0] else None
    return [shown[k] for k in sorted(shown)], rest


def _lines(title: str, ylabel: str, shown: list[Any], rest: Any, step: bool = False) -> bytes:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(11, 4.5))
    style = {"drawstyle": "steps-post"} if step else {}
    if rest is not None:
        count, xs, ys = rest
        ax.plot(xs, ys, color=OTHER_COLOUR, linewidth=0.8, label=f"other ({count:,}): their largest", **style)
    for label, xs, ys in shown:
        ax.plot(xs, ys, marker=".", linewidth=1.6, label=label, **style)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)  # lag and counts: how far from none
    ax.yaxis.set_major_formatter(plain)
    ax.grid(alpha=0.3)
    _utc_axis(ax, [x for _, xs, _ in shown for x in xs] + (list(rest[1]) if rest is not None else []))
    if shown:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return _png(fig)


def lag_seconds(rows: Rows) -> bytes | None:
    if not rows:
        return None
    shown, rest = _series(rows)
    return _lines("Consumer lag in seconds per group and partition", "lag (s)", shown, rest)


def throughput(rows: Rows) -> bytes | None:
    if not rows:
        return None
    shown, rest = _series(rows)
    # Each step is a whole minute: every line goes on to its last minute's end.
    minute = dt.timedelta(minutes=1)
    shown = [(label, [*xs, xs[-1] + minute], [*ys, ys[-1]]) for label, xs, ys in shown]
    if rest is not None:
        rest = (rest[0], [*rest[1], rest[1][-1] + minute], [*rest[2], rest[2][-1]])
    return _lines("Records produced per topic per minute", "records / minute", shown, rest, step=True)


def _bars(title: str, labels: list[str], values: dict[str, list[float]], xlabel: str) -> bytes:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(11, 0.42 * len(labels) + 1.6))
    height = 0.8 / len(values)
    for i, (name, vals) in enumerate(values.items()):
        ax.barh([j + i * height for j in range(len(labels))], vals, height=height, label=name)
    ax.set_yticks([j + height * (len(values) - 1) / 2 for j in range(len(labels))], labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    plain_log(ax.xaxis)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return _png(fig)


def produce_latency(rows: Rows) -> bytes | None:
    if not rows:
        return None
    values = {p: [max(r[f"{p}_ms"], 1e-3) for r in rows] for p in ("p50", "p99", "max")}
    labels = [_label(f"{r['topic']} ({r['requests']:,})") for r in rows]
    return _bars(
        f"Produce latency per topic (top {len(rows)} by p99; requests)", labels, values, "ms, log scale"
    )


def request_latency(rows: Rows) -> bytes | None:
    if not rows:
        return None
    values = {p: [max(r[f"{p}_ms"], 1e-3) for r in rows] for p in ("p50", "p99")}
    labels = [
        _label(f"{r['api_name']} v{r['api_version']} {r['client_id'] or '-'} ({r['requests']:,})")
        for r in rows
    ]
    return _bars(
        f"Request latency, long polls apart (top {len(rows)} by p99)", labels, values, "ms, log scale"
    )


@dataclass(frozen=True)
class Figure:
    """A plot of one section: its file under --plots, the section's columns --topic/--client/--group
    may match, the SQL giving what it draws from a query of the section's rows (with top N and the
    section's order), and the drawing of those rows."""

    file: str
    columns: tuple[str, ...]
    sql: Callable[[str, int, str], str]
    draw: Callable[[Rows], bytes | None]


LAG_LABEL = (
    "COALESCE(group_id, '-') || ' ' || COALESCE(topic, '(unnamed)') || '['"
    " || COALESCE(CAST(partition AS VARCHAR), '-') || ']'"
)
FIGURES: dict[str, Figure] = {
    "lag": Figure(
        "lag_seconds.png",
        ("group_id", "topic"),
        lambda answer, top, _: series_sql(answer, LAG_LABEL, "second", "lag_seconds", top),
        lag_seconds,
    ),
    "throughput": Figure(
        "throughput.png",
        ("topic",),
        lambda answer, top, _: series_sql(answer, "COALESCE(topic, '(unnamed)')", "minute", "records", top),
        throughput,
    ),
    "produce_latency": Figure(
        "produce_latency.png",
        ("topic",),
        lambda answer, top, order: top_rows_sql(answer, "p99_ms", top, order),
        produce_latency,
    ),
    "latency": Figure(
        "latency_by_api.png",
        ("client_id",),
        lambda answer, top, order: top_rows_sql(answer, "p99_ms", top, order),
        request_latency,
    ),
}


def draw(rows: dict[str, Rows], undrawn: list[str] | None = None) -> dict[str, bytes]:
    """{section name: PNG} for every figure whose rows (its SQL's answer) are not empty. Names the
    font could not draw in full are added to ``undrawn`` (for one warning, not one per glyph)."""
    drawn = {}
    _undrawn.clear()
    # Labels are cleaned before matplotlib sees them; a warning it still gives is not the user's.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, figure in FIGURES.items():
            png = figure.draw(rows.get(name) or [])
            if png is not None:
                drawn[name] = png
    if undrawn is not None:
        undrawn.extend(dict.fromkeys(_undrawn))
    return drawn
