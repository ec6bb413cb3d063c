"""The report's plots, drawn with matplotlib's Agg backend from a few rows each: every figure's SQL
reduces its section's answer, in the engine, to what it draws.

Made to stay readable for a fleet: time axes are UTC dates, a legend names the top ``top`` series and
folds the rest into one grey "other" line (their largest value at each time), every legend stands
outside the data, and figures are saved with tight bounding boxes so no label is cut off. The lag
is small multiples, one row of panels per group (the LAG_PANELS worst). Made to stay readable for a
minute of data and for a week: a time axis spans the data (never matplotlib's years around a single
point), its ticks are whole seconds, minutes, hours or days as the span asks and all labelled alike;
counts start at 0; logarithmic axes are labelled in plain numbers (0.4, 10, 2,000), never 4×10⁻¹.
Made for datasets of captures lying apart: one column of panels per stretch of captures, and a
minute the captures saw only part of drawn apart from the throughput's line (capture_spans).
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

from kwsniff.sections.capture_spans import MINUTE, Spans, utc
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


def _utc_axis(ax: Any, times: Sequence[dt.datetime], ticks: int = 9) -> None:
    """The x axis from the first to the last of ``times`` (a little margin either side), with at most
    ``ticks`` ticks and one label format chosen by that span: seconds under ten minutes, minutes under
    a day, hours and minutes with the date under three days, days above. The date of a short span is
    in the label."""
    import matplotlib.dates as mdates

    first, last = min(times), max(times)
    span = max(last - first, MIN_SPAN)
    pad = (span - (last - first)) / 2 + span * 0.02
    ax.set_xlim(first - pad, last + pad)
    if span > 3 * DAY:
        locator: Any = mdates.DayLocator(interval=math.ceil(span / DAY / (ticks - 1)), tz=dt.UTC)
        fmt, label = "%Y-%m-%d", "date (UTC)"
    else:
        locator = mdates.AutoDateLocator(tz=dt.UTC, minticks=min(3, ticks), maxticks=ticks)
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


def series_sql(answer: str, label: str, x: str, y: str, top: int, panel: str = "''", panels: int = 1) -> str:
    """SQL over ``answer`` (a query of a section's rows): per panel (rows sharing ``panel``; the
    ``panels`` with the largest ``y``, ranked by it, then by name) the points (label, rank, x, y) of
    its ``top`` series (rows sharing ``label``) with the largest ``y``, ranked likewise, and per ``x``
    one row of all its others (label and rank NULL): their largest ``y``. ``series`` counts a panel's
    series, ``panels`` every panel. A fleet's thousands of series reach Python and matplotlib as at
    most ``panels`` times ``top`` lines and one."""
    return f"""
