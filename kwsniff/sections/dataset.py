"""A tables directory as DuckDB views: its Parquet files found and checked, the rows the filters
keep, and the views the sections share (views.py). Below the summaries (which compute the sections'
per-capture parts on it) and the report's engines (engines.py, which read those parts back).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import re
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from kwsniff.sections.views import (
    ANY_UNNAMED_SQL,
    DERIVED,
    FILLED,
    KNOWN,
    MATERIALIZED,
    NAMED,
    TOPIC_NAMES,
    TOPIC_NAMES_SQL,
    UNNAMED_SQL,
    fill,
    known,
    named,
    raw,
    table_columns,
)
from kwsniff.tables.names import TABLES

if TYPE_CHECKING:
    from kwsniff.sinks.location import Location

Row = dict[str, Any]


@dataclass(frozen=True)
class Filters:
    """Rows kept from the tables before any section runs (time) or from a section's answer (names)."""

    since: dt.datetime | None = None
    until: dt.datetime | None = None
    topic: str | None = None
    client: str | None = None
    group: str | None = None
    # For groups whose JoinGroup is not in the capture (Kafka's consumer default, KIP-735).
    session_timeout_ms: int = 45_000
    # `findings` thresholds given (`--finding-threshold NAME=VALUE`): (name, value) pairs; the others
    # at their defaults (kwsniff.sections.findings.THRESHOLDS).
    finding_thresholds: tuple[tuple[str, float], ...] = ()


def time_filter(table: str, f: Filters) -> str:
    """A WHERE clause keeping a table's rows inside --since/--until (by the table's own time)."""
    column = {
        "requests": "ts_request",
        "groups": "ts_request",
        "partitions": "ts_request",
        "errors": "ts_request",
        "connections": "ts_last",
    }.get(table)
    if column is None:
        return ""
    conds = []
    if f.since is not None:
        conds.append(f"{column} >= TIMESTAMP '{f.since:%Y-%m-%d %H:%M:%S.%f}'")
    if f.until is not None:
        low = "ts_first" if table == "connections" else column
        conds.append(f"{low} <= TIMESTAMP '{f.until:%Y-%m-%d %H:%M:%S.%f}'")
    return " WHERE " + " AND ".join(conds) if conds else ""


def windowed(f: Filters) -> bool:
    return f.since is not None or f.until is not None


def known_views(
    columns: dict[str, Any], found: dict[str, tuple[set[str], bool]], f: Filters
) -> dict[str, str]:
    """{name: SQL} of the ``known_`` twins (views.known) of the tables and shared views, in the order
    to create them: each table's rows up to --until, whatever --since says. The sections that keep
    state (lag, stopped, member_lag) read them under a window: what the capture saw before the
    window is what they know at its start."""
    until = time_filter
    out = {}
    for table in in_fill_order(columns):
        where = until(table, replace(f, since=None))
        source = (
            f"_{table}_all"
            if found[table][1]
            else f"({known(fill(table, columns[table], f'_{table}_all'))}) AS f"
        )
        out[f"{KNOWN}{table}"] = f"SELECT * FROM {source}{where}"
    for name, sql in DERIVED.items():
        out[f"{KNOWN}{name}"] = known(sql)
    return out


class DatasetError(Exception):
    """A file in the dataset that the report cannot read as the table it sits in. str() is one line
    naming the file: the report refuses the dataset rather than answer from part of it."""


# Parquet physical types a column of each DuckDB type may be stored as (kwsniff writes the first).
_PHYSICAL = {
    "SMALLINT": {"INT32", "INT64"},
    "INTEGER": {"INT32", "INT64"},
    "BIGINT": {"INT32", "INT64"},
    "DOUBLE": {"DOUBLE", "FLOAT"},
    "BOOLEAN": {"BOOLEAN"},
    "VARCHAR": {"BYTE_ARRAY"},
    "BLOB": {"BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"},
    "TIMESTAMPTZ": {"INT64", "INT96"},
}


def _schemas(con: Any, listed: list[str]) -> list[tuple[str, str, str | None]]:
    """(file, column, physical type) of every column of ``listed``, from the footers in one query;
    a file DuckDB cannot read is a DatasetError naming it (found by asking file by file)."""
    import duckdb

    query = "SELECT file_name, name, type FROM parquet_schema({!r})"
    try:
        return con.execute(query.format(listed)).fetchall()
    except duckdb.OutOfMemoryException:
        raise  # the engine's budget, not a file: the report says so on its own
    except duckdb.Error:
        for path in listed:
            try:
                con.execute(query.format([path])).fetchall()
            except duckdb.OutOfMemoryException:
                raise
            except duckdb.Error as exc:
                reason = (
                    str(exc).splitlines()[0].removeprefix("IO Error: ").removeprefix("Invalid Input Error: ")
                )
                raise DatasetError(f"{path}: not a Parquet file the report can read ({reason})") from None
        raise


