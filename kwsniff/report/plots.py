"""PNG plots of a report (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from kwsniff.report.figures import plain, plain_log


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def latency_distribution(requests: Any, path: Path, *, max_points: int = 200_000) -> Path | None:
    """Box plot of answered-request latencies per API (log scale), Fetch included and labelled; None,
    and no file, when no request was answered (a box plot of nothing is an error in matplotlib)."""
    from pyspark.sql import functions as F

    rows = (
        requests.where(F.col("latency_ms").isNotNull())
        .select("api_name", "latency_ms")
        .limit(max_points)
        .collect()
    )
    by_api: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        by_api[row["api_name"]].append(max(row["latency_ms"], 1e-3))
    if not by_api:
        return None
    apis = sorted(by_api, key=lambda a: -len(by_api[a]))
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(apis) + 1.5))
    ax.boxplot(
        [by_api[a] for a in apis],
        orientation="horizontal",
        tick_labels=[f"{a} ({len(by_api[a])})" for a in apis],
    )
    ax.set_xscale("log")
    plain_log(ax.xaxis)
    ax.set_xlabel("latency (ms, log scale): request's last packet to response's first")
    ax.set_title("Request latency per API (number of answered requests)")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def cumulative_series(rows: Any, unit: str) -> tuple[Any, dict[str, tuple[list[float], list[int]]]]:
    """(first time, {topic: (seconds since it, cumulative records)}) of throughput_per_minute rows at
    ``unit`` resolution. Each line starts at 0 records at its topic's first Produce: no flat line
    before a topic existed."""
    series: dict[str, list[tuple[Any, int]]] = defaultdict(list)
    for row in rows:
        series[row["topic"] or "(unnamed)"].append((row[unit], row["records"]))
    if not series:
        return None, {}
    start = min(t for points in series.values() for t, _ in points)
    lines = {}
    for topic, points in sorted(series.items()):
        points.sort()
        xs, ys, total = [(points[0][0] - start).total_seconds()], [0], 0
        for t, n in points:
            total += n
            xs.append((t - start).total_seconds())
            ys.append(total)
        lines[topic] = (xs, ys)
    return start, lines


def throughput_over_time(throughput: Any, path: Path, unit: str) -> Path:
    """Cumulative records produced per topic against seconds since the first Produce (rows of
    analytics.throughput_per_minute at ``unit`` resolution): the slope is the throughput, and a
    capture whose producers finish within a second still shows its bursts."""
    start, lines = cumulative_series(throughput.collect(), unit)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 4))
    if lines:
        for topic, (xs, ys) in lines.items():
            ax.plot(xs, ys, marker=".", drawstyle="steps-post", label=f"{topic} ({ys[-1]:,} records)")
        ax.set_title(f"Records produced per topic since {start:%Y-%m-%d %H:%M:%S} UTC (per {unit})")
        ax.legend()
    ax.set_xlabel("seconds since the first Produce request")
    ax.set_ylabel("records produced (cumulative)")
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(plain)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
