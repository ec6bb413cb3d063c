"""The driver side of `kwsniff spark`: tasks out, status rows back, one Parquet dataset per table.

Why a DataFrame of tasks with ``mapInArrow`` rather than a Python DataSource: a DataSource is loaded
once per table, so every capture would be decoded once per table (five times); here each task
(capture × flow bucket) is decoded once and writes every table's Parquet file itself, with the
writer `kwsniff read` uses. Spark schedules the tasks and carries one status row (JSON) back from
each; the driver then moves the files into the dataset and commits it (:func:`write`).

Why the tasks write, not Spark: handing rows to the JVM (Arrow batches, persisted, then one job per
table unpacking and writing them) cost more than decoding on one machine: `kwsniff read` of the
same captures in one process finished first. ``binaryFile`` is not used: executors open the files
themselves.
"""

from __future__ import annotations

import heapq
import json
import os
import shutil
import tempfile
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
from kwsniff.spark.executors import PYTHON_CONF, SAFE_PATH, checked, executor_python
from kwsniff.spark.files import BucketFix, fix_files, move, planned, write_captures, write_empty
from kwsniff.spark.gateway import jvm_stopped_unless_started
from kwsniff.spark.inputs import is_uri, open_input, shown
from kwsniff.spark.tasks import (
    INDEX_SCHEMA,
    STATUS_SCHEMA,
    UNREADABLE,
    capture_date,
    decode_task,
    index_range,
)
from kwsniff.tables import DEFAULT_TABLES

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from kwsniff.sinks import Output
    from kwsniff.sinks.delta_output import DeltaOutput
    from kwsniff.spark.uploads import TableUploads

T = TypeVar("T")
# The index hashes connections into this many fine buckets, which the driver then groups by their
# bytes into the --flow-buckets tasks: a few big connections no longer land in one task by chance.
FINE_BUCKETS = 4096


@dataclass
class Decoded:
    spark: SparkSession
    spool: Path  # where the tasks wrote their files
    tables: tuple[str, ...]
    kept: list[dict[str, Any]]  # the statuses of the tasks of the captures that did not fail
    fixes: dict[str, BucketFix]  # by capture name, of the captures split into flow buckets
    rows: dict[str, int]  # of the captures that did not fail
    captures: list[dict[str, Any]]  # the `captures` rows (with `date`), in input order
    # (capture, why) of each capture whose flow-bucket tasks could not be given their own records
    notes: list[tuple[str, str]] = field(default_factory=list)
    index_seconds: float = 0.0  # the byte-range index job's wall time (bucketed decoding)
    split_into: dict[str, int] = field(default_factory=dict)  # flow buckets of each split capture, by name

    def failed(self) -> list[tuple[str, str]]:
        """(capture, reason) of each input that failed: none of its rows are written."""
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


# `kwsniff spark` in local mode: the driver's JVM runs the executors too, and it only schedules the
# tasks and carries one status row back from each (the tasks write the tables), so the JIT's
# optimising compiler (C2) and the parallel GC's threads spend CPU that never pays back. C1 only
# and the serial GC: starting the session and the probe job took 25-28 s of CPU instead of 41-42 s
# on the two-core bench machine (bench/bench_spark_local.py, docs/spark.md "On one machine").
LIGHT_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:CICompilerCount=1"
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
# In local mode the Python workers are forked by kwsniff's daemon, which has imported their code
# once (kwsniff.spark.daemon); on a cluster the workers' kwsniff may differ, so PySpark's own daemon.
DAEMON_MODULE = "spark.python.daemon.module"


def decode_conf(master: str, conf: Mapping[str, str]) -> dict[str, str]:
    """The session settings of `kwsniff spark`: ``conf``, and in local mode the light JVM,
    kwsniff's Python daemon and workers that never import from the working directory
    (:data:`kwsniff.spark.executors.SAFE_PATH`), each unless the user set it (not for `kwsniff
    report`, whose SQL runs in the JVM)."""
    if not master.startswith("local"):
        return dict(conf)
    return {DRIVER_JAVA_OPTIONS: LIGHT_JVM, DAEMON_MODULE: "kwsniff.spark.daemon", **SAFE_PATH, **conf}


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
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    with jvm_stopped_unless_started():
        if quiet and SparkSession.getActiveSession() is None:
            _silent_context(settings)
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


