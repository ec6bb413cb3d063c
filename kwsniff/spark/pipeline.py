"""The driver side of `kwsniff spark`: tasks out, Arrow chunks back, one Parquet dataset per table.

Why a DataFrame of tasks with ``mapInArrow`` rather than a Python DataSource: a DataSource is loaded
once per table, so every capture would be decoded once per table (five times); here each task
(capture × flow bucket) is decoded once, its chunks (``table``, ``capture``, ``date``, Arrow IPC
bytes) are persisted, and each table is a filter of them unpacked by a second ``mapInArrow``. Rows
cross the JVM only as Arrow. ``binaryFile`` is not used: executors open the files themselves.
"""

from __future__ import annotations

import glob
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from kwsniff.capture.split import RangeScan, Unsplittable, byte_ranges, joined_ranges
from kwsniff.defaults import DEFAULT_RANGE_SIZE
from kwsniff.session import SessionOptions
from kwsniff.spark.tasks import (
    CHUNK_SCHEMA,
    ERROR_TABLE,
    INDEX_SCHEMA,
    UNREADABLE,
    capture_date,
    decode_chunks,
    from_ipc,
    index_range,
)
from kwsniff.tables import DEFAULT_TABLES, SCHEMAS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

TASK_COLUMNS = "path string, name string, bucket int, buckets int, offsets binary, date string"
CAPTURE_SUFFIXES = (".pcap", ".pcapng", ".cap", ".pcap.gz", ".pcapng.gz")


class InputError(Exception):
    """An input names nothing readable; the message is one line for the user."""


def expand_inputs(inputs: Iterable[str]) -> list[str]:
    """Files, directories (their capture files, recursively) and globs, as sorted absolute paths.

    Executors open the files themselves, so paths must be local or on a filesystem mounted at the
    same place on every executor (NFS, a shared volume); ``file://`` URLs are accepted."""
    found: list[str] = []
    for raw in inputs:
        item = raw.removeprefix("file://")
        if "://" in item:
            raise InputError(f"{raw}: only local or mounted paths are read (executors open files directly)")
        if os.path.isdir(item):
            found.extend(
                str(p)
                for p in sorted(Path(item).rglob("*"))
                if p.is_file() and p.name.endswith(CAPTURE_SUFFIXES) and not p.name.startswith(".")
            )
        elif os.path.isfile(item):
            found.append(item)
        else:
            matches = sorted(m for m in glob.glob(item, recursive=True) if os.path.isfile(m))
            if not matches:
                raise InputError(f"{raw}: no such file, directory or matching capture")
            found.extend(matches)
    return list(dict.fromkeys(os.path.abspath(p) for p in found))


@dataclass
class Decoded:
    frames: dict[str, DataFrame]
    rows: dict[str, int]
    errors: list[str]  # one line per input that is not a readable capture
    # (capture, why) of each capture whose flow-bucket tasks could not be given their own records
    notes: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Task:
    """One decode task: a capture, or one flow bucket of it (``offsets``: its records, if indexed)."""

    path: str
    name: str
    bucket: int = 0
    buckets: int = 1
    offsets: bytes | None = None
    date: str = ""


def spark_session(master: str = "local[*]", app: str = "kwsniff") -> SparkSession:
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )


def spark_schema(schema: pa.Schema) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def _with_date(table: str) -> pa.Schema:
    return SCHEMAS[table].append(pa.field("date", pa.string()))


