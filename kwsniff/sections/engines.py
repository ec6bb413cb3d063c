"""Two engines for one set of report sections: DuckDB (embedded, the default) and Spark (`--master`).

Every section is one SQL query in DuckDB's dialect over views named after the tables
(`requests`, `connections`, `groups`, ...). DuckDB runs it as written; for Spark, sqlglot transpiles
it to Spark SQL. Chosen over Ibis because a section stays plain SQL a reader can paste into
`duckdb` or `spark-sql`, and other sections (the `upgrade` one) arrive as SQL strings too.
Both engines return rows as lists of dicts with UTC datetimes, so their answers compare directly.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kwsniff.sections.catalog import PARTS
from kwsniff.sections.dataset import (
    DatasetError,
    DuckTables,
    Filters,
    Row,
    delta_location,
    delta_sources,
    files,
    in_fill_order,
    known_views,
    rows_of,
    time_filter,
    windowed,
    written,
)
from kwsniff.sections.sql import split_order
from kwsniff.sections.summaries import stored
from kwsniff.sections.views import (
    ANY_UNNAMED_SQL,
    DERIVED,
    NAMED,
    TOPIC_NAMES,
    TOPIC_NAMES_SQL,
    UNNAMED_SQL,
    fill,
    named,
    raw,
    table_columns,
)

# The captures whose parts a report computes from their rows, beside the others' summaries.
UNSUMMARIZED = "_unsummarized"


def part_views(parts: dict[str, list[str]] | None, rest: bool = False) -> dict[str, str]:
    """The sections' per-capture parts (catalog.PARTS) as views: their summaries' files when
    ``parts`` gives them, else their queries over the rows; with ``rest``, the summaries' rows and the
    query's rows of the captures in the UNSUMMARIZED table (a part never looks past one capture: each
    capture's rows are its own). Made after the views sections share (views.DERIVED), which they read."""
    out = {}
    for name, sql in PARTS.items():
        if not parts:
            out[name] = sql
        elif not rest:
            out[name] = f"SELECT * FROM read_parquet({parts[name]!r})"
        else:
            out[name] = (
                f"SELECT * FROM read_parquet({parts[name]!r}) UNION ALL BY NAME SELECT * FROM ({sql}) AS p"
                f" WHERE capture IN (SELECT capture FROM {UNSUMMARIZED})"
            )
    return out


class DuckEngine(DuckTables):
    """The report's engine on DuckDB: the tables and shared views (DuckTables), then the sections'
    per-capture parts, read from the summaries kept with the tables when they cover them."""

    def _more_views(self, tables: Path | str, filters: Filters) -> dict[str, str]:
        # Read from the summaries kept with the tables, or computed from the rows (summaries.py);
        # Delta tables' parts are computed from their rows (their summaries are not read yet).
        unsummarized = self.named_late or self.delta is not None
        found_parts = None if unsummarized else stored(self.con, Path(tables), self.paths, filters)
        parts, rest = found_parts or (None, [])
        # Every part read from the summaries alone (top reads such answers in place).
        self.summarized = parts is not None and not rest
        if rest:
            self.con.execute(f"CREATE TEMP TABLE {UNSUMMARIZED} (capture VARCHAR)")
            self.con.executemany(f"INSERT INTO {UNSUMMARIZED} VALUES (?)", [[c] for c in rest])
        return part_views(parts, bool(rest))

    def top(self, sql: str, wanted: dict[str, str], sort_by: str | None, limit: int) -> tuple[list[Row], int]:
        """The first ``limit`` rows of ``sql`` (whose columns equal ``wanted`` where it has them,
        sorted by ``sort_by`` descending when it has it) and the count of all such rows.

        The same rows as run.keep and output.sort_rows over every row, without carrying millions of
        rows into Python for a text report of twenty, and without sorting them all: the answer is
        kept unsorted as a temporary table, counted there, and its first rows taken by the section's
        own ORDER BY (after ``sort_by``) with a top-N heap. An answer read from the summaries alone
        is not kept: read twice (counted from the files' footers, then cut) it costs less than
        copying its millions of rows."""
        body, order = split_order(sql)
        self._keep_shared(body)
        sources = set(re.findall(r"\b(?:FROM|JOIN)\s+([A-Za-z_]\w*)", body, re.IGNORECASE))
        if self.summarized and sources and all(s.startswith("summary_") for s in sources):
            source = f"({body}) AS _answer"
            columns = [d[0] for d in self.con.execute(f"DESCRIBE {body}").fetchall()]
        else:
            self.con.execute(f"CREATE OR REPLACE TEMP TABLE _answer AS {body}")
            source, columns = "_answer", self.con.table("_answer").columns
        where = [f'"{c}" = ?' for c in wanted if c in columns]
        values = [v for c, v in wanted.items() if c in columns]
        kept = f"FROM {source}{' WHERE ' + ' AND '.join(where) if where else ''}"
        keys = ([f'"{sort_by}" DESC NULLS LAST'] if sort_by in columns else []) + ([order] if order else [])
        ((total,),) = self.con.execute(f"SELECT COUNT(*) {kept}", values).fetchall()
        rows = self.run(
            f"SELECT * {kept} {'ORDER BY ' + ', '.join(keys) if keys else ''} LIMIT {int(limit)}", values
        )
        return rows, total


