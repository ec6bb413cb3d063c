"""Run report sections on an engine and keep the rows a user asked for."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kwsniff.sections.capture_spans import Spans
from kwsniff.sections.catalog import SECTIONS, Section
from kwsniff.sections.engines import DuckEngine, Filters, Row, SparkEngine
from kwsniff.sections.sql import split_order

# --topic/--client/--group match these columns of a section's rows, where it has them.
NAME_FILTERS = {"topic": ("topic",), "client": ("client_id",), "group": ("group_id",)}


def open_engine(
    tables: Path | str,
    filters: Filters,
    spark: Any = None,
    memory_limit: int | None = None,
    spill_limit: int | None = None,
) -> DuckEngine | SparkEngine:
    """DuckDB (under ``memory_limit`` bytes, spilling at most ``spill_limit``) unless a Spark session is given."""
    if spark is None:
        return DuckEngine(tables, filters, memory_limit, spill_limit)
    return SparkEngine(tables, filters, spark)


def keep(rows: list[Row], filters: Filters) -> list[Row]:
    for column, value in wanted(filters).items():
        if rows and column in rows[0]:
            rows = [r for r in rows if r[column] == value]
    return rows


def answer(
    engine: DuckEngine | SparkEngine, filters: Filters, sections: Sequence[Section] = SECTIONS
) -> dict[str, list[Row]]:
    """{section name: its rows}, in the sections' order."""
    return {s.name: keep(engine.run(_bind(s, filters)), filters) for s in sections}


def answer_arrow(
    engine: DuckEngine | SparkEngine, filters: Filters, sections: Sequence[Section] = SECTIONS
) -> dict[str, Any]:
    """{section name: its rows as a pyarrow.Table}, in the sections' order: :func:`answer`'s rows,
    its columns typed by the engine (the Python API's report)."""
    import pyarrow.compute as pc

    out = {}
    for s in sections:
        table = engine.arrow(_bind(s, filters))
        for column, value in wanted(filters).items():
            if column in table.column_names:
                table = table.filter(pc.equal(table[column], value))
        out[s.name] = plain_types(table)
    return out


def plain_types(table: Any) -> Any:
    """``table`` with the types both engines agree on, as rows_of gives values: whole decimals
    (DuckDB's sums) as int64, others as float64, times as UTC timestamps (DuckDB's naive ones are UTC)."""
    import pyarrow as pa

    fields = []
    for f in table.schema:
        t = f.type
        if pa.types.is_decimal(t):
            t = pa.int64() if t.scale == 0 else pa.float64()
        elif pa.types.is_timestamp(t):
            t = pa.timestamp("us", tz="UTC")
        fields.append(f.with_type(t))
    return table.cast(pa.schema(fields))


def answer_top(
    engine: DuckEngine | SparkEngine,
    filters: Filters,
    sections: Sequence[Section],
    limit: int,
    sort_by: str | None = None,
) -> dict[str, tuple[list[Row], int]]:
    """{section name: (its first ``limit`` rows, sorted by ``sort_by`` when given, and its row count)}:
    what a text report or ``--top N`` shows, the rows of :func:`answer` then output.sort_rows, cut."""
    from kwsniff.sections.output import sort_rows

    out = {}
    for s in sections:
        sql = _bind(s, filters)
        if isinstance(engine, DuckEngine):
            out[s.name] = engine.top(sql, wanted(filters), sort_by, limit)
        else:
            rows = sort_rows(keep(engine.run(sql), filters), sort_by)
            out[s.name] = (rows[:limit], len(rows))
    return out


def figure_rows(
    engine: DuckEngine | SparkEngine, filters: Filters, sections: Sequence[Section], top: int
) -> dict[str, list[Row]]:
    """{section name: the rows its figure draws} (figures.FIGURES), each reduced from the section's
    answer by the figure's SQL inside the engine, after --topic/--client/--group: at most ``top``
    series and one line of the others, or ``top`` bars, whatever the answer's size."""
    from kwsniff.sections.figures import FIGURES

    out = {}
    for s in sections:
        figure = FIGURES.get(s.name)
        if figure is None:
            continue
        body, order = split_order(_bind(s, filters))
        # Literals, not parameters: Spark's SQL takes none.
        kept = [
            f"{column} = '{value.replace(chr(39), chr(39) * 2)}'"
            for column, value in wanted(filters).items()
            if column in figure.columns
        ]
        where = " WHERE " + " AND ".join(kept) if kept else ""
        out[s.name] = engine.run(figure.sql(f"SELECT * FROM ({body}) AS _s{where}", top, order))
    return out


