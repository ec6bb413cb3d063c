"""`kwsniff report`: the fleet questions of kwsniff.report.analytics over a tables directory, printed."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from kwsniff.commands import messages
from kwsniff.commands.extras import NeedsExtra, require

ROWS_SHOWN = 20
NEEDED = ("requests", "connections", "errors", "partitions", "groups")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def print_table(title: str, columns: list[str], rows: list[Any], total: int) -> None:
    """A plain aligned table (pipes and grep stay easy); at most ROWS_SHOWN rows."""
    cells = [[_cell(r[c]) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    click.echo(f"\n{title} ({total:,} rows)")
    click.echo("  " + "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for row in cells:
        click.echo("  " + "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))
    if total > len(rows):
        click.echo(f"  ... {total - len(rows):,} more")


def questions(t: dict[str, Any]) -> list[tuple[str, Callable[[], Any]]]:
    from kwsniff.report import analytics as a

    r, c, e, p, g = (t[n] for n in NEEDED)
    return [
        ("Latency percentiles (ms), Fetch apart", lambda: a.latency_percentiles(r, c)),
        ("Fetch latency percentiles (ms)", lambda: a.latency_percentiles(r, c, fetch=True)),
        ("Errors by name, topic and client", lambda: a.error_rates(e, r)),
        ("Throttled clients", lambda: a.throttled_clients(r)),
        ("Records and bytes produced per topic per minute", lambda: a.throughput_per_minute(p, r)),
        ("Consumer lag per group and partition", lambda: a.consumer_lag(p, r)),
        ("Produce to consume latency per offset", lambda: a.produce_to_consume_latency(p, r)),
        ("Rebalances", lambda: a.rebalances(g)),
        ("Connection churn per minute", lambda: a.connection_churn(c)),
        ("Client software inventory", lambda: a.client_inventory(c)),
    ]


@click.command(cls=NeedsExtra, extra="spark", modules=("pyspark", "pandas"))
@click.argument("tables", type=click.Path(path_type=Path))
@click.option("--master", default="local[*]", show_default=True, help="Spark master URL.")
@click.option("--plots", type=click.Path(path_type=Path), help="Directory for PNG plots.")
def report(tables: Path, master: str, plots: Path | None) -> None:
    """Fleet report over TABLES (the --out of `kwsniff read` or `kwsniff spark`)."""
    if plots is not None:
        require("kwsniff report --plots", "spark", ("matplotlib",))
    if not tables.is_dir():
        messages.error(f"{tables}: not a directory of kwsniff tables")
        sys.exit(1)
    missing = [n for n in NEEDED if not any((tables / n).rglob("*.parquet"))]
    if missing:
        messages.error(f"{tables}: no {', '.join(missing)} table (written by kwsniff read or spark)")
        sys.exit(1)
    from kwsniff.report.analytics import load_tables, throughput_per_minute
    from kwsniff.spark.pipeline import spark_session

    spark = spark_session(master, "kwsniff-report")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        t = load_tables(spark, tables)
        for title, question in questions(t):
            df = question().cache()
            print_table(title, df.columns, df.limit(ROWS_SHOWN).collect(), df.count())
        if plots is not None:
            from kwsniff.report.plots import latency_distribution, throughput_over_time

            plots.mkdir(parents=True, exist_ok=True)
            latency = latency_distribution(t["requests"], plots / "latency_by_api.png")
            made = [
                *([latency] if latency else []),
                throughput_over_time(
                    throughput_per_minute(t["partitions"], t["requests"], unit="millisecond"),
                    plots / "throughput.png",
                    "millisecond",
                ),
            ]
            click.echo("\nplots: " + ", ".join(str(p) for p in made))
            if latency is None:
                click.echo("latency_by_api.png not drawn: no request in the tables was answered")
    finally:
        spark.stop()