def written(con: Any, paths: dict[str, list[str]]) -> dict[str, tuple[set[str], bool]]:
    """Per table of ``paths`` (its Parquet files): the columns any of its files has, and whether every
    file has the FILLED ones, read from the files' footers in one DuckDB query. A file that is not
    Parquet, or whose columns are not its table's (no `capture`, or a column of another type), is a
    DatasetError naming it."""
    listed = [p for files_of in paths.values() for p in files_of]
    table_of = {p: table for table, files_of in paths.items() for p in files_of}
    wanted = {table: dict(cols) for table, cols in table_columns().items()}
    names: dict[str, set[str]] = {p: set() for p in listed}
    if listed:
        for path, name, physical in _schemas(con, listed):
            if physical is None:
                continue  # the schema's root (or a group of a nested column)
            names[path].add(name)
            expected = wanted.get(table_of[path], {}).get(name)
            if expected in _PHYSICAL and physical not in _PHYSICAL[expected]:
                raise DatasetError(
                    f"{path}: column {name} is {physical}, not {expected} as in the"
                    f" {table_of[path]} table: a file of another schema"
                )
        for path in listed:
            table = wanted.get(table_of[path], {})
            if "capture" in table and "capture" not in names[path]:
                raise DatasetError(f"{path}: no capture column: not a file of the {table_of[path]} table")
            # Tables only gain columns (docs/tables.md): a column its table never had marks a file of
            # another table (a `connections` file under requests/), whose rows would be misread.
            foreign = sorted(names[path] - set(table)) if table else []
            if foreign:
                raise DatasetError(
                    f"{path}: column {foreign[0]} is not in the {table_of[path]} table: a file of another table"
                )
    return {
        table: (
            set().union(*(names[p] for p in files_of)),
            all(set(FILLED.get(table, ())) <= names[p] for p in files_of),
        )
        for table, files_of in paths.items()
    }


def in_fill_order(columns: dict[str, Any]) -> list[str]:
    """The tables, `connections` and `requests` first: the others are filled from them."""
    first = ["connections", "requests"]
    return first + [t for t in columns if t not in first]