def decode(
    spark: SparkSession,
    paths: Sequence[str],
    *,
    buckets: int = 1,
    options: SessionOptions | None = None,
    tables: tuple[str, ...] = DEFAULT_TABLES,
    range_bytes: int = DEFAULT_RANGE_SIZE,
) -> Decoded:
    """One DataFrame per table (its columns plus ``date``) for ``paths``, each decoded once, and the
    rows of each table (counted from the decoded chunks).

    With ``buckets`` > 1 each capture is first indexed in byte ranges of ``range_bytes`` (one task
    each: where every record lies and which flow bucket it belongs to), then each bucket task reads
    just its own records."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    opts = options or SessionOptions()
    # As `kwsniff read`: inputs sharing a file name (a/cap.pcap, b/cap.pcap) are named by their path
    # in the `capture` column, so (capture, conn_id) stays a unique key.
    names = Counter(os.path.basename(p) for p in paths)
    named = [(p, p if names[os.path.basename(p)] > 1 else "") for p in paths]
    notes: list[tuple[str, str]] = []
    if buckets > 1:
        tasks = _bucket_tasks(spark, named, buckets, range_bytes, notes)
    else:
        tasks = [Task(p, name) for p, name in named]

    def run_tasks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for task in batch.to_pylist():
                for table, capture, date, rows, chunk in decode_chunks(
                    task["path"],
                    task["bucket"],
                    task["buckets"],
                    opts,
                    tables,
                    task["name"] or None,
                    task["offsets"],
                    task["date"],
                ):
                    yield pa.RecordBatch.from_pylist(
                        [{"table": table, "capture": capture, "date": date, "rows": rows, "data": chunk}],
                        schema=CHUNK_SCHEMA,
                    )

    # parallelize with one slice per task: every task is a partition of its own.
    task_df = spark.sparkContext.parallelize([asdict(t) for t in tasks], max(1, len(tasks))).toDF(
        TASK_COLUMNS
    )
    chunks = task_df.mapInArrow(run_tasks, spark_schema(CHUNK_SCHEMA)).persist(StorageLevel.MEMORY_AND_DISK)
    # Decode now, one task per capture × bucket; the tables are then unpacked from the cache in as
    # many tasks as there are cores (a Python task per capture per table would cost more than the
    # unpacking, and write a file per capture per table).
    rows = dict.fromkeys(tables, 0)
    for row in chunks.groupBy("table").agg(F.sum("rows").alias("rows")).collect():
        if row["table"] != ERROR_TABLE:
            rows[row["table"]] = row["rows"]
    errors = sorted(
        r["data"].decode() for r in chunks.where(F.col("table") == ERROR_TABLE).select("data").collect()
    )
    packed = chunks.coalesce(spark.sparkContext.defaultParallelism)
    frames = {t: _unpack(packed, t) for t in tables}
    if buckets > 1:
        frames = _join_buckets(frames)
    return Decoded(frames, rows, errors, notes)


def _bucket_tasks(
    spark: SparkSession,
    named: list[tuple[str, str]],
    buckets: int,
    range_bytes: int,
    notes: list[tuple[str, str]],
) -> list[Task]:
    """The decode tasks of ``buckets`` flow buckets per capture, each with its records' offsets when
    the capture could be indexed; a capture that could not (a note says why) is read whole by every
    bucket task."""
    index = _index(spark, [p for p, _ in named], buckets, range_bytes)
    tasks = []
    for path, name in named:
        rows = index.get(path, [])
        summaries = sorted((r for r in rows if r["bucket"] < 0), key=lambda r: r["part"])
        why = next((r["unsplittable"] for r in summaries if r["unsplittable"]), None)
        used = 0
        if why is None:
            try:
                used = joined_ranges(
                    [RangeScan(r["end"], r["first"], r["stop"], r["damaged"] or "") for r in summaries]
                )
            except Unsplittable as exc:
                why = str(exc)
        if why is not None:
            if why != UNREADABLE:
                notes.append(
                    (path, f"not indexed by byte range ({why}): each flow bucket task reads the whole file")
                )
            tasks += [Task(path, name, b, buckets) for b in range(buckets)]
            continue
        first_ts = next((r["first_ts"] for r in summaries if r["first_ts"] is not None), None)
        date = capture_date(first_ts) if first_ts is not None else ""
        parts: dict[int, list[tuple[int, bytes]]] = {}
        for r in rows:
            if r["bucket"] >= 0 and r["part"] < used:
                parts.setdefault(r["bucket"], []).append((r["part"], r["offsets"]))
        for bucket, chunks in sorted(parts.items()):
            offsets = b"".join(data for _, data in sorted(chunks))
            tasks.append(Task(path, name, bucket, buckets, offsets, date))
    return tasks


def _index(
    spark: SparkSession, paths: list[str], buckets: int, range_bytes: int
) -> dict[str, list[dict[str, Any]]]:
    """``index_range`` of every byte range of every capture, run as one task per range; by path."""
    ranges = []
    for path in paths:
        try:
            size = os.path.getsize(path)
        except OSError:
            size = 0
        cuts = byte_ranges(0, size, -(-size // range_bytes))
        ranges += [(path, k, start, end, buckets) for k, (start, end) in enumerate(cuts)]

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for task in batch.to_pylist():
                rows = index_range(task["path"], task["part"], task["start"], task["end"], task["buckets"])
                yield pa.RecordBatch.from_pylist(rows, schema=INDEX_SCHEMA)

    range_df = spark.sparkContext.parallelize(ranges, max(1, len(ranges))).toDF(
        "path string, part int, start long, end long, buckets int"
    )
    found: dict[str, list[dict[str, Any]]] = {}
    for row in range_df.mapInArrow(run, spark_schema(INDEX_SCHEMA)).toArrow().to_pylist():
        found.setdefault(row["path"], []).append(row)
    return found


def _unpack(chunks: DataFrame, table: str) -> DataFrame:
    from pyspark.sql import functions as F

    schema = _with_date(table)

    def unpack(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for date, data in zip(
                batch.column("date").to_pylist(), batch.column("data").to_pylist(), strict=True
            ):
                rows = from_ipc(data)
                yield pa.RecordBatch.from_arrays(
                    [*rows.columns, pa.array([date] * rows.num_rows, pa.string())], schema=schema
                )

    return (
        chunks.where(F.col("table") == table).select("date", "data").mapInArrow(unpack, spark_schema(schema))
    )


def _join_buckets(frames: dict[str, DataFrame]) -> dict[str, DataFrame]:
    """Bucketed decode made equal to the unsplit one: conn_id ranked back from the index of each
    connection's first packet, and topic ids named from any connection of the capture (a Fetch v13
    connection may sit in another bucket than the Metadata connection that named its topics).
    `errors` rows keep the names their own bucket knew when the response came."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ids = (
        frames["connections"]
        .select("capture", "conn_id")
        .withColumn("_id", F.row_number().over(Window.partitionBy("capture").orderBy("conn_id")).cast("long"))
    )
    out: dict[str, DataFrame] = {}
    for table, df in frames.items():
        columns = df.columns
        df = df.join(ids, ["capture", "conn_id"]).drop("conn_id").withColumnRenamed("_id", "conn_id")
        out[table] = df.select(*columns)
    if "partitions" in out:
        names = (
            out["partitions"]
            .where(F.col("topic").isNotNull() & F.col("topic_id").isNotNull())
            .select("capture", "topic_id", F.col("topic").alias("_name"))
            .dropDuplicates(["capture", "topic_id"])
        )
        for table in ("partitions", "records"):
            if table in out:
                df = out[table]
                columns = df.columns
                df = df.join(names, ["capture", "topic_id"], "left").withColumn(
                    "topic", F.coalesce(F.col("topic"), F.col("_name"))
                )
                out[table] = df.select(*columns)
    return out


def write(frames: dict[str, DataFrame], out: Path, *, overwrite: bool = False) -> None:
    """Each table to ``out/<table>/date=YYYY-MM-DD/part-*.parquet``."""
    for table, df in frames.items():
        df.sparkSession.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        df.write.mode("overwrite" if overwrite else "errorifexists").partitionBy("date").parquet(
            str(out / table)
        )
