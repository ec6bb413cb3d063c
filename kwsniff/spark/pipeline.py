"""The driver side of `kwsniff spark`: tasks out, Arrow chunks back, one Parquet dataset per table.

Why a DataFrame of tasks with ``mapInArrow`` rather than a Python DataSource: a DataSource is loaded
once per table, so every capture would be decoded once per table (five times); here each task
(capture × flow bucket) is decoded once, its chunks (``table``, ``capture``, ``date``, Arrow IPC
bytes) are persisted, and each table is a filter of them unpacked by a second ``mapInArrow``. Rows
cross the JVM only as Arrow. ``binaryFile`` is not used: executors open the files themselves.
"""

from __future__ import annotations

import heapq
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from kwsniff.capture import CaptureError
from kwsniff.capture.split import RangeScan, Unsplittable, byte_ranges, joined_ranges
from kwsniff.defaults import MAX_RANGE_SIZE, MIN_RANGE_SIZE
from kwsniff.pipeline.run import Series
from kwsniff.pipeline.session import SessionOptions
from kwsniff.spark.captures import capture_rows
from kwsniff.spark.executors import PYTHON_CONF, checked, executor_python
from kwsniff.spark.inputs import is_uri, open_input, shown
from kwsniff.spark.tasks import (
    CHUNK_SCHEMA,
    INDEX_SCHEMA,
    META_TABLE,
    STATUS_TABLE,
    UNREADABLE,
    capture_date,
    decode_chunks,
    from_ipc,
    index_range,
)
from kwsniff.tables import DEFAULT_TABLES
from kwsniff.tables.schemas import SCHEMAS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from kwsniff.sinks import Output

T = TypeVar("T")
# The index hashes connections into this many fine buckets, which the driver then groups by their
# bytes into the --flow-buckets tasks: a few big connections no longer land in one task by chance.
FINE_BUCKETS = 4096


@dataclass
class Decoded:
    frames: dict[str, DataFrame]
    rows: dict[str, int]  # of the captures that did not fail
    captures: list[dict[str, Any]]  # the `captures` rows (with `date`), in input order
    # (capture, why) of each capture whose flow-bucket tasks could not be given their own records
    notes: list[tuple[str, str]] = field(default_factory=list)
    index_seconds: float = 0.0  # the byte-range index job's wall time (bucketed decoding)
    split_into: dict[str, int] = field(default_factory=dict)  # flow buckets of each split capture, by name

    def failed(self) -> list[tuple[str, str]]:
        """(capture, reason) of each input that failed: none of its rows are in ``frames``."""
        return [(r["capture"], r["reason"]) for r in self.captures if r["status"] == "failed"]


@dataclass
class Task:
    """One decode task: a capture, or one flow bucket of it (``offsets``: its records, if indexed)."""

    path: str
    name: str
    bucket: int = 0
    buckets: int = 1
    offsets: list[bytes] | None = None  # int64 record offsets, one array per fine flow bucket
    date: str = ""
    pieces: list[str] | None = None  # `--continuous`: the series' pieces in time order (path: the first)


def spark_session(
    master: str = "local[*]",
    app: str = "kwsniff",
    progress: bool = False,
    conf: Mapping[str, str] | None = None,
    archive: str | None = None,
    quiet: bool = False,
) -> SparkSession:
    """A session for kwsniff's jobs; ``progress`` shows Spark's console progress bar of each stage
    (tasks done of all) on stderr, for a long run watched in a terminal. ``conf``: the user's own
    Spark settings, applied last. ``archive``: a packed venv the executors unpack and run
    (``--ship-env``); else they run the driver's interpreter unless ``conf`` or ``PYSPARK_PYTHON``
    names another (see :mod:`kwsniff.spark.executors`). ``quiet`` starts the JVM with its stderr on
    /dev/null: Spark's log lines (WARN included) and the JVM's own notices ("Using incubator
    modules") never reach the terminal, which log4j levels alone cannot promise."""
    from pyspark.sql import SparkSession

    conf = dict(conf or {})
    pythons = executor_python(conf, os.environ, shipped=archive is not None)
    # PySpark reads the workers' interpreter from the environment when the context starts.
    os.environ["PYSPARK_PYTHON"] = pythons[PYTHON_CONF]
    settings = {
        "spark.master": master,
        "spark.app.name": app,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "true" if progress else "false",
        "spark.sql.session.timeZone": "UTC",
    }
    if archive is not None:
        settings["spark.archives"] = f"{archive}#environment"
    settings.update({**conf, **pythons})
    if quiet and SparkSession.getActiveSession() is None:
        _silent_context(settings)
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _silent_context(settings: dict[str, str]) -> None:
    """A SparkContext of ``settings`` on a JVM whose stderr is /dev/null (pyspark's
    ``launch_gateway`` takes the Popen arguments); the session builder then uses it."""
    import subprocess

    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    conf = SparkConf().setAll(list(settings.items()))
    SparkContext(conf=conf, gateway=launch_gateway(conf, popen_kwargs={"stderr": subprocess.DEVNULL}))