def to_spark(sql: str) -> str:
    """DuckDB SQL as Spark SQL (sqlglot; epoch_us has no sqlglot mapping, it is Spark's unix_micros)."""
    import sqlglot

    out = sqlglot.transpile(sql, read="duckdb", write="spark")[0]
    # sqlglot writes quantile_disc as PERCENTILE_DISC(x, p); Spark takes the standard's ordered-set form.
    out = _PERCENTILE_DISC.sub(r"PERCENTILE_DISC(\2) WITHIN GROUP (ORDER BY \1)", out)
    return out.replace("EPOCH_US(", "UNIX_MICROS(")


_PERCENTILE_DISC = re.compile(r"PERCENTILE_DISC\(([\w.`]+), ([0-9.]+)\)")


class SparkEngine:
    """The same views as Spark temporary views; the same SQL, transpiled."""

    name = "spark"

    def __init__(self, tables: Path | str, filters: Filters, spark: Any) -> None:
        import duckdb

        self.spark = spark
        columns = table_columns()
        delta = delta_location(tables)
        if delta is not None and not delta.is_local:
            raise DatasetError(
                f"{tables}: report --master reads Delta tables on local disk; on S3, use DuckDB"
            )
        # Delta tables: the files of their last commit, from the log (as DuckDB reads them).
        paths = delta_sources(delta)[0] if delta else {table: files(Path(tables), table) for table in columns}
        with duckdb.connect() as footers:
            found = written(footers, paths)
            found_parts = None if delta else stored(footers, Path(tables), paths, filters)
        # Spark reads the summaries only when they cover every capture (else every part from the rows).
        parts = found_parts[0] if found_parts is not None and not found_parts[1] else None
        self.summarized = parts is not None
        for table, wanted in columns.items():
            # The schema given, not inferred: no job to merge file schemas, and columns a file
            # lacks read as nulls.
            ddl = ", ".join(f"`{c}` {_spark_type(t)}" for c, t in wanted)
            df = (
                spark.read.schema(ddl).parquet(*paths[table])
                if paths[table]
                else spark.createDataFrame([], ddl)
            )
            df.createOrReplaceTempView(raw(table))
        named_late = False
        if spark.sql(to_spark(ANY_UNNAMED_SQL)).collect():  # as DuckTables: names gathered only then
            spark.sql(to_spark(TOPIC_NAMES_SQL)).createOrReplaceTempView(TOPIC_NAMES)
            named_late = spark.sql(to_spark(UNNAMED_SQL)).collect()[0][0] > 0
        for table in NAMED:
            body = named(columns[table], raw(table)) if named_late else f"SELECT * FROM {raw(table)}"
            spark.sql(to_spark(body)).createOrReplaceTempView(f"_{table}_all")
        if named_late:  # the summaries were made without the names learned since (DuckTables)
            parts = None
            self.summarized = False
        for table in in_fill_order(columns):
            source = (
                f"_{table}_all"
                if found[table][1]
                else f"({fill(table, columns[table], f'_{table}_all')}) AS f"
            )
            spark.sql(
                to_spark(f"SELECT * FROM {source}{time_filter(table, filters)}")
            ).createOrReplaceTempView(table)
            # Every section reads the tables again: kept after the first read (spilled to disk
            # when large).
            spark.catalog.cacheTable(table)
        for name, sql in {**DERIVED, **part_views(None)}.items():
            if parts and name in parts:
                spark.read.parquet(*parts[name]).createOrReplaceTempView(name)
            else:
                spark.sql(to_spark(sql)).createOrReplaceTempView(name)
        if windowed(filters):
            for name, sql in known_views(columns, found, filters).items():
                spark.sql(to_spark(sql)).createOrReplaceTempView(name)

    def run(self, sql: str) -> list[Row]:
        return rows_of(self.arrow(sql))

    def arrow(self, sql: str) -> Any:
        return self.spark.sql(to_spark(sql)).toArrow()

    def close(self) -> None:
        for table in table_columns():
            self.spark.catalog.uncacheTable(table)


def _spark_type(duck: str) -> str:
    return {"VARCHAR": "string", "TIMESTAMPTZ": "timestamp", "BLOB": "binary", "DOUBLE": "double"}.get(
        duck, duck.lower()
    )
