"""Rows to Parquet files `OUT/<table>/<name>.parquet`, written in bounded record batches.

A file is written under a hidden temporary name (`OUT/<table>/.<name>.parquet.tmp`) and renamed to
its final name only by :meth:`ParquetSink.close`, so an interrupted run (Ctrl-C, a crash, a full
disk) never leaves a valid-looking partial Parquet file in a dataset: pyarrow.dataset, DuckDB and
Spark skip files whose names start with `.` or `_`, and the `.tmp` suffix keeps them out of
`*.parquet` globs.

Rows arrive as dicts (a column is a name in the table's schema, kwsniff.tables.schemas, and a key
in the row; a key the row lacks is null). :meth:`ParquetSink.add` keeps each row as a tuple of its
values in schema order, taken while the row is fresh in the CPU's cache, and a write turns the
tuples into one Arrow struct array whose children are the columns. Pulling columns out of a batch
of 10,000 row dicts at write time, as `RecordBatch.from_pylist` does, walked every dict once per
column: 25-50 µs per row on a loaded machine, a quarter of reading a many-partition capture.

Usage (one sink per output file set; a rotating writer makes one sink per rotation)::

    with ParquetSink(out, "cap.pcap-1a2b3c4d", tables) as sink:
        sink.add("requests", row)
    # closed: every table's file renamed into place; on an exception: temporary files removed
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

import pyarrow as pa
from pyarrow._parquet import ParquetWriter

from kwsniff.defaults import PAST_INT64
from kwsniff.memory import DEFAULT_MEMORY_LIMIT, ROW_COST, ROWS, SHARES
from kwsniff.tables import DEFAULT_TABLES
from kwsniff.tables.schemas import SCHEMAS

# Rows held per table before they are written out as one record batch (bounded memory: 10,000
# `partitions` rows are about 20 MB as dicts).
BATCH_ROWS = 10_000
# The records table has many rows and, with --record-payloads, their keys and values: smaller batches,
# and a batch is also written once the payloads it holds reach BATCH_PAYLOAD_BYTES.
BATCH_ROWS_BY_TABLE = {"records": 10_000}
BATCH_PAYLOAD_BYTES = 64 * 1024 * 1024
# The memory budget's rows pool (kwsniff.memory) under the default --memory-limit.
ROW_BUFFER_BYTES = int(DEFAULT_MEMORY_LIMIT * SHARES[ROWS])
MIN_BATCH_ROWS = 64  # fewer rows per row group would make files mostly footers
TEMP_SUFFIX = ".tmp"

# The compiled conversion of row tuples to Arrow column buffers (_columns.c), unless
# KWSNIFF_PURE_PYTHON=1 asks for Arrow's own, or it was not built: the same arrays either way.
_columns: Any = None
if os.environ.get("KWSNIFF_PURE_PYTHON", "") != "1":
    with contextlib.suppress(ImportError):
        from kwsniff.sinks import _columns  # type: ignore[attr-defined,no-redef]
# Each column type _columns.columns() builds, as its one-character kind (timestamps are int µs).
_KINDS = {
    pa.int64(): "q",
    pa.timestamp("us", tz="UTC"): "q",
    pa.int32(): "i",
    pa.int16(): "h",
    pa.float64(): "d",
    pa.bool_(): "?",
    pa.string(): "s",
    pa.binary(): "y",
}

# What `pyarrow.parquet.ParquetWriter(path, schema, compression="zstd")` asks of pyarrow's own
# writer (pyarrow/parquet/core.py, pyarrow 14-26): its defaults, spelled out because the compiled
# writer has defaults of its own. The tables are the same bytes (tools/golden_tables.py), and `read`
# skips importing `pyarrow.parquet`, whose filesystems (S3, GCS, HDFS, Azure) and `ssl` were a
# third of pyarrow's import.
WRITER_OPTIONS: dict[str, Any] = {
    "version": "2.6",
    "compression": "zstd",
    "use_dictionary": True,
    "write_statistics": True,
    "use_deprecated_int96_timestamps": False,
    "use_byte_stream_split": False,
    "writer_engine_version": "V2",
    "data_page_version": "1.0",
    "use_compliant_nested_type": True,
    "store_schema": True,
    "write_page_index": False,
    "write_page_checksum": False,
}


class _RefusePandas:
    """A meta path finder that makes `import pandas` fail; installed only for the probe below."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> None:
        if name == "pandas":
            raise ModuleNotFoundError("not imported by kwsniff's table writer", name=name)


