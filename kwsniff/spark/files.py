"""The tables of a Spark run, file by file: every decode task writes its own Parquet files
(:class:`kwsniff.spark.tasks.TaskSink`, `read`'s writer), so no row crosses the JVM; the driver then
moves the files of the captures that did not fail into the staged dataset, one step of renames:
`stage/<table>/date=YYYY-MM-DD/part-NNNNN.parquet`, the layout Spark's ``partitionBy("date")``
writes (the `date` column is in the folder's name, not in the file).

The files of a capture split by flow bucket are first rewritten by a task of their own, which
numbers and names its rows as the unsplit decode would (:class:`BucketFix`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kwsniff.rows.brokers import BROKER_TABLES
from kwsniff.spark.tasks import TASK_FILE
from kwsniff.tables.schemas import SCHEMAS

# The folder Hive-style writers (Spark, pyarrow) give a null partition value: Spark and DuckDB read
# it back as null (a capture that failed before its first packet has no date).
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
COMPRESSION = "zstd"  # as `kwsniff read` writes (kwsniff.sinks.parquet)


@dataclass
class BucketFix:
    """What makes a bucketed capture's rows equal to the unsplit decode's: ``conn_id`` numbered by
    the rank of each connection's first packet, and topic ids named from any bucket (a Fetch v13
    connection may sit in another bucket than the Metadata connection that named its topics), and
    broker ids likewise (docs/tables.md "Which broker answered": rows whose bucket never learned
    their broker's node id take the one another bucket learned; the first bucket's wins).
    `errors` rows keep the names their own bucket knew when the response came."""

    ids: dict[int, int] = field(default_factory=dict)
    topics: dict[str, str] = field(default_factory=dict)
    node_ids: dict[tuple[str, int], int] = field(default_factory=dict)

    def add(self, meta: dict[str, Any]) -> None:
        self.ids.update(dict.fromkeys(meta["conns"], 0))
        for topic_id, topic in meta["topics"].items():
            self.topics.setdefault(topic_id, topic)
        for ip, port, node in meta.get("node_ids", ()):
            self.node_ids.setdefault((ip, port), node)

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
        if table in BROKER_TABLES and self.node_ids:
            node_ids = self.node_ids
            columns["broker_id"] = pa.array(
                [
                    node if node is not None else node_ids.get((ip, port))
                    for node, ip, port in zip(
                        columns["broker_id"].to_pylist(),
                        columns["broker_ip"].to_pylist(),
                        columns["broker_port"].to_pylist(),
                        strict=True,
                    )
                ],
                pa.int32(),
            )
        return pa.RecordBatch.from_arrays(list(columns.values()), schema=rows.schema)


@dataclass
class Moves:
    """Where each task file goes: ``plain`` (source, target) pairs are renamed; ``fixed`` groups, one
    per bucket task, are rewritten by :func:`fix_files` with their capture's BucketFix."""

    plain: list[tuple[str, str]] = field(default_factory=list)
    fixed: list[tuple[BucketFix, list[tuple[str, str, str]]]] = field(default_factory=list)


def partition(date: str | None) -> str:
    return f"date={date or HIVE_NULL}"


def task_file(folder: str, table: str) -> str:
    return os.path.join(folder, table, f"{TASK_FILE}.parquet")


def planned(statuses: Sequence[dict[str, Any]], fixes: dict[str, BucketFix], stage: Path) -> Moves:
    """The Moves of the task ``statuses`` (of the captures kept) into ``stage``; a task's file of a
    table it wrote no row of is left out (Spark's writer makes no file for an empty partition)."""
    moves = Moves()
    for n, status in enumerate(statuses):
        files = [
            (
                table,
                task_file(status["folder"], table),
                str(stage / table / partition(status["date"]) / f"part-{n:05d}.parquet"),
            )
            for table, rows in sorted(status["rows"].items())
            if rows
        ]
        fix = fixes.get(status["name"])
        if fix is None:
            moves.plain += [(source, target) for _, source, target in files]
        elif files:
            moves.fixed.append((fix, files))
    return moves


def move(plain: Sequence[tuple[str, str]]) -> None:
    for source, target in plain:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.move(source, target)  # a rename when the spool is on the output's filesystem


def fix_files(fix: BucketFix, files: Sequence[tuple[str, str, str]]) -> Iterator[str]:
    """Rewrites each (table, source, target) file with ``fix`` applied; runs in an executor."""
    for table, source, target in files:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with pq.ParquetWriter(target, SCHEMAS[table], compression=COMPRESSION) as writer:
            for batch in pq.ParquetFile(source).iter_batches():
                writer.write_batch(fix.apply(table, batch))
        yield target


def write_captures(rows: Sequence[dict[str, Any]], stage: Path) -> None:
    """The `captures` rows (each with its `date`), one file per date."""
    by_date: dict[str | None, list[dict[str, Any]]] = {}
    for row in rows:
        by_date.setdefault(row["date"], []).append(row)
    for date, group in by_date.items():
        folder = stage / "captures" / partition(date)
        folder.mkdir(parents=True, exist_ok=True)
        table = pa.Table.from_pylist(group, schema=SCHEMAS["captures"])
        pq.write_table(table, folder / "part-00000.parquet", compression=COMPRESSION)


def write_empty(tables: Sequence[str], stage: Path) -> None:
    """A table with no row at all gets one 0-row file with its schema, as `kwsniff read` writes
    (docs/captures-table.md "Empty tables"): readers cannot take a folder of no file for a table."""
    for table in tables:
        folder = stage / table
        if not any(folder.rglob("*.parquet")):
            folder.mkdir(parents=True, exist_ok=True)
            pq.write_table(SCHEMAS[table].empty_table(), folder / "part-00000-empty.parquet")
