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
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from kwsniff.session import SessionOptions
from kwsniff.spark.tasks import CHUNK_SCHEMA, ERROR_TABLE, decode_chunks, from_ipc
from kwsniff.tables import DEFAULT_TABLES, SCHEMAS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

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
) -> Decoded:
    """One DataFrame per table (its columns plus ``date``) for ``paths``, each decoded once, and the
    rows of each table (counted from the decoded chunks)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    opts = options or SessionOptions()
    tasks = [(p, b, buckets) for p in paths for b in range(buckets)]

    def run_tasks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for task in batch.to_pylist():
                for table, capture, date, rows, chunk in decode_chunks(
                    task["path"], task["bucket"], task["buckets"], opts, tables
                ):
                    yield pa.RecordBatch.from_pylist(
                        [{"table": table, "capture": capture, "date": date, "rows": rows, "data": chunk}],
                        schema=CHUNK_SCHEMA,
                    )

    # parallelize with one slice per task: every task is a partition of its own.
    task_df = spark.sparkContext.parallelize(tasks, max(1, len(tasks))).toDF(
        "path string, bucket int, buckets int"
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
    return Decoded(frames, rows, errors)


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