def arrow_without_pandas() -> None:
    """Answer pyarrow's "is pandas installed?" with no, in this process, unless pandas is imported.

    pyarrow asks once per process, in the first `pa.array` call (every `RecordBatch.from_pylist`
    makes some), so that it can recognise pandas objects; to find out it imports pandas: 0.3-0.5 s,
    a third of reading a 300 MB capture, for rows that hold only plain Python values. A refused
    import is remembered as "no pandas" for that recognition only: `Table.to_pandas` and
    `Table.from_pandas` import pandas again when called. Called by the commands that never hand
    pandas objects to Arrow (`read`, `capture`) and by `kwsniff spark`'s tasks in each Python
    worker (their batches hold plain values too: two workers importing pandas cost 1-2 s of CPU).
    Pandas ≥ 2.2.2 is pyarrow's own check for the shim (pyarrow/pandas-shim.pxi)."""
    if "pandas" in sys.modules:
        return
    sys.meta_path.insert(0, _RefusePandas)  # type: ignore[arg-type]
    try:
        pa.array((), pa.int8())
    finally:
        sys.meta_path.remove(_RefusePandas)  # type: ignore[arg-type]


def safe_file_stem(name: str) -> str:
    """``name`` with everything but letters, digits, `.`, `_` and `-` replaced, never hidden."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", name).lstrip("._")
    return stem or "capture"


def _kinds(schema: pa.Schema) -> str | None:
    """The schema's column kinds for _columns.columns(), or None: not built, or a type it does not build."""
    if _columns is None or any(field.type not in _KINDS for field in schema):
        return None
    return "".join(_KINDS[field.type] for field in schema)