def figure_spans(engine: DuckEngine | SparkEngine, filters: Filters) -> Spans:
    """The captures' spans the figures draw their times on, cut to --since/--until."""
    from kwsniff.sections import capture_spans

    return capture_spans.spans(engine.run(capture_spans.SPANS_SQL), filters.since, filters.until)


def wanted(filters: Filters) -> dict[str, str]:
    """{column: value} of the --topic/--client/--group given (NAME_FILTERS)."""
    return {c: getattr(filters, o) for o, (c,) in NAME_FILTERS.items() if getattr(filters, o) is not None}


def _bind(section: Section, filters: Filters) -> str:
    """The section's SQL for ``filters``: a section that keeps state, under --since/--until, reads
    every row up to --until (sections_lag.windowed)."""
    from kwsniff.sections import findings
    from kwsniff.sections.sections_lag import SESSION_TIMEOUT, STATEFUL, windowed

    sql = section.sql
    at = [
        None if t is None else f"TIMESTAMP '{t:%Y-%m-%d %H:%M:%S.%f}'" for t in (filters.since, filters.until)
    ]
    if section.name in STATEFUL and (filters.since is not None or filters.until is not None):
        sql = windowed(section.name, *at)
    if section.name == "findings":
        if filters.since is not None or filters.until is not None:
            # The stopped and lag rules judge what those sections answer in the window.
            sql = findings.findings_sql(windowed("stopped", *at), windowed("lag", *at))
        sql = findings.bind(sql, dict(filters.finding_thresholds))
    return sql.replace(SESSION_TIMEOUT, str(int(filters.session_timeout_ms)))


# Where each --topic/--client/--group value may be held, whatever the sections read.
HELD = {
    "topic": "SELECT DISTINCT topic AS name FROM partitions WHERE topic IS NOT NULL",
    "client": "SELECT DISTINCT client_id AS name FROM requests WHERE client_id IS NOT NULL",
    "group": """SELECT DISTINCT group_id AS name FROM groups WHERE group_id IS NOT NULL
        UNION SELECT DISTINCT group_id AS name FROM partitions WHERE group_id IS NOT NULL""",
}
HINT_NAMES = 8  # names a hint lists at most


def unheld(engine: DuckEngine | SparkEngine, filters: Filters) -> str:
    """Why --topic/--client/--group can match no row: "" when the tables hold every value given,
    else one line naming the first value they do not hold and the ones they do, the nearest to it
    first (:func:`nearest`). Under --since/--until the whole tables are asked (a group may be
    silent in a window and still be there)."""
    from kwsniff.sections.views import known

    windowed = filters.since is not None or filters.until is not None
    for option, sql in HELD.items():
        value = getattr(filters, option)
        if value is None:
            continue
        names = sorted(r["name"] for r in engine.run(known(sql) if windowed else sql))
        if value in names:
            continue
        return f"--{option} {value}: the tables hold no such {option}; {held_names(value, names)}"
    return ""


def held_names(value: str, names: list[str]) -> str:
    """ "they hold N: ..." of a hint: the names like ``value`` first (:func:`nearest`, "the nearest
    first"), then the others in order, HINT_NAMES of them at most."""
    if not names:
        return "they hold none"
    close = nearest(value, names)
    listed = close + [n for n in names if n not in close]
    shown = ", ".join(listed[:HINT_NAMES])
    if len(listed) > HINT_NAMES:
        shown += f" and {len(listed) - HINT_NAMES} more"
    return f"they hold {len(names)}{', the nearest first' if close else ''}: {shown}"


def nearest(value: str, names: list[str]) -> list[str]:
    """The names like ``value`` (a typo, another case, a suffix missing), the likest first, ties in
    order: difflib's ratio of at least 0.6 on the lowercased names (get_close_matches' rule), or
    one holding the other."""
    import difflib

    wanted = value.lower()
    likeness = []
    for n in names:
        matcher = difflib.SequenceMatcher(None, wanted, n.lower())
        ratio = matcher.ratio()
        if ratio >= 0.6 or (wanted and (wanted in n.lower() or n.lower() in wanted)):
            likeness.append((-ratio, n))
    return [n for _, n in sorted(likeness)]
