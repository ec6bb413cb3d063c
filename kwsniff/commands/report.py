"""`kwsniff report`: the sections of kwsniff.sections.catalog over a tables directory, on DuckDB (the
default, embedded) or on Spark (`--master`), as text, JSON, CSV and a self-contained HTML page."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import click

from kwsniff.commands import messages
from kwsniff.commands.extras import require
from kwsniff.commands.fields import options_of
from kwsniff.commands.values import BoundedInt, Checked
from kwsniff.core.answers import chosen_sections, missing_tables, refusal
from kwsniff.core.answers import filters as report_filters
from kwsniff.core.options import ReportOptions
from kwsniff.core.values import out_location

TEXT_ROWS = 20


@click.command()
@click.argument("tables", type=Checked(out_location, "tables"))
@click.option(
    "--master", help="Run on Spark at this master URL (e.g. local[*], spark://host:7077); default: DuckDB."
)
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json", "csv"]), default="text", show_default=True
)
@click.option(
    "--section",
    "chosen",
    multiple=True,
    metavar="NAME",
    help="Only this section (repeatable; docs/report.md lists them).",
)
@click.option(
    "--top",
    type=BoundedInt(1),
    help=f"Rows per section [default: {TEXT_ROWS} in text; all in json, csv and --html].",
)
@click.option(
    "--sort", "sort_by", metavar="COLUMN", help="Sort each section having COLUMN by it, largest first."
)
@click.option("--topic", help="Only rows of this topic (sections with a topic column).")
@click.option("--client", help="Only rows of this client id (sections with a client_id column).")
@click.option("--group", help="Only rows of this group (sections with a group_id column).")
@click.option(
    "--since", type=click.DateTime(), help="Only traffic from this UTC time on (e.g. 2026-11-22T17:39:30)."
)
@click.option("--until", type=click.DateTime(), help="Only traffic up to this UTC time.")
@options_of(ReportOptions, "session_timeout_ms", "finding_threshold")
@click.option(
    "--html",
    "html_file",
    type=click.Path(path_type=Path),
    help="Also write a self-contained HTML page: findings first, every row of each section worst first"
    " (sortable, filterable), with plots.",
)
@click.option(
    "--plots", type=click.Path(path_type=Path), help="Also write the plots as PNG files into this directory."
)
@options_of(ReportOptions, "memory_limit", "spill_limit")
def report(
    tables: Path | str,
    master: str | None,
    fmt: str,
    chosen: tuple[str, ...],
    top: int | None,
    sort_by: str | None,
    topic: str | None,
    client: str | None,
    group: str | None,
    since: dt.datetime | None,
    until: dt.datetime | None,
    session_timeout_ms: int,
    finding_threshold: tuple[tuple[str, float], ...],
    html_file: Path | None,
    plots: Path | None,
    memory_limit: int,
    spill_limit: int,
) -> None:
    """Fleet report over TABLES (the --out of `kwsniff read` or `kwsniff spark`): clients per topic,
    lag in seconds, stopped groups, rebalances, latency, errors (docs/report.md)."""
    if master is not None:
        require("kwsniff report --master", "spark", ("pyspark", "pandas"))
    for option, given in (("--plots", plots), ("--html", html_file)):
        if given is not None:
            require(f"kwsniff report {option}", "report", ("matplotlib",))
    from kwsniff.sections.dataset import DatasetError

    try:
        problem = refusal(tables, missing_tables(tables))
    except (OSError, DatasetError) as exc:
        problem = str(exc) if isinstance(exc, DatasetError) else f"{tables}: {exc.strerror or exc}"
    if problem:
        messages.error(problem)
        sys.exit(1)
    from kwsniff.sections import output
    from kwsniff.sections.run import answer, answer_top, figure_rows, figure_spans, open_engine, unheld
    from kwsniff.view.escape import visible

    filters = report_filters(since, until, topic, client, group, session_timeout_ms, finding_threshold)
    try:
        sections = chosen_sections(chosen)
    except ValueError as exc:
        messages.error(str(exc))
        sys.exit(2)
    spark = None
    if master is not None:
        from kwsniff.spark.pipeline import first_line, spark_session, unreachable_master

        unreachable = unreachable_master(master)
        if unreachable:
            messages.error(unreachable)
            sys.exit(1)
        try:
            spark = spark_session(
                master, "kwsniff-report", conf={"spark.sql.shuffle.partitions": "8"}, quiet=True
            )
        except Exception as exc:  # the JVM's reason, on one line
            messages.error(f"--master {master}: the Spark session did not start: {first_line(exc)}")
            sys.exit(1)
        spark.sparkContext.setLogLevel("ERROR")
    limit = top if top is not None else (TEXT_ROWS if fmt == "text" else None)
    engine = None
    try:
        engine = open_engine(tables, filters, spark, memory_limit, spill_limit)
        nothing = unheld(engine, filters)
        if nothing:
            messages.error(visible(nothing))
            sys.exit(1)
        # Only the rows shown leave the engine, with their count; each plot takes the few rows it
        # draws (figure_rows). JSON and CSV without --top take all, and so does the page: every
        # row of a section is in it (the worst --top when given).
        every: dict[str, list[dict]] = {}
        if limit and html_file is None:
            cut = answer_top(engine, filters, sections, limit, sort_by)
            first, totals = {n: rows for n, (rows, _) in cut.items()}, {n: t for n, (_, t) in cut.items()}
        else:
            every = answer(engine, filters, sections)
            first = {n: output.sort_rows(rows, sort_by) for n, rows in every.items()}
            totals = {n: len(rows) for n, rows in first.items()}
        shown = {n: rows[:limit] if limit else rows for n, rows in first.items()}
        drawn = {}
        if html_file is not None or plots is not None:
            from kwsniff.sections.figures import draw

            undrawn: list[str] = []
            drawn = draw(
                figure_rows(engine, filters, sections, min(top or 8, 12)),
                undrawn,
                figure_spans(engine, filters),
            )
            if undrawn:
                names = ", ".join(undrawn[:5]) + (" ..." if len(undrawn) > 5 else "")
                messages.warnings(
                    "plots",
                    [f"{len(undrawn)} names have characters the font cannot draw, shown as ?: {names}"],
                )
    except Exception as exc:
        import duckdb  # a base dependency; already loaded where the engine is DuckDB

        from kwsniff.sections.dataset import DatasetError

        if isinstance(exc, DatasetError):  # a file it cannot read: one line naming it
            messages.error(str(exc))
            sys.exit(1)
        if not isinstance(exc, duckdb.OutOfMemoryException):  # past --memory-limit and the disk
            raise
        if "max_temp_directory_size" in str(exc):
            messages.error(
                f"{tables}: DuckDB needed more than --spill-limit ({spill_limit:,} bytes) of disk past"
                " --memory-limit; raise either, or report less (--section, --since, --until)"
            )
        else:
            messages.error(
                f"{tables}: DuckDB ran out of memory ({str(exc).splitlines()[0]}); raise --memory-limit"
            )
        sys.exit(1)
    finally:
        if engine is not None:
            engine.close()
        if spark is not None:
            spark.stop()
    if fmt == "json":
        click.echo(output.as_json(shown))
    elif fmt == "csv":
        # Written as it is: click.echo would drop CSI sequences from cells when not on a terminal,
        # and on one the cells show control characters as escapes, as the text report does.
        csv_out = sys.stdout
        csv_out.write(output.as_csv(shown, terminal=csv_out.isatty()))
        csv_out.flush()
    else:
        for s in sections:
            click.echo(output.text_table(s.title, shown[s.name], totals[s.name]))
    if plots is not None:
        from kwsniff.sections.figures import FIGURES

        plots.mkdir(parents=True, exist_ok=True)
        for section, png in drawn.items():
            (plots / FIGURES[section].file).write_bytes(png)
        click.echo("\nplots: " + ", ".join(str(plots / FIGURES[s].file) for s in drawn), err=True)
    if html_file is not None:
        from kwsniff.sections.html import page

        title = f"kwsniff report: {tables}"
        html_file.write_text(page(title, sections, every, drawn, sort_by, top), encoding="utf-8")
        click.echo(f"html: {html_file}", err=True)