def column_batch(rows: list[tuple[Any, ...]], schema: pa.Schema, kinds: str) -> pa.RecordBatch | None:
    """Row tuples in ``schema``'s order as one record batch built from _columns.c's column buffers
    (Arrow's layout, handed over without a copy), or None where it does not take every value."""
    built = _columns.columns(rows, kinds)
    if built is None:
        return None
    n = len(rows)
    arrays = [
        pa.Array.from_buffers(
            field.type,
            n,
            [None if valid is None else pa.py_buffer(valid)]
            + ([] if offsets is None else [pa.py_buffer(offsets)])
            + [pa.py_buffer(data)],
            null_count,
        )
        for field, (null_count, valid, data, offsets) in zip(schema, built, strict=True)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class ParquetSink:
    """One Parquet file per table under ``out_dir/<table>/<name>.parquet``.

    Every table gets a file, empty or not, so a dataset directory always exists and reads with the
    full schema. Opt-in tables (``records``) are written only when named in ``tables``.

    - :meth:`add` buffers a row and writes a record batch when enough rows are held.
    - :meth:`close` writes what is left and renames each temporary file to its final name
      (replacing a file of that name). ``counts`` then has the rows written per table and
      ``paths`` the final files.
    - :meth:`abort` removes the temporary files; nothing of this sink is left in the dataset.
    - As a context manager: close on success, abort on an exception (KeyboardInterrupt included).
    """

    def __init__(
        self,
        out_dir: str | Path,
        name: str,
        tables: Iterable[str] = DEFAULT_TABLES,
        *,
        row_buffer_bytes: int = ROW_BUFFER_BYTES,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.stem = safe_file_stem(name)
        self.tables = tuple(tables)
        self.rows: dict[str, list[tuple[Any, ...]]] = {t: [] for t in self.tables}
        self.names = {t: tuple(SCHEMAS[t].names) for t in self.tables}
        # The tables whose rows add_values takes as they come (a `records` row's payload is counted by add).
        self.values_tables = frozenset(t for t in self.tables if t != "records")
        self.structs = {t: pa.struct(list(SCHEMAS[t])) for t in self.tables}
        # Each table's column kinds for _columns.columns(), or None: a type it does not build.
        self.kinds = {t: _kinds(SCHEMAS[t]) for t in self.tables}
        # Row groups are bounded by bytes as well as rows: every table's buffer together stays
        # within ``row_buffer_bytes`` (the memory budget's rows pool, docs/memory.md).
        per_table = max(MIN_BATCH_ROWS, row_buffer_bytes // (len(self.tables) * ROW_COST))
        self.limits = {t: min(BATCH_ROWS_BY_TABLE.get(t, BATCH_ROWS), per_table) for t in self.tables}
        self.payload_limit = max(1, min(BATCH_PAYLOAD_BYTES, row_buffer_bytes // 2))
        self.payload_bytes = 0
        self.writers: dict[str, ParquetWriter] = {}
        self.counts: dict[str, int] = dict.fromkeys(self.tables, 0)
        self.paths: dict[str, Path] = {}
        # Values left null by the writer (_null_out_of_range); the row builder of a capture makes
        # this its own notes (kwsniff.rows.builder), so they reach the summary.
        self.notes: Counter[str] = Counter()

    def final_path(self, table: str) -> Path:
        return self.out_dir / table / f"{self.stem}.parquet"

    def temp_path(self, table: str) -> Path:
        return self.out_dir / table / f".{self.stem}.parquet{TEMP_SUFFIX}"

    def add(self, table: str, row: dict[str, Any]) -> None:
        rows = self.rows[table]
        rows.append(tuple(map(row.get, self.names[table])))
        if len(rows) >= self.limits[table]:
            self._flush(table)
        elif table == "records" and row["value"] is not None:
            self.payload_bytes += len(row["value"]) + len(row["key"] or b"")
            if self.payload_bytes >= self.payload_limit:
                self._flush(table)

    def add_values(self, table: str, values: tuple[Any, ...]) -> None:
        """:meth:`add` for a row already in schema order (:meth:`columns`): rows made by compiled code
        (kwsniff/rows/compiled.py) of a table in ``values_tables``, never `records` rows."""
        rows = self.rows[table]
        rows.append(values)
        if len(rows) >= self.limits[table]:
            self._flush(table)

    def add_many_values(self, table: str, many: list[tuple[Any, ...]]) -> None:
        """:meth:`add_values` for several rows, written out at the same row counts as one by one."""
        rows = self.rows[table]
        limit = self.limits[table]
        start = 0
        while start < len(many):
            room = limit - len(rows)
            rows.extend(many[start : start + room])
            start += room
            if len(rows) >= limit:
                self._flush(table)

    def columns(self, table: str) -> tuple[str, ...]:
        """The names of a table's columns, in the order :meth:`add_values` takes its values."""
        return self.names[table]

    def _writer(self, table: str) -> ParquetWriter:
        writer = self.writers.get(table)
        if writer is None:
            path = self.temp_path(table)
            path.parent.mkdir(parents=True, exist_ok=True)
            writer = ParquetWriter(str(path), SCHEMAS[table], **WRITER_OPTIONS)
            self.writers[table] = writer
        return writer

    def _flush(self, table: str) -> None:
        rows = self.rows[table]
        if rows:
            batch = self._batch(table, rows)
            self.write_batch(table, batch)
            self.counts[table] += len(rows)
            rows.clear()
            if table == "records":
                self.payload_bytes = 0

    def _batch(self, table: str, rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
        """The rows as one record batch: from the column buffers _columns.c builds when it takes
        every value, else by Arrow's conversion of the tuples."""
        schema = SCHEMAS[table]
        kinds = self.kinds[table]
        batch = column_batch(rows, schema, kinds) if kinds is not None else None
        if batch is None:
            # One conversion of the row tuples as a struct array, its children the columns: Arrow
            # reads each tuple once in C, where transposing them first (zip) and converting each
            # column apart cost 10-40 % more on `partitions` batches.
            try:
                struct = pa.array(rows, type=self.structs[table])
            except (OverflowError, pa.ArrowInvalid):
                # An int past its column's range: the rows layer leaves such values null, so only a
                # bug sends one here, and it costs that value, not the row group (and the capture).
                if not self._null_out_of_range(rows, schema):
                    raise
                struct = pa.array(rows, type=self.structs[table])
            batch = pa.RecordBatch.from_arrays(struct.flatten(), schema=schema)
        return batch

    def _null_out_of_range(self, rows: list[tuple[Any, ...]], schema: pa.Schema) -> int:
        """Ints past their column's type in ``rows`` become None, each counted in ``notes`` as
        PAST_INT64; returns how many."""
        ranges = [
            (i, -(1 << (f.type.bit_width - 1)), (1 << (f.type.bit_width - 1)) - 1)
            for i, f in enumerate(schema)
            if pa.types.is_signed_integer(f.type) or pa.types.is_timestamp(f.type)
        ]
        nulled = 0
        for n, row in enumerate(rows):
            bad = [i for i, lo, hi in ranges if type(v := row[i]) is int and not lo <= v <= hi]
            if bad:
                values = list(row)
                for i in bad:
                    values[i] = None
                rows[n] = tuple(values)
                nulled += len(bad)
        self.notes[PAST_INT64] += nulled
        return nulled

    def write_batch(self, table: str, batch: pa.RecordBatch) -> None:
        """Write one record batch of ``table`` as one row group."""
        self._writer(table).write_table(pa.Table.from_batches([batch]), row_group_size=None)

    def close(self) -> dict[str, Path]:
        """Write every table's remaining rows, then move each file into place. Returns the paths.
        If any of it fails (a full disk), every file of this sink is removed and the error raised."""
        try:
            for table in self.tables:
                self._flush(table)
                self._writer(table).close()
                del self.writers[table]
            for table in self.tables:
                os.replace(self.temp_path(table), self.final_path(table))
                self.paths[table] = self.final_path(table)
        except BaseException:
            self.abort()
            raise
        return self.paths

    def abort(self) -> None:
        """Drop everything written so far: no file of this sink stays in the dataset."""
        for writer in self.writers.values():
            with contextlib.suppress(OSError):
                writer.close()  # a full disk refuses the footer; the file is removed anyway
        self.writers.clear()
        for table in self.tables:
            self.temp_path(table).unlink(missing_ok=True)
            if table in self.paths:
                self.paths.pop(table).unlink(missing_ok=True)
        for rows in self.rows.values():
            rows.clear()

    def __enter__(self) -> ParquetSink:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
