"""The report's plots, drawn from its answers (rows of sections) with matplotlib's Agg backend.

Made to stay readable for a fleet: time axes are UTC dates, a legend names the top ``top`` series and
folds the rest into one grey "other", and figures are saved with tight bounding boxes so no label is
cut off.
"""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Callable
from typing import Any

Answers = dict[str, list[dict[str, Any]]]
OTHER_COLOUR = "#9e9e9e"


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _utc_axis(ax: Any) -> None:
    import matplotlib.dates as mdates

    locator = mdates.AutoDateLocator(tz="UTC")
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz="UTC"))
    ax.set_xlabel("time (UTC)")


def _png(fig: Any) -> bytes:
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=100, bbox_inches="tight")
    _pyplot().close(fig)
    return out.getvalue()


def _series_over_time(
    rows: list[dict[str, Any]], label: Callable[[dict[str, Any]], str], x: str, y: str, top: int
) -> tuple[list[tuple[str, list[Any], list[float]]], list[tuple[list[Any], list[float]]]]:
    """(top series by their largest y, the others) as (label, xs, ys) sorted by x."""
    series: dict[str, list[tuple[Any, float]]] = defaultdict(list)
    for r in rows:
        if r[x] is not None and r[y] is not None:
            series[label(r)].append((r[x], float(r[y])))
    ranked = sorted(series, key=lambda k: (-max(v for _, v in series[k]), k))
    as_xy = {k: (sorted(series[k])) for k in ranked}
    shown = [(k, [p[0] for p in as_xy[k]], [p[1] for p in as_xy[k]]) for k in ranked[:top]]
    rest = [([p[0] for p in as_xy[k]], [p[1] for p in as_xy[k]]) for k in ranked[top:]]
    return shown, rest


def _lines(title: str, ylabel: str, shown: list[Any], rest: list[Any], step: bool = False) -> bytes:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(11, 4.5))
    style = {"drawstyle": "steps-post"} if step else {}
    for i, (xs, ys) in enumerate(rest):
        ax.plot(
            xs,
            ys,
            color=OTHER_COLOUR,
            linewidth=0.8,
            label=f"other ({len(rest)})" if i == 0 else None,
            **style,
        )
    for label, xs, ys in shown:
        ax.plot(xs, ys, marker=".", linewidth=1.6, label=label, **style)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    _utc_axis(ax)
    if shown:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return _png(fig)


def lag_seconds(answers: Answers, top: int) -> bytes | None:
    rows = answers.get("lag") or []
    if not rows:
        return None
    shown, rest = _series_over_time(
        rows, lambda r: f"{r['group_id']} {r['topic']}[{r['partition']}]", "second", "lag_seconds", top
    )
    return _lines("Consumer lag in seconds per group and partition", "lag (s)", shown, rest)


def throughput(answers: Answers, top: int) -> bytes | None:
    rows = answers.get("throughput") or []
    if not rows:
        return None
    shown, rest = _series_over_time(rows, lambda r: r["topic"] or "(unnamed)", "minute", "records", top)
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
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return _png(fig)


def _top_rows(rows: list[dict[str, Any]], key: str, top: int) -> list[dict[str, Any]]:
    return sorted((r for r in rows if r[key] is not None), key=lambda r: -r[key])[:top]


def produce_latency(answers: Answers, top: int) -> bytes | None:
    rows = _top_rows(answers.get("produce_latency") or [], "p99_ms", top)
    if not rows:
        return None
    values = {p: [max(r[f"{p}_ms"], 1e-3) for r in rows] for p in ("p50", "p99", "max")}
    labels = [f"{r['topic']} ({r['requests']:,})" for r in rows]
    return _bars(f"Produce latency per topic (top {top} by p99; requests)", labels, values, "ms, log scale")


def request_latency(answers: Answers, top: int) -> bytes | None:
    rows = _top_rows(answers.get("latency") or [], "p99_ms", top)
    if not rows:
        return None
    values = {p: [max(r[f"{p}_ms"], 1e-3) for r in rows] for p in ("p50", "p99")}
    labels = [
        f"{r['api_name']} v{r['api_version']} {r['client_id'] or '-'} ({r['requests']:,})" for r in rows
    ]
    return _bars(f"Request latency, long polls apart (top {top} by p99)", labels, values, "ms, log scale")


# name: (file name under --plots, drawing function)
FIGURES: dict[str, tuple[str, Callable[[Answers, int], bytes | None]]] = {
    "lag": ("lag_seconds.png", lag_seconds),
    "throughput": ("throughput.png", throughput),
    "produce_latency": ("produce_latency.png", produce_latency),
    "latency": ("latency_by_api.png", request_latency),
}


def draw(answers: Answers, top: int) -> dict[str, bytes]:
    """{section name: PNG} for every figure whose section has rows."""
    drawn = {}
    for name, (_, draw_one) in FIGURES.items():
        png = draw_one(answers, top)
        if png is not None:
            drawn[name] = png
    return drawn
