"""Keeping kwsniff's Delta tables small and only as old as asked (docs/delta.md): compaction of each
finished hour's files, retention by whole days, and vacuum of the files no version needs any more.

Everything goes through the log. Compaction writes one file for an hour's files and commits, in one
entry, that file's add and the replaced files' removes; retention commits the removes of the days past
the cutoff. A reader lists the table's files from the log, so it reads either the small files or the
compacted one, never both; the removed files stay on storage until :func:`vacuum_table` deletes them,
a grace later, so that a reader that listed them before the commit can still read them.

Which hour a file belongs to is the hour of its ``modificationTime`` in the log: the time the writer
staged it (:class:`kwsniff.sinks.delta.DeltaTableWriter`'s clock), right after its period ended. It
needs no look inside the files, works for every table whatever its timestamp columns are, and puts
each file in exactly one hour. An hour is finished once the clock has passed its end; a file staged
late into a compacted hour is compacted with that hour's file the next time, so a rerun converges on
one file per (date, host, hour). The compacted file keeps the latest ``modificationTime`` of the
files it replaces, so it stays in its hour.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
import time
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from kwsniff.sinks.delta import (
    MAX_COMMIT_RETRIES,
    CommitRaced,
    DeltaTableError,
    DeltaTableWriter,
    StagedFile,
    utc_day,
)
from kwsniff.sinks.location import Location
from kwsniff.sinks.parquet import WRITER_OPTIONS, safe_file_stem

if TYPE_CHECKING:
    import pyarrow.fs
    from deltalake import DeltaTable
    from deltalake.transaction import RemoveAction

HOUR_S = 3600
DAY_S = 86_400
# Rows buffered before a compacted file gets a row group: bounded memory whatever an hour holds.
ROW_GROUP_ROWS = 1 << 17
_ACTIVE_COLUMNS = (
    "path",
    "size_bytes",
    "modification_time",
    "num_records",
    "partition.date",
    "partition.host",
)


@dataclass(frozen=True)
class Compaction:
    """What :func:`compact_table` did to one table: ``hours`` (date, host, hour) groups of
    ``files_removed`` files became ``files_added`` files holding ``rows`` rows, at ``version``
    (None: nothing to do, no commit)."""

    table: str
    hours: int
    files_removed: int
    files_added: int
    rows: int
    version: int | None


@dataclass(frozen=True)
class Retention:
    """What :func:`retain_table` did to one table: the days before ``first_kept_day`` went out of the
    table (``files_removed`` files, ``rows_removed`` rows, at ``version``; None: none to remove), and
    vacuum deleted ``files_deleted`` files from storage."""

    table: str
    first_kept_day: str
    files_removed: int
    rows_removed: int
    version: int | None
    files_deleted: int


@dataclass(frozen=True)
class _ActiveFile:
    path: str
    size: int
    modification_ms: int
    rows: int
    date: str
    host: str

    def removed(self, now_ms: int, *, data_change: bool) -> RemoveAction:
        from deltalake.transaction import RemoveAction

        return RemoveAction(
            path=self.path,
            data_change=data_change,
            deletion_timestamp=now_ms,
            size=self.size,
            partition_values={"date": self.date, "host": self.host},
        )


def _active_files(delta: DeltaTable) -> list[_ActiveFile]:
    actions = pa.table(delta.get_add_actions(flatten=True)).select(list(_ACTIVE_COLUMNS))
    return [
        _ActiveFile(path, size, modified, rows or 0, date, host)
        for path, size, modified, rows, date, host in zip(
            *(actions.column(name).to_pylist() for name in _ACTIVE_COLUMNS), strict=True
        )
    ]


def _hour_groups(
    files: Iterable[_ActiveFile], now_s: float, hour_s: int, hosts: Collection[str] | None
) -> dict[tuple[str, str, int], list[_ActiveFile]]:
    """The finished hours' files by (date, host, hour), each group in staging order, only groups of
    two files or more (one file is already compacted)."""
    current_hour = math.floor(now_s / hour_s)
    groups: dict[tuple[str, str, int], list[_ActiveFile]] = defaultdict(list)
    for file in files:
        hour = file.modification_ms // (hour_s * 1000)
        if hour < current_hour and (hosts is None or file.host in hosts):
            groups[(file.date, file.host, hour)].append(file)
    return {
        key: sorted(group, key=lambda f: (f.modification_ms, f.path))
        for key, group in sorted(groups.items())
        if len(group) > 1
    }


def _batches(fs: pyarrow.fs.FileSystem, root: str, files: Sequence[_ActiveFile]) -> Iterator[pa.RecordBatch]:
    import pyarrow.parquet as pq

    for file in files:
        with fs.open_input_file(f"{root}/{file.path}") as source:
            yield from pq.ParquetFile(source).iter_batches(batch_size=ROW_GROUP_ROWS)


def _write_compacted(
    fs: pyarrow.fs.FileSystem, root: str, files: Sequence[_ActiveFile], target: Path
) -> None:
    """The rows of ``files``, in order, into one Parquet file written as kwsniff writes its own."""
    import pyarrow.parquet as pq

    writer: pq.ParquetWriter | None = None
    pending: list[pa.RecordBatch] = []
    count = 0
    try:
        for batch in _batches(fs, root, files):
            if writer is None:
                writer = pq.ParquetWriter(str(target), batch.schema, **WRITER_OPTIONS)
            pending.append(batch)
            count += batch.num_rows
            if count >= ROW_GROUP_ROWS:
                writer.write_table(pa.Table.from_batches(pending), row_group_size=count)
                pending, count = [], 0
        if writer is None:  # files of no batches at all: the first file's schema, no rows
            with fs.open_input_file(f"{root}/{files[0].path}") as source:
                writer = pq.ParquetWriter(str(target), pq.read_schema(source), **WRITER_OPTIONS)
        if pending:
            writer.write_table(pa.Table.from_batches(pending), row_group_size=max(count, 1))
    finally:
        if writer is not None:
            writer.close()


def _discard(writer: DeltaTableWriter, staged: Iterable[StagedFile]) -> None:
    """Delete staged files no commit references (a compaction that lost to another writer's)."""
    fs, root = writer.location.filesystem()
    for file in staged:
        with contextlib.suppress(OSError):
            fs.delete_file(f"{root}/{writer.table}/{file.action.path}")


def compact_table(
    location: Location,
    table: str,
    *,
    now: float | None = None,
    hour_s: int = HOUR_S,
    hosts: Collection[str] | None = None,
) -> Compaction:
    """Each finished hour's files of each (date, host) partition of ``table`` into one file, in one
    commit for the whole table; ``now`` (seconds, default the clock) says which hours are finished,
    ``hosts`` limits it to these hosts' partitions (a capture compacts its own, not the fleet's).

    The commit removes exactly the files it read, so it fails, changing nothing, if another writer
    removed one of them meanwhile (a second compaction at once); other writers' appends go on."""
    from deltalake.exceptions import DeltaError

    now_s = time.time() if now is None else now
    writer = DeltaTableWriter(location, table, None)
    groups = _hour_groups(_active_files(writer.delta), now_s, hour_s, hosts)
    if not groups:
        return Compaction(table, 0, 0, 0, 0, None)
    fs, root = location.filesystem()
    table_root = f"{root}/{table}"
    staged: list[StagedFile] = []
    removes: list[RemoveAction] = []
    now_ms = int(now_s * 1000)
    try:
        with tempfile.TemporaryDirectory(prefix="kwsniff-compact-") as spool:
            for (date, host, hour), files in groups.items():
                target = Path(spool) / f"{safe_file_stem(f'compacted-{date}-h{hour % 24:02d}')}.parquet"
                _write_compacted(fs, table_root, files, target)
                file = writer.stage(target, date=date, host=host)
                action = replace(file.action, modification_time=files[-1].modification_ms, data_change=False)
                staged.append(StagedFile(action, file.rows))
                removes.extend(f.removed(now_ms, data_change=False) for f in files)
        version = _commit_while_active(writer, staged, removes)
    except (DeltaError, DeltaTableError, OSError):
        _discard(writer, staged)
        raise
    return Compaction(
        table, len(groups), len(removes), len(staged), sum(file.rows for file in staged), version
    )


def _commit_while_active(
    writer: DeltaTableWriter, staged: Sequence[StagedFile], removes: Sequence[RemoveAction]
) -> int:
    """Commit ``staged`` replacing ``removes`` at the version after one where every file of
    ``removes`` is still in the table; other writers' appends meanwhile only cost a retry."""
    wanted = {remove.path for remove in removes}
    for _ in range(MAX_COMMIT_RETRIES):
        try:
            return writer.commit_at_next_version(staged, removes)
        except CommitRaced:
            writer.refresh()
            gone = wanted - {file.path for file in _active_files(writer.delta)}
            if gone:
                raise DeltaTableError(
                    f"{writer.table}: another compaction or retention removed {len(gone)} of the files "
                    "this one replaces; nothing changed"
                ) from None
    raise DeltaTableError(f"{writer.table}: {MAX_COMMIT_RETRIES} other commits came first; nothing changed")


def retain_table(
    location: Location,
    table: str,
    older_than_s: float,
    *,
    now: float | None = None,
    hosts: Collection[str] | None = None,
    vacuum_retention_hours: int | None = None,
) -> Retention:
    """Remove from ``table`` every day whose rows are all older than ``older_than_s`` seconds before
    ``now`` (the ``date`` partitions before the cutoff's UTC day; ``hosts``: only these hosts'), in
    one commit of whole-file removes, then vacuum the table (:func:`vacuum_table`,
    ``vacuum_retention_hours``)."""
    now_s = time.time() if now is None else now
    first_kept = utc_day(int((now_s - older_than_s) * 1_000_000))
    writer = DeltaTableWriter(location, table, None)
    version = None
    for _ in range(MAX_COMMIT_RETRIES):
        old = [
            f
            for f in _active_files(writer.delta)
            if f.date < first_kept and (hosts is None or f.host in hosts)
        ]
        if not old:
            break
        try:
            version = writer.commit_at_next_version(
                [], [f.removed(int(now_s * 1000), data_change=True) for f in old]
            )
            break
        except CommitRaced:  # chosen anew from the table as it is now
            writer.refresh()
    else:
        raise DeltaTableError(f"{table}: {MAX_COMMIT_RETRIES} other commits came first; nothing changed")
    deleted = vacuum_table(location, table, retention_hours=vacuum_retention_hours)
    removed = old if version is not None else []
    return Retention(table, first_kept, len(removed), sum(f.rows for f in removed), version, len(deleted))


def vacuum_table(
    location: Location, table: str, *, retention_hours: int | None = None, full: bool = True
) -> list[str]:
    """Delete the table's files that no current version references and that have been out of the
    table (or, for a file no commit ever referenced, on storage) for the grace: ``retention_hours``,
    or by default the table's ``delta.deletedFileRetentionDuration`` (an hour for kwsniff's tables;
    delta-rs refuses less than that unless it is asked for explicitly, as a test or a bench does).
    Returns the table-relative paths of the files deleted.

    ``full`` (the default) lists the table's files on storage, so it also deletes a killed writer's
    staged files and files whose removal is older than the checkpoint's tombstones: a vacuum that
    only followed the tombstones would leave those on storage for ever."""
    from deltalake import DeltaTable

    delta = DeltaTable(location.table_uri(table), storage_options=dict(location.storage_options))
    before = stored_files(location, table)
    vacuumed = delta.vacuum(
        retention_hours=retention_hours,
        dry_run=False,
        enforce_retention_duration=retention_hours is None,
        full=full,
    )
    # delta-rs also names the files of tombstones it deleted before (a tombstone outlives its file).
    names = {path.rsplit("/", 1)[-1] for path in vacuumed}
    return [path for path in before if path.rsplit("/", 1)[-1] in names]


def stored_files(location: Location, table: str) -> list[str]:
    """The table-relative paths of the table's data files on storage, referenced or not (the log's
    own files left out): what vacuum may delete, and a bench's and a test's count of the disk."""
    import pyarrow.fs as pafs

    fs, root = location.filesystem()
    base = f"{root}/{table}/"
    listing = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    relative = (info.path[len(base) :] for info in listing if info.type == pafs.FileType.File)
    return sorted(path for path in relative if not path.startswith("_delta_log/"))


@dataclass(frozen=True)
class Upkeep:
    """What :func:`upkeep_table` did to one table."""

    compaction: Compaction
    retention: Retention | None
    files_deleted: int


def upkeep_table(
    location: Location,
    table: str,
    *,
    host: str,
    retain_s: float | None = None,
    now: float | None = None,
) -> Upkeep:
    """A capture's periodic upkeep of one table, for its own ``host``: compact the finished hours,
    remove the days older than ``retain_s`` (None: keep every day), and vacuum what has been out of
    the table for the grace. Each step is its own commit; a step that fails leaves the table whole."""
    now_s = time.time() if now is None else now
    compaction = compact_table(location, table, now=now_s, hosts={host})
    if retain_s is None:
        return Upkeep(compaction, None, len(vacuum_table(location, table)))
    retention = retain_table(location, table, retain_s, now=now_s, hosts={host})
    return Upkeep(compaction, retention, retention.files_deleted)