WITH s AS (
  SELECT {panel} AS panel, {label} AS label, {x} AS x, {y} AS y
  FROM ({answer}) AS a WHERE {x} IS NOT NULL AND {y} IS NOT NULL
),
panel_ranks AS (
  SELECT panel, ROW_NUMBER() OVER (ORDER BY MAX(y) DESC, panel) AS prank, COUNT(DISTINCT label) AS series
  FROM s GROUP BY panel
),
ranked AS (
  SELECT panel, label, ROW_NUMBER() OVER (PARTITION BY panel ORDER BY MAX(y) DESC, label) AS rank
  FROM s GROUP BY panel, label
),
tagged AS (
  SELECT s.panel, p.prank, p.series,
         CASE WHEN r.rank <= {int(top)} THEN r.label END AS label,
         CASE WHEN r.rank <= {int(top)} THEN r.rank END AS rank,
         s.x, s.y
  FROM s JOIN panel_ranks p ON p.panel = s.panel JOIN ranked r ON r.panel = s.panel AND r.label = s.label
  WHERE p.prank <= {int(panels)}
)
SELECT panel, prank, label, rank, x, MAX(y) AS y, series, (SELECT COUNT(*) FROM panel_ranks) AS panels
FROM tagged GROUP BY panel, prank, series, label, rank, x ORDER BY prank, rank NULLS LAST, x"""


def top_rows_sql(answer: str, key: str, top: int, order: str) -> str:
    """SQL over ``answer`` (a query of a section's rows): its ``top`` rows with the largest ``key``
    (ties in the section's ``order``)."""
    return (
        f"SELECT * FROM ({answer}) AS a WHERE {key} IS NOT NULL "
        f"ORDER BY {key} DESC{', ' + order if order else ''} LIMIT {int(top)}"
    )


Series = tuple[str, list[Any], list[float]]  # label, times, values


@dataclass(frozen=True)
class Panel:
    """One row of panels: its name (a group; "" when the figure has one), its top series and the
    others as (count, times, their largest) or None."""

    name: str
    shown: list[Series]
    rest: tuple[int, list[Any], list[float]] | None


def _panels(rows: Rows) -> tuple[list[Panel], int]:
    """series_sql's rows as panels, best first, and the count of every panel."""
    by_rank: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        by_rank.setdefault(r["prank"], []).append(r)
    out = []
    for prank in sorted(by_rank):
        mine = by_rank[prank]
        shown: dict[int, Series] = {}
        other: tuple[list[Any], list[float]] = ([], [])
        for r in mine:
            rank = r["rank"]
            if rank is not None and rank not in shown:
                shown[rank] = (_label(r["label"]), [], [])
            xs, ys = shown[rank][1:] if rank is not None else other
            xs.append(utc(r["x"]))
            ys.append(float(r["y"]))
        rest = (mine[0]["series"] - len(shown), *other) if other[0] else None
        out.append(Panel(_label(mine[0]["panel"]), [shown[k] for k in sorted(shown)], rest))
    return out, rows[0]["panels"] if rows else 0


# How one series is drawn on one axes: (axes, label, its line's style, times, values).
Drawer = Callable[[Any, str, dict[str, Any], list[Any], list[float]], None]
PARTIAL = "partial minute: the captures saw part of it"
OTHER_STYLE = {"color": OTHER_COLOUR, "linewidth": 0.8}


def _style(rank: int) -> dict[str, Any]:
    """The line of the series ranked ``rank`` (from 0): matplotlib's ten colours, dashed past them."""
    return {
        "color": f"C{rank % 10}",
        "marker": ".",
        "linewidth": 1.6,
        "linestyle": "-" if rank < 10 else "--",
    }


def _line(ax: Any, label: str, style: dict[str, Any], xs: list[Any], ys: list[float]) -> None:
    ax.plot(xs, ys, label=label, **style)


def _grid(
    title: str,
    ylabel: str,
    panels: list[Panel],
    spans: Spans,
    drawer: Drawer,
    extent: Callable[[Any], list[Any]] = lambda x: [x],
    marks: Callable[[Any, list[Any]], None] | None = None,
) -> Any:
    """A figure of one row of axes per panel and one column per stretch of captures holding data
    (capture_spans.Spans.axes): each column its own time axis over its data (``extent`` of a time:
    the times it covers), each row its legend outside the data, on the right. ``marks`` draws on an
    axes what its times call for (with a label for the legend)."""
    plt = _pyplot()
    from matplotlib.lines import Line2D

    # Each series' points split by the column (stretch of captures) they fall in, once.
    split: dict[int, list[tuple[str, dict[str, Any], dict[int, tuple[list[Any], list[float]]]]]] = {}
    reach: dict[int, tuple[Any, Any]] = {}  # per column, the first and last time its data covers
    for n, panel in enumerate(panels):
        drawn = (
            [(f"other ({panel.rest[0]:,}): their largest", OTHER_STYLE, *panel.rest[1:])]
            if panel.rest
            else []
        )
        drawn += [(label, _style(i), xs, ys) for i, (label, xs, ys) in enumerate(panel.shown)]
        split[n] = []
        for label, style, xs, ys in drawn:
            parts = spans.split(xs, ys)
            for column, (part, _) in parts.items():
                lo, hi = min(extent(part[0])), max(extent(part[-1]))
                was = reach.get(column, (lo, hi))
                reach[column] = (min(was[0], lo), max(was[1], hi))
            split[n].append((label, style, parts))
    columns = sorted(reach)
    # A row is as tall as its legend (a line of 8-point text a series) needs.
    legend = max(len(p.shown) + (p.rest is not None) for p in panels) * 0.19 + 0.7
    height = 4.5 if len(panels) == 1 else 1.2 + max(2.3, legend) * len(panels)
    fig, axes = plt.subplots(
        len(panels),
        len(columns),
        figsize=(11, height),
        sharex="col",
        sharey="row",
        squeeze=False,
        gridspec_kw={"wspace": 0.35},  # room for the tick labels at the columns' edges
    )
    fig.suptitle(title)
    for n, (row, panel) in enumerate(zip(axes, panels, strict=True)):
        extra: dict[str, Any] = {}
        for ax, column in zip(row, columns, strict=True):
            mine = [(label, style, parts[column]) for label, style, parts in split[n] if column in parts]
            for label, style, (xs, ys) in mine:
                drawer(ax, label, style, xs, ys)
            if not mine:
                ax.text(
                    0.5, 0.5, "none in these captures", transform=ax.transAxes, ha="center", color="#757575"
                )
            if marks is not None:
                marks(ax, sorted({x for _, _, (xs, _) in mine for x in xs}))
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                extra.setdefault(label, handle)
            ax.set_ylim(bottom=0)  # lag and counts: how far from none
            ax.yaxis.set_major_formatter(plain)
            ax.grid(alpha=0.3)
        if panel.name:
            row[0].set_title(panel.name, loc="left", fontsize=10)
        row[0].set_ylabel(ylabel)
        # As ranked: the top series, then the others, then what ``marks`` drew; a series' key is its
        # line, whichever way its points are drawn.
        keys = [*split[n][1:], *split[n][:1]] if panel.rest else split[n]
        handles = [Line2D([], [], **style) for _, style, _ in keys]
        labels = [label for label, _, _ in keys]
        extras = [k for k in extra if k not in labels]
        row[-1].legend(
            handles + [extra[k] for k in extras],
            labels + extras,
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            fontsize=8,
        )
    for c, column in enumerate(columns):
        _utc_axis(axes[-1][c], reach[column], max(3, 9 // len(columns)))
    return fig


# Groups drawn at most, one row of panels each (the others are counted in the title).
LAG_PANELS = 6


def lag_seconds(rows: Rows, spans: Spans) -> bytes | None:
    if not rows:
        return None
    panels, count = _panels(rows)
    title = "Consumer lag in seconds per group and partition"
    more = count - len(panels)
    if more:
        groups = "group" if more == 1 else "groups"
        title += f"\nthe {len(panels)} groups with the largest lag; {more:,} more {groups} in the lag table"
    return _png(_grid(title, "lag (s)", panels, spans, _line))


def throughput(rows: Rows, spans: Spans) -> bytes | None:
    if not rows:
        return None
    (panel,), _ = _panels(rows)

    def minutes(ax: Any, label: str, style: dict[str, Any], xs: list[Any], ys: list[float]) -> None:
        # Each step is a whole minute; a run of them is one line, broken where a minute is missing.
        # A minute the captures saw only part of is a light dotted step of its own, a hollow mark at
        # its start (over the band ``partial`` draws): its count is of part of a minute, not a drop.
        line_x: list[Any] = []
        line_y: list[float] = []
        for x, y in zip(xs, ys, strict=True):
            if not spans.whole(x):
                ax.plot(
                    [x, x + MINUTE],
                    [y, y],
                    color=style["color"],
                    linestyle=":",
                    alpha=0.6,
                    # A hollow mark at its start too: on a week's axis a minute is under a pixel.
                    marker="o",
                    markevery=[0],
                    markerfacecolor="none",
                    markersize=4,
                    gid="partial",
                )
            else:
                if line_x and line_x[-1] + MINUTE != x:
                    line_x += [line_x[-1] + MINUTE, line_x[-1] + MINUTE]
                    line_y += [line_y[-1], math.nan]
                line_x.append(x)
                line_y.append(y)
        if line_x:
            ax.plot(
                [*line_x, line_x[-1] + MINUTE],
                [*line_y, line_y[-1]],
                drawstyle="steps-post",
                label=label,
                gid="whole",
                **style,
            )

    def partial(ax: Any, times: list[Any]) -> None:
        cut = [t for t in times if not spans.whole(t)]
        for x in cut:
            ax.axvspan(
                x,
                x + MINUTE,
                facecolor="none",
                edgecolor="#bdbdbd",
                hatch="///",
                linewidth=0,
                gid="partial minute",
            )
        if cut:  # the legend's key: a partial minute as its steps are drawn, in grey
            ax.plot(
                [], [], color=OTHER_COLOUR, linestyle=":", marker="o", markerfacecolor="none", label=PARTIAL
            )

    return _png(
        _grid(
            "Records produced per topic per minute",
            "records / minute",
            [panel],
            spans,
            minutes,
            lambda x: [x, x + MINUTE],
            partial,
        )
    )


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
    # Outside the data, on the right: inside, it covered the longest bars.
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return _png(fig)


def produce_latency(rows: Rows, _spans: Spans) -> bytes | None:
    if not rows:
        return None
    values = {p: [max(r[f"{p}_ms"], 1e-3) for r in rows] for p in ("p50", "p99", "max")}
    labels = [_label(f"{r['topic']} ({r['requests']:,})") for r in rows]
    return _bars(
        f"Produce latency per topic (top {len(rows)} by p99; requests)", labels, values, "ms, log scale"
    )


def request_latency(rows: Rows, _spans: Spans) -> bytes | None:
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
    section's order), and the drawing of those rows on the captures' spans."""

    file: str
    columns: tuple[str, ...]
    sql: Callable[[str, int, str], str]
    draw: Callable[[Rows, Spans], bytes | None]


# A lag line is a group's partition; each group its own row of panels.
LAG_LABEL = "COALESCE(topic, '(unnamed)') || '[' || COALESCE(CAST(partition AS VARCHAR), '-') || ']'"
FIGURES: dict[str, Figure] = {
    "lag": Figure(
        "lag_seconds.png",
        ("group_id", "topic"),
        lambda answer, top, _: series_sql(
            answer, LAG_LABEL, "second", "lag_seconds", top, "COALESCE(group_id, '-')", LAG_PANELS
        ),
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


def draw(
    rows: dict[str, Rows], undrawn: list[str] | None = None, spans: Spans | None = None
) -> dict[str, bytes]:
    """{section name: PNG} for every figure whose rows (its SQL's answer) are not empty, its times on
    the axes of ``spans`` (the captures', capture_spans; one axis over the data without). Names the
    font could not draw in full are added to ``undrawn`` (for one warning, not one per glyph)."""
    drawn = {}
    _undrawn.clear()
    # Labels are cleaned before matplotlib sees them; a warning it still gives is not the user's.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, figure in FIGURES.items():
            png = figure.draw(rows.get(name) or [], spans or Spans())
            if png is not None:
                drawn[name] = png
    if undrawn is not None:
        undrawn.extend(dict.fromkeys(_undrawn))
    return drawn