def spark_schema(schema: pa.Schema) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def one_task_each(
    spark: SparkSession, items: Sequence[T], work: Callable[[T], Iterator[pa.RecordBatch]], schema: pa.Schema
) -> DataFrame:
    """The batches of ``work(item)`` for every item, one Spark task (partition) per item.

    The items reach the executors as a broadcast variable and each task is one id of a ``range``:
    a DataFrame of rows made in Python would cost every task a second trip through a Python worker
    (measured: 0.05-0.1 s a task), and the offsets of a bucket task are megabytes."""
    shared = spark.sparkContext.broadcast(list(items))

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for i in batch.column("id").to_pylist():
                yield from work(shared.value[i])

    return spark.range(len(items), numPartitions=max(1, len(items))).mapInArrow(
        checked(run), spark_schema(schema)
    )


def _with_date(table: str) -> pa.Schema:
    return SCHEMAS[table].append(pa.field("date", pa.string()))


def decode(
    spark: SparkSession,
    paths: Sequence[str],
    *,
    buckets: int | None = 1,
    options: SessionOptions | None = None,
    tables: tuple[str, ...] = DEFAULT_TABLES,
    range_bytes: int | None = None,
    series: Sequence[Sequence[str]] | None = None,
) -> Decoded:
    """One DataFrame per table (its columns plus ``date``) for ``paths``, each decoded once, and the
    rows of each table (counted from the decoded chunks).

    ``series`` (`--continuous`, instead of ``paths``): each a list of consecutive pieces of one
    capture, decoded in one task as `kwsniff read --continuous` decodes them, as one capture named
    after its first piece in time order, with one `captures` row.

    ``buckets`` flow buckets per capture, or None for ``auto_buckets``. A capture of more than one
    is first indexed in byte ranges of ``range_bytes`` (default: one per executor core, see
    ``range_count``), one task each, which finds where every record lies and which connection it
    belongs to; then each bucket task reads just its own records."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    opts = options or SessionOptions()
    ordered = [_in_time_order(pieces) for pieces in series] if series is not None else None
    paths = [pieces[0] for pieces in ordered] if ordered is not None else paths
    # As `kwsniff read`: inputs sharing a file name (a/cap.pcap, b/cap.pcap) are named by their path
    # in the `capture` column, so (capture, conn_id) stays a unique key.
    names = Counter(os.path.basename(shown(p)) for p in paths)
    named = [(p, shown(p) if names[os.path.basename(shown(p))] > 1 else "") for p in paths]
    notes: list[tuple[str, str]] = []
    damage: dict[str, str] = {}
    cores = spark.sparkContext.defaultParallelism
    if ordered is not None:  # a series is one task: its TCP state runs through its pieces
        buckets = 1
    counts = [buckets] * len(paths) if buckets else auto_buckets([_size(p) for p in paths], cores)
    tasks = [Task(p, name) for (p, name), n in zip(named, counts, strict=True) if n == 1]
    if ordered is not None:
        for task, pieces in zip(tasks, ordered, strict=True):
            task.pieces = pieces
    split = [(p, name, n) for (p, name), n in zip(named, counts, strict=True) if n > 1]
    started = time.perf_counter()
    if split:
        tasks += _bucket_tasks(spark, split, range_bytes, notes, damage)
    index_seconds = time.perf_counter() - started if split else 0.0
    decoded_tables = tuple(t for t in tables if t != "captures")  # made here, from the status chunks

    def run_task(task: Task) -> Iterator[pa.RecordBatch]:
        for table, capture, date, rows, chunk in decode_chunks(
            task.path,
            task.bucket,
            task.buckets,
            opts,
            decoded_tables,
            task.name or None,
            task.offsets,
            task.date,
            task.pieces,
        ):
            yield pa.RecordBatch.from_pylist(
                [{"table": table, "capture": capture, "date": date, "rows": rows, "data": chunk}],
                schema=CHUNK_SCHEMA,
            )

    chunks = one_task_each(spark, tasks, run_task, CHUNK_SCHEMA).persist(StorageLevel.MEMORY_AND_DISK)
    # Decode now, one task per capture × bucket; the tables are then unpacked from the cache in as
    # many tasks as there are cores (a Python task per capture per table would cost more than the
    # unpacking, and write a file per capture per table).
    statuses = []
    fixes: dict[str, BucketFix] = {}
    for r in (
        chunks.where(F.col("table").isin(STATUS_TABLE, META_TABLE))
        .select("table", "capture", "date", "data")
        .collect()
    ):
        if r["table"] == STATUS_TABLE:
            statuses.append((r["capture"], r["date"], json.loads(r["data"])))
        else:
            fixes.setdefault(r["capture"], BucketFix()).add(json.loads(r["data"]))
    inputs = [(shown(p), name or os.path.basename(shown(p))) for p, name in named]
    captures = capture_rows(inputs, statuses, damage)
    # A capture that failed keeps none of its rows (some of its tasks may have yielded chunks).
    failed = sorted(r["capture"] for r in captures if r["status"] == "failed")
    kept = chunks.where(~F.col("capture").isin(failed)) if failed else chunks
    rows = dict.fromkeys(tables, 0)
    for row in kept.groupBy("table").agg(F.sum("rows").alias("rows")).collect():
        if row["table"] in rows:
            rows[row["table"]] = row["rows"]
    for fix in fixes.values():
        fix.rank()
    packed = kept.coalesce(spark.sparkContext.defaultParallelism)
    frames = {t: _unpack(packed, t, fixes) for t in decoded_tables}
    if "captures" in tables:
        frames["captures"] = _captures_frame(spark, captures)
        rows["captures"] = len(captures)
    split_into = {name or os.path.basename(shown(p)): n for p, name, n in split}
    return Decoded(frames, rows, captures, notes, index_seconds, split_into)


def _in_time_order(pieces: Sequence[str]) -> list[str]:
    """A series' pieces in the order of their first timestamps, which names the series after its
    first piece; as given when a piece cannot be read (its task then fails, saying why)."""
    try:
        return [str(p) for p in Series(list(pieces), open_input).order]
    except (CaptureError, OSError):
        return list(pieces)


def _captures_frame(spark: SparkSession, captures: list[dict[str, Any]]) -> DataFrame:
    schema = _with_date("captures")

    def make(rows: list[dict[str, Any]]) -> Iterator[pa.RecordBatch]:
        yield pa.RecordBatch.from_pylist(rows, schema=schema)

    return one_task_each(spark, [captures], make, schema)


# A capture smaller than this is never split by auto_buckets: its index and bucket tasks would cost
# more Spark overhead (about 1 s) than its decoding (under 1 s).
MIN_SPLIT_SIZE = 256 * 1024 * 1024


def auto_buckets(sizes: Sequence[int], cores: int) -> list[int]:
    """Flow buckets per capture when not told: a capture holding more than a core's fair share of
    the bytes (all bytes ÷ cores) is split into about as many shares as it holds, at most one per
    core, so one big capture keeps every core busy and a fleet of similar captures is not split."""
    share = sum(sizes) / max(1, cores)
    return [
        min(cores, max(1, round(size / share))) if size >= MIN_SPLIT_SIZE and share else 1 for size in sizes
    ]


def _size(path: str) -> int:
    """Bytes of a local capture (0 for a URI or a path the driver cannot see: not split)."""
    try:
        return 0 if is_uri(path) else os.path.getsize(path)
    except OSError:
        return 0


def _bucket_tasks(
    spark: SparkSession,
    split: list[tuple[str, str, int]],
    range_bytes: int | None,
    notes: list[tuple[str, str]],
    damage: dict[str, str],
) -> list[Task]:
    """The decode tasks of each (path, name, flow buckets) capture, each with its records' offsets
    when the capture could be indexed; a capture that could not (a note says why) is read whole by
    every bucket task. ``damage`` gets, by capture name, where the index found a capture cut short."""
    index = _index(spark, [p for p, _, _ in split], FINE_BUCKETS, range_bytes)
    tasks = []
    for path, name, buckets in split:
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
                    (
                        shown(path),
                        f"not indexed by byte range ({why}): each flow bucket task reads the whole file",
                    )
                )
            tasks += [Task(path, name, b, buckets) for b in range(buckets)]
            continue
        if used and summaries[used - 1]["damaged"]:
            damage[name or os.path.basename(shown(path))] = summaries[used - 1]["damaged"]
        first_ts = next((r["first_ts"] for r in summaries if r["first_ts"] is not None), None)
        date = capture_date(first_ts) if first_ts is not None else ""
        fine: dict[int, list[tuple[int, bytes]]] = {}
        load: Counter[int] = Counter()
        for r in rows:
            if r["bucket"] >= 0 and r["part"] < used:
                fine.setdefault(r["bucket"], []).append((r["part"], r["offsets"]))
                load[r["bucket"]] += r["bytes"]
        for bucket, group in enumerate(balanced(load, buckets)):
            offsets = [data for b in group for _, data in sorted(fine[b])]
            tasks.append(Task(path, name, bucket, buckets, offsets, date))
    return tasks


def balanced(load: Counter[int], tasks: int) -> list[list[int]]:
    """Fine flow buckets grouped into at most ``tasks`` groups of nearly equal bytes: the largest
    first, each to the group with the fewest bytes so far (LPT scheduling, within 4/3 of the best)."""
    groups: list[tuple[int, int, list[int]]] = [(0, n, []) for n in range(min(tasks, len(load)))]
    for bucket, size in sorted(load.items(), key=lambda item: (-item[1], item[0])):
        total, n, members = heapq.heappop(groups)
        members.append(bucket)
        heapq.heappush(groups, (total + size, n, members))
    return [sorted(members) for _, _, members in sorted(groups, key=lambda g: g[1])]


def range_count(size: int, cores: int, range_bytes: int | None = None) -> int:
    """Byte ranges a capture of ``size`` bytes is indexed in: ``size / range_bytes`` when given, else
    one per core within ranges of MIN_RANGE_SIZE to MAX_RANGE_SIZE, and when there must be more
    ranges than cores, a multiple of the cores."""
    if range_bytes:
        return max(1, -(-size // range_bytes))
    count = max(1, -(-size // MAX_RANGE_SIZE), min(cores, size // MIN_RANGE_SIZE))
    return -(-count // cores) * cores if count > cores else count  # whole waves of tasks


def _index(
    spark: SparkSession, paths: list[str], buckets: int, range_bytes: int | None
) -> dict[str, list[dict[str, Any]]]:
    """``index_range`` of every byte range of every capture, run as one task per range; by path."""
    ranges = []
    for path in paths:
        size = _size(path)
        cuts = byte_ranges(0, size, range_count(size, spark.sparkContext.defaultParallelism, range_bytes))
        ranges += [(path, k, start, end, buckets) for k, (start, end) in enumerate(cuts)]

    def run(task: tuple[str, int, int, int, int]) -> Iterator[pa.RecordBatch]:
        yield pa.RecordBatch.from_pylist(index_range(*task), schema=INDEX_SCHEMA)

    index_df = one_task_each(spark, ranges, run, INDEX_SCHEMA)
    found: dict[str, list[dict[str, Any]]] = {}
    for row in index_df.toArrow().to_pylist():
        found.setdefault(row["path"], []).append(row)
    return found


@dataclass
class BucketFix:
    """What makes a bucketed capture's rows equal to the unsplit decode's: ``conn_id`` numbered by
    the rank of each connection's first packet, and topic ids named from any bucket (a Fetch v13
    connection may sit in another bucket than the Metadata connection that named its topics).
    `errors` rows keep the names their own bucket knew when the response came."""

    ids: dict[int, int] = field(default_factory=dict)
    topics: dict[str, str] = field(default_factory=dict)

    def add(self, meta: dict[str, Any]) -> None:
        self.ids.update(dict.fromkeys(meta["conns"], 0))
        for topic_id, topic in meta["topics"].items():
            self.topics.setdefault(topic_id, topic)

    def rank(self) -> None:
        self.ids = {first: n for n, first in enumerate(sorted(self.ids), 1)}

    def apply(self, table: str, rows: pa.RecordBatch) -> pa.RecordBatch:
        ids = self.ids
        columns = dict(zip(rows.schema.names, rows.columns, strict=True))
        columns["conn_id"] = pa.array([ids[c] for c in columns["conn_id"].to_pylist()], pa.int64())
        if table in ("partitions", "records") and self.topics:
            topics = self.topics
            named = [
                topic if topic is not None or topic_id is None else topics.get(topic_id)
                for topic, topic_id in zip(
                    columns["topic"].to_pylist(), columns["topic_id"].to_pylist(), strict=True
                )
            ]
            columns["topic"] = pa.array(named, pa.string())
        return pa.RecordBatch.from_arrays(list(columns.values()), schema=rows.schema)


def _unpack(chunks: DataFrame, table: str, fixes: dict[str, BucketFix]) -> DataFrame:
    from pyspark.sql import functions as F

    schema = _with_date(table)

    def unpack(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for capture, date, data in zip(
                batch.column("capture").to_pylist(),
                batch.column("date").to_pylist(),
                batch.column("data").to_pylist(),
                strict=True,
            ):
                rows = from_ipc(data)
                fix = fixes.get(capture)
                if fix is not None:
                    rows = fix.apply(table, rows)
                yield pa.RecordBatch.from_arrays(
                    [*rows.columns, pa.array([date] * rows.num_rows, pa.string())], schema=schema
                )

    return (
        chunks.where(F.col("table") == table)
        .select("capture", "date", "data")
        .mapInArrow(checked(unpack), spark_schema(schema))
    )


def write(frames: dict[str, DataFrame], out: Path | Output, *, overwrite: bool = False) -> None:
    """Each table to ``out/<table>/date=YYYY-MM-DD/part-*.parquet``, published in one step: Spark
    writes every table into a staging directory beside ``out``, which then replaces ``out`` at once
    (docs/datasets.md), so a reader or a kill never sees some tables new and others old. ``out`` is a
    directory (refused if it holds a dataset, unless ``overwrite``) or an Output already checked."""
    import pyarrow.parquet as pq

    from kwsniff.sinks import ExistingOutput, Output

    mine = not isinstance(out, Output)
    output = (
        Output(out, ExistingOutput.OVERWRITE if overwrite else ExistingOutput.REFUSE)
        if not isinstance(out, Output)
        else out
    )
    try:
        for table, df in frames.items():
            df.sparkSession.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
            df.write.mode("overwrite").partitionBy("date").parquet(str(output.stage / table))
            # Spark writes no file at all for an empty partitioned table, which readers then cannot
            # take for a table (UNABLE_TO_INFER_SCHEMA); an empty table gets one 0-row file with the
            # table's schema, as `kwsniff read` writes (docs/captures-table.md "Empty tables").
            if not any((output.stage / table).rglob("*.parquet")):
                pq.write_table(
                    SCHEMAS[table].empty_table(), output.stage / table / "part-00000-empty.parquet"
                )
        output.commit()
    finally:
        if mine:
            output.close()