def _value(v: Any) -> Any:
    if isinstance(v, dt.datetime):
        return v.astimezone(dt.UTC) if v.tzinfo else v.replace(tzinfo=dt.UTC)
    if isinstance(v, decimal.Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    return v


def rows_of(arrow: Any) -> list[Row]:
    return [{k: _value(v) for k, v in r.items()} for r in arrow.to_pylist()]


def delta_location(tables: Path | str) -> Location | None:
    """Where the Delta tables of ``tables`` are (an s3:// or file:// URI, or a directory whose tables
    have a Delta log: docs/delta.md), or None for a directory of Parquet datasets. A directory that
    holds both kinds is a DatasetError: its tables would be read half from a log, half from files."""
    from kwsniff.sinks.location import LocationError, parse_location

    text = str(tables)
    if "://" in text:
        try:
            return parse_location(text)
        except LocationError as exc:
            raise DatasetError(str(exc)) from None
    root = Path(text)
    logged = [t for t in TABLES if (root / t / "_delta_log").is_dir()]
    if not logged:
        return None
    plain = [t for t in TABLES if t not in logged and files(root, t)]
    if plain:
        raise DatasetError(
            f"{root}: tables {', '.join(logged)} are Delta tables and {', '.join(plain)} plain Parquet "
            "datasets: not one dataset (kwsniff convert makes the older one Delta)"
        )
    return parse_location(root)


def delta_sources(location: Location) -> tuple[dict[str, list[str]], dict[str, Any]]:
    """The tables at ``location`` as they are committed: ({table: its files, from the log} on local
    disk, {table: an Arrow dataset} on S3), a table without a log having neither."""
    from kwsniff.sinks.delta import table_dataset
    from kwsniff.sinks.delta_output import delta_tables

    held = set(delta_tables(location))
    paths: dict[str, list[str]] = {t: [] for t in TABLES}
    datasets: dict[str, Any] = {}
    for table in TABLES:
        if table not in held:
            continue
        if location.is_local:
            from deltalake import DeltaTable

            paths[table] = sorted(DeltaTable(location.table_uri(table)).file_uris())
        else:
            datasets[table] = table_dataset(location, table)
    return paths, datasets


def files(tables: Path, table: str) -> list[str]:
    """The Parquet files of one table, as Spark would read them (no hidden or staging files)."""
    found = (tables / table).rglob("*.parquet") if (tables / table).is_dir() else []
    kept = sorted(
        p for p in found if not any(part.startswith((".", "_")) for part in p.relative_to(tables).parts)
    )
    # A link out of the dataset (to /etc/passwd, say) is not the dataset's to read.
    inside = tables.resolve()
    for p in kept:
        if not p.resolve().is_relative_to(inside):
            raise DatasetError(f"{p}: a link out of the dataset; the report reads only files inside it")
    return [str(p) for p in kept]


class DuckTables:
    """The tables as DuckDB views over their Parquet files (read in place, nothing loaded up front),
    and the views the sections share; the engine that writes the summaries (summaries.write). The
    report's engine (engines.DuckEngine) adds the sections' per-capture parts."""

    name = "duckdb"

    def __init__(
        self,
        tables: Path | str,
        filters: Filters,
        memory_limit: int | None = None,
        spill_limit: int | None = None,
    ) -> None:
        import duckdb

        # DuckDB holds at most ``memory_limit`` bytes (its own default is 80% of the machine) and
        # spills what is past it into a private temporary folder, removed by close() (its own
        # default would be `.tmp` in the user's working directory), at most ``spill_limit`` bytes
        # there (its own default is 90% of that disk's free space).
        self._spill = tempfile.mkdtemp(prefix="kwsniff-report-")
        config: dict[str, str | bool | int | float | list[str]] = {"temp_directory": self._spill}
        if memory_limit is not None:
            config["memory_limit"] = f"{memory_limit}B"
        if spill_limit is not None:
            config["max_temp_directory_size"] = f"{spill_limit}B"
        self.con = duckdb.connect(config=config)
        try:
            self._views(tables, filters)
        except BaseException:
            self.close()
            raise

    def _views(self, tables: Path | str, filters: Filters) -> None:
        import duckdb

        self.con.execute("SET TimeZone = 'UTC'")
        # DuckDB prints a progress bar on stdout, terminal or not, under any statement running over
        # 2 s: into `report --format json` and `read`'s output while it summarizes (a session setting:
        # not one duckdb.connect takes).
        # In a Jupyter kernel DuckDB draws it as a widget, not on stdout, and refuses the setting
        # without ipywidgets installed: nothing to turn off there.
        with contextlib.suppress(duckdb.InvalidInputException):
            self.con.execute("SET enable_progress_bar = false")
        # Each file's footer read once per report, not again by every section (a dataset of many
        # captures is thousands of files).
        self.con.execute("SET parquet_metadata_cache = true")
        columns = table_columns()
        self.delta = delta_location(tables)
        datasets: dict[str, Any] = {}
        if self.delta is not None:
            self.paths, datasets = delta_sources(self.delta)
        else:
            self.paths = {table: files(Path(tables), table) for table in columns}
        paths = self.paths
        found = written(self.con, paths)
        for table, dataset in datasets.items():
            names = set(dataset.schema.names)
            found[table] = (names, set(FILLED.get(table, ())) <= names)
        for table, wanted in columns.items():
            present = found[table][0]
            if table in datasets:
                # An S3 table: its committed files as one Arrow dataset, scanned by DuckDB.
                self.con.register(f"_{table}_delta", datasets[table])
                source = f"_{table}_delta"
            elif paths[table]:
                source = f"read_parquet({paths[table]!r}, union_by_name = true)"
            else:
                source = "(SELECT 1 AS _none WHERE false)"
            # A table written before a column existed (or not written at all) reads as nulls there.
            select = ", ".join(f'"{c}"' if c in present else f'CAST(NULL AS {t}) AS "{c}"' for c, t in wanted)
            self.con.execute(f"CREATE VIEW {raw(table)} AS SELECT {select} FROM {source}")
        # Rows named here that were written without their topic: the summaries kept with the tables
        # were made without those names (engines read the parts from the rows instead).
        self.named_late = False
        if self.con.execute(ANY_UNNAMED_SQL).fetchall():
            self.con.execute(f"CREATE TEMP TABLE {TOPIC_NAMES} AS {TOPIC_NAMES_SQL}")
            ((unnamed,),) = self.con.execute(UNNAMED_SQL).fetchall()
            self.named_late = unnamed > 0
        for table in NAMED:
            body = named(columns[table], raw(table)) if self.named_late else f"SELECT * FROM {raw(table)}"
            self.con.execute(f"CREATE VIEW _{table}_all AS {body}")
        for table in in_fill_order(columns):
            where = time_filter(table, filters)
            if found[table][1]:
                self.con.execute(f"CREATE VIEW {table} AS SELECT * FROM _{table}_all{where}")
            else:
                # Written before the exchange's client and times were repeated on its rows: joined
                # once (requests with connections stays a view: that join is cheap).
                kind = "VIEW" if table == "requests" else "TEMP TABLE"
                sql = fill(table, columns[table], f"_{table}_all")
                self.con.execute(f"CREATE {kind} {table} AS SELECT * FROM ({sql}) AS f{where}")
        # The shared views; those in MATERIALIZED are computed once, when a section first reads them
        # (`--section latency` computes none of the lag ones). Then whatever views an engine adds
        # after them (the report's: the sections' per-capture parts).
        self.derived = {**DERIVED, **self._more_views(tables, filters)}
        if windowed(filters):
            self.derived.update(known_views(columns, found, filters))
        for name, sql in self.derived.items():
            self.con.execute(f"CREATE VIEW {name} AS {sql}")
        self._kept: set[str] = set()

    def _more_views(self, tables: Path | str, filters: Filters) -> dict[str, str]:
        """{name: SQL} of views made after the shared ones; none here (the summaries' writer runs
        the parts' queries itself)."""
        return {}

    def _keep_shared(self, sql: str) -> None:
        """Materialize the MATERIALIZED views ``sql`` reads (directly or through another shared
        view) and not yet kept, in DERIVED's order, so each is computed from those before it."""
        wanted, todo = set(), [sql]
        while todo:
            text = todo.pop()
            for name, body in self.derived.items():
                if name not in wanted and re.search(rf"\b{name}\b", text):
                    wanted.add(name)
                    todo.append(body)
        for name in self.derived:
            if name in wanted and name.removeprefix(KNOWN) in MATERIALIZED and name not in self._kept:
                self.con.execute(f"CREATE TEMP TABLE _kept_{name} AS SELECT * FROM {name}")
                self.con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM _kept_{name}")
                self._kept.add(name)

    def run(self, sql: str, params: list[Any] | None = None) -> list[Row]:
        # Python tuples straight from DuckDB: no Arrow table (whose to_pylist imports pandas, ~1 s).
        self._keep_shared(sql)
        done = self.con.execute(sql, params)
        names = [d[0] for d in done.description]
        return [{k: _value(v) for k, v in zip(names, row, strict=True)} for row in done.fetchall()]

    def arrow(self, sql: str) -> Any:
        """The rows of ``sql`` as one pyarrow.Table (the Python API's report, kwsniff.api)."""
        self._keep_shared(sql)
        relation = self.con.sql(sql)
        # DuckDB 1.4 named it to_arrow_table.
        return (getattr(relation, "to_arrow_table", None) or relation.fetch_arrow_table)()

    def batches(self, sql: str, rows: int) -> Any:
        """The rows of ``sql`` sorted by every column (the first first), as an Arrow RecordBatchReader
        of ``rows`` rows a batch.

        ``sql`` runs once into a temporary table (the sort would hold its rows all the same, and
        DuckDB spills a table past --memory-limit), read back sorted: a relation over ``sql`` itself
        would be bound twice (when made, then when read), and binding and optimizing a section's query
        over the views costs as much as running it on a small capture."""
        self._keep_shared(sql)
        self.con.execute(f"CREATE OR REPLACE TEMP TABLE _batches AS {sql}")
        relation = self.con.sql("SELECT * FROM _batches ORDER BY ALL")
        # DuckDB 1.4 named it to_arrow_reader.
        stream = getattr(relation, "to_arrow_reader", None) or relation.fetch_arrow_reader
        return stream(rows)

    def capture_files(self) -> list[tuple[str, str]]:
        """(capture, file) of each capture and each table file holding rows of it."""
        listed = [p for files_of in self.paths.values() for p in files_of]
        if not listed:
            return []
        query = f"SELECT DISTINCT capture, filename FROM read_parquet({listed!r}, union_by_name = true, filename = true)"
        return [(c, f) for c, f in self.con.execute(query).fetchall()]

    def close(self) -> None:
        self.con.close()
        shutil.rmtree(self._spill, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