def decode(
    spark: SparkSession,
    paths: Sequence[str],
    *,
    buckets: int | None = 1,
    options: SessionOptions | None = None,
    tables: tuple[str, ...] = DEFAULT_TABLES,
    range_bytes: int | None = None,
    series: Sequence[Sequence[str]] | None = None,
    spool: str | Path | None = None,
    remote: TableUploads | None = None,
) -> Decoded:
    """Decodes ``paths``, each once, into Parquet files the executors write under ``spool`` (a
    directory every executor can write, on the output's filesystem; default a new temporary
    directory, right only in local mode), and counts the rows of each table; :func:`write` then
    publishes them.

    ``series`` (`--continuous`, instead of ``paths``): each a list of consecutive pieces of one
    capture, decoded in one task as `kwsniff read --continuous` decodes them, as one capture named
    after its first piece in time order, with one `captures` row.

    ``buckets`` flow buckets per capture, or None for ``auto_buckets``. A capture of more than one
    is first indexed in byte ranges of ``range_bytes`` (default: one per executor core, see
    ``range_count``), one task each, which finds where every record lies and which connection it
    belongs to; then each bucket task reads just its own records.

    ``remote`` (Delta tables on S3): each task uploads its files into the tables' storage itself
    (kwsniff.spark.uploads), one task per capture (no flow buckets: their files are rewritten after
    all of a capture's tasks, which needs them in one place)."""
    opts = options or SessionOptions()
    spool = Path(spool) if spool is not None else Path(tempfile.mkdtemp(prefix="kwsniff-spark-"))
    ordered = [_in_time_order(pieces) for pieces in series] if series is not None else None
    paths = [pieces[0] for pieces in ordered] if ordered is not None else paths
    # As `kwsniff read`: inputs sharing a file name (a/cap.pcap, b/cap.pcap) are named by their path
    # in the `capture` column, so (capture, conn_id) stays a unique key.
    names = Counter(os.path.basename(shown(p)) for p in paths)
    named = [(p, shown(p) if names[os.path.basename(shown(p))] > 1 else "") for p in paths]
    notes: list[tuple[str, str]] = []
    damage: dict[str, str] = {}
    cores = spark.sparkContext.defaultParallelism
    if ordered is not None or remote is not None:  # a series is one task: its TCP state runs on
        buckets = 1
    sizes = [_size(p) for p in paths]
    counts = [buckets] * len(paths) if buckets else auto_buckets(sizes, cores)
    tasks = [Task(p, name) for (p, name), n in zip(named, counts, strict=True) if n == 1]
    if ordered is not None:
        for task, pieces in zip(tasks, ordered, strict=True):
            task.pieces = pieces
    split = [(p, name, n) for (p, name), n in zip(named, counts, strict=True) if n > 1]
    started = time.perf_counter()
    if split:
        tasks += _bucket_tasks(spark, split, range_bytes, notes, damage)
    index_seconds = time.perf_counter() - started if split else 0.0
    # The largest first: Spark starts the tasks in this order, and a big capture left for last
    # would keep one core busy while the others idle (longest processing time first).
    size_of = dict(zip(paths, sizes, strict=True))
    tasks.sort(key=lambda t: -size_of.get(t.path, 0) // t.buckets)
    decoded_tables = tuple(t for t in tables if t != "captures")  # made by the driver
    folder = str(spool)

    def run_task(task: Task) -> Iterator[pa.RecordBatch]:
        status = decode_task(
            task.path,
            task.bucket,
            task.buckets,
            opts,
            decoded_tables,
            folder,
            task.name or None,
            task.offsets,
            task.date,
            task.pieces,
            remote,
        )
        yield pa.RecordBatch.from_pylist([{"status": json.dumps(status)}], schema=STATUS_SCHEMA)

    # One Spark job, one task per capture × bucket: each writes its files and returns one small row.
    found = one_task_each(spark, tasks, run_task, STATUS_SCHEMA).toArrow().column("status").to_pylist()
    statuses = [json.loads(s) for s in found]
    inputs = [(shown(p), name or os.path.basename(shown(p))) for p, name in named]
    captures = capture_rows(inputs, [(s["name"], s["date"], s) for s in statuses], damage)
    # A capture that failed keeps none of its rows (some of its tasks may have written files).
    failed = {r["capture"] for r in captures if r["status"] == "failed"}
    kept = sorted((s for s in statuses if s["name"] not in failed), key=lambda s: (s["name"], s["folder"]))
    rows = dict.fromkeys(tables, 0)
    fixes: dict[str, BucketFix] = {}
    for status in kept:
        for table, n in status["rows"].items():
            rows[table] = rows.get(table, 0) + n
        if status["meta"] is not None:
            fixes.setdefault(status["name"], BucketFix()).add(status["meta"])
    for fix in fixes.values():
        fix.rank()
    if "captures" in tables:
        rows["captures"] = len(captures)
    split_into = {name or os.path.basename(shown(p)): n for p, name, n in split}
    return Decoded(spark, spool, tables, kept, fixes, rows, captures, notes, index_seconds, split_into)


def _in_time_order(pieces: Sequence[str]) -> list[str]:
    """A series' pieces in the order of their first timestamps, which names the series after its
    first piece; as given when a piece cannot be read (its task then fails, saying why)."""
    try:
        return [str(p) for p in Series(list(pieces), open_input).order]
    except (CaptureError, OSError):
        return list(pieces)


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


def write(
    decoded: Decoded,
    out: Path | Output | DeltaOutput,
    *,
    overwrite: bool = False,
    summarize: Callable[[Path], object] | None = None,
) -> None:
    """Each table to ``out/<table>/date=YYYY-MM-DD/part-*.parquet``, published in one step: the
    tasks' files are moved into a staging directory beside ``out`` (those of a capture split into
    flow buckets rewritten first, in one Spark task per bucket task, see kwsniff.spark.files), which
    then replaces ``out`` at once (docs/datasets.md), so a reader or a kill never sees some tables
    new and others old. ``out`` is a directory (refused if it holds a dataset, unless ``overwrite``)
    or an Output already checked; ``summarize`` is called with the staging directory before the
    commit (`kwsniff spark`: the report's summaries). The spool is removed either way."""
    from kwsniff.sinks import ExistingOutput, Output

    mine = isinstance(out, Path)
    output: Output | DeltaOutput = (
        Output(out, ExistingOutput.OVERWRITE if overwrite else ExistingOutput.REFUSE)
        if isinstance(out, Path)
        else out
    )
    uploaded = [s["uploaded"] for s in decoded.kept if "uploaded" in s]
    if uploaded:  # the executors' files are in the tables' storage already: added to the commit
        from kwsniff.sinks.delta import PlannedFile

        assert not isinstance(output, Output) and not decoded.fixes
        for files in uploaded:
            for table, file in files.items():
                output.add_staged(table, PlannedFile(**file))
    try:
        moves = planned([s for s in decoded.kept if "uploaded" not in s], decoded.fixes, output.stage)
        if moves.fixed:

            def rewrite(group: tuple[BucketFix, list[tuple[str, str, str]]]) -> Iterator[pa.RecordBatch]:
                done = list(fix_files(*group))
                yield pa.RecordBatch.from_pylist([{"status": f} for f in done], schema=STATUS_SCHEMA)

            one_task_each(decoded.spark, moves.fixed, rewrite, STATUS_SCHEMA).collect()
        move(moves.plain)
        if "captures" in decoded.tables:
            write_captures(decoded.captures, output.stage)
        write_empty([t for t in decoded.tables if not any(t in files for files in uploaded)], output.stage)
        shutil.rmtree(decoded.spool, ignore_errors=True)
        if summarize is not None and not uploaded:  # summaries need every row in the stage
            summarize(output.stage)
        output.commit()
    finally:
        shutil.rmtree(decoded.spool, ignore_errors=True)
        if mine:
            output.close()


MASTER_CONNECT_TIMEOUT_S = 5.0


def unreachable_master(master: str) -> str | None:
    """For a standalone master (`spark://host:port[,host:port...]`): None when one of its
    addresses accepts a TCP connection, else the error to print. Spark itself would retry its
    registration for over a minute and end in a Java stack trace."""
    import socket

    if not master.startswith("spark://"):
        return None
    reasons = []
    for address in master.removeprefix("spark://").split(","):
        host, _, port = address.rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), MASTER_CONNECT_TIMEOUT_S).close()
            return None
        except (OSError, ValueError) as exc:
            reasons.append(f"{address}: {getattr(exc, 'strerror', None) or exc}")
    return f"--master {master}: no Spark master answers ({'; '.join(reasons)})"


def first_line(exc: BaseException) -> str:
    """An exception's first line; for a Py4J error, the Java exception's."""
    java = getattr(exc, "java_exception", None)
    text = str(java) if java is not None else str(exc)
    return (text.strip().splitlines() or [type(exc).__name__])[0]
