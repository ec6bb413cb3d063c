"""kwsniff's tables as Delta Lake tables (docs/delta.md): one Delta table per kwsniff table, at
``<location>/<table>``, on local disk or S3, through the ``deltalake`` package (delta-rs).

kwsniff writes its Parquet files with its own writer (:mod:`kwsniff.sinks.parquet`, the same bytes);
this module publishes them. A commit has two steps, as the Delta protocol has them:

1. :meth:`DeltaTableWriter.stage` puts a finished file under the table's directory with a name no
   other writer can choose (``date=<day>/host=<host>/<stem>-<uuid>.parquet``): moved on local disk,
   uploaded to S3. A staged file is in no commit, so no reader sees it.
2. :meth:`DeltaTableWriter.commit` writes one log entry adding every staged file at once (or, with
   ``overwrite``, also removing every file the table had). Readers see all of it or none of it; a
   writer killed before the entry leaves only unreferenced files, which ``vacuum(full=True)`` removes.

Many writers append to one table at once: delta-rs writes a log entry only if no entry of that number
exists (a rename that refuses to replace on disk, a conditional ``If-None-Match`` PUT on S3, which
SeaweedFS and AWS S3 honour), and an append that lost the race is retried at the next number.

The Delta table adds two partition columns to kwsniff's schema, ``date`` (the UTC day, ``YYYY-MM-DD``)
and ``host`` (the capturing host): their values live in the log, not in the Parquet files, so
kwsniff's Arrow schemas and files stay as they are. A reader (:func:`table_dataset`) gets them as
columns. ``deltalake`` is imported only when a table is opened: it costs ~0.1 s of start-up.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from kwsniff.sinks.location import Location
from kwsniff.sinks.parquet import safe_file_stem

if TYPE_CHECKING:
    import pyarrow.dataset
    import pyarrow.fs
    from deltalake import DeltaTable
    from deltalake import Schema as DeltaSchema
    from deltalake.transaction import AddAction, RemoveAction, Transaction

PARTITION_COLUMNS = ("date", "host")
# An append that meets other writers' entries is retried at the next version, up to this many times:
# enough for tens of writers committing at once (each retry reads only the entries it missed).
MAX_COMMIT_RETRIES = 100
_UNSAFE_PATH = re.compile(r"[^A-Za-z0-9._-]+")
# delta-rs's words for an append that failed because another writer removed data since its version.
_CONCURRENT_DELETE = "a concurrent transaction deleted data this operation read"
# The table properties kwsniff creates its tables with (docs/delta.md, "Commit cost and checkpoints"):
# a checkpoint every 100 commits, so a reader or writer replays at most 100 entries; log entries and
# the tombstones of removed files kept one hour, so neither the `_delta_log/` listing nor the
# checkpoint grows with the table's age; and a file out of the table for an hour may be vacuumed
# (a reader that opened the table before it was removed has had an hour to read it).
TABLE_PROPERTIES = {
    "delta.checkpointInterval": "100",
    "delta.logRetentionDuration": "interval 1 hours",
    "delta.deletedFileRetentionDuration": "interval 1 hours",
}


class DeltaTableError(Exception):
    """A table kwsniff cannot use as asked (another table's layout at the URI); one line for the user."""


class CommitRaced(DeltaTableError):
    """Another writer's entry took the version a :meth:`DeltaTableWriter.commit_at_next_version` was for."""


def utc_day(ts_us: int) -> str:
    """The ``date`` partition value of a timestamp in UTC microseconds."""
    return datetime.fromtimestamp(ts_us / 1_000_000, UTC).strftime("%Y-%m-%d")


def delta_schema(schema: pa.Schema) -> pa.Schema:
    """A kwsniff table's Arrow schema with the Delta table's partition columns appended."""
    for name in PARTITION_COLUMNS:
        if name in schema.names:
            raise DeltaTableError(
                f"column {name} is a partition column of the Delta table, not a data column"
            )
        schema = schema.append(pa.field(name, pa.string(), nullable=False))
    return schema


def _partition_dir(date: str, host: str) -> str:
    # The directory only keeps files of one partition together: readers take the values from the log,
    # so a host name is made path-safe here and kept whole in partitionValues.
    safe_host = _UNSAFE_PATH.sub("_", host).strip(".") or "_"
    return f"date={_UNSAFE_PATH.sub('_', date)}/host={safe_host}"


@dataclass(frozen=True)
class StagedFile:
    """A file under the table's directory that no commit references yet."""

    action: AddAction
    rows: int


@dataclass(frozen=True)
class PlannedFile:
    """A finished file's place in a table, chosen before it is staged: ``path`` under the table's
    directory (``date=<day>/host=<host>/<stem>-<uuid>.parquet``), its size, rows and partition."""

    path: str
    size: int
    rows: int
    date: str
    host: str


def planned_file(path: str | os.PathLike[str], *, date: str, host: str) -> PlannedFile:
    """A table path no other writer can choose for the finished Parquet file ``path``."""
    import pyarrow.parquet as pq

    source = Path(path)
    relative = f"{_partition_dir(date, host)}/{safe_file_stem(source.stem)}-{uuid.uuid4().hex}.parquet"
    return PlannedFile(relative, source.stat().st_size, pq.read_metadata(source).num_rows, date, host)


def _add_action(relative: str, size: int, rows: int, date: str, host: str, now_s: float) -> AddAction:
    from deltalake.transaction import AddAction

    return AddAction(
        path=relative,
        size=size,
        partition_values={"date": date, "host": host},
        modification_time=int(now_s * 1000),
        data_change=True,
        stats=json.dumps({"numRecords": rows}),
    )


def open_table(
    location: Location, table: str, schema: pa.Schema, configuration: Mapping[str, str] | None = None
) -> DeltaTable:
    """The Delta table of ``table`` at ``location``, created (empty, version 0) when there is none,
    with the table properties ``configuration`` (``delta.checkpointInterval``...; None: kwsniff's
    TABLE_PROPERTIES) if it is created.

    Writers that create the same table at once all end up with it: the one whose version 0 lost the
    race opens the winner's. A table with other partition columns is refused."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError, TableNotFoundError

    uri = location.table_uri(table)
    options = dict(location.storage_options)
    try:
        opened = DeltaTable(uri, storage_options=options)
    except TableNotFoundError:
        # Writers creating the table at once: one version 0 is written. Another create() must not
        # retry at version 1 (delta-rs would: a second CREATE TABLE, new metadata, and every writer
        # holding version 0 then fails "Metadata changed since last commit"), and may return a table
        # object of its own unwritten version 0: so no retries, and the table is read back either way.
        from deltalake import CommitProperties

        with contextlib.suppress(DeltaError):
            DeltaTable.create(
                uri,
                delta_schema(schema),
                partition_by=list(PARTITION_COLUMNS),
                mode="ignore",
                configuration=dict(TABLE_PROPERTIES if configuration is None else configuration) or None,
                storage_options=options,
                commit_properties=CommitProperties(max_commit_retries=0),
            )
        opened = DeltaTable(uri, storage_options=options)
    return _kwsniff_layout(opened, uri)


def existing_table(location: Location, table: str) -> DeltaTable:
    """The Delta table of ``table`` at ``location``; :class:`DeltaTableError` if there is none."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    uri = location.table_uri(table)
    try:
        opened = DeltaTable(uri, storage_options=dict(location.storage_options))
    except TableNotFoundError:
        raise DeltaTableError(f"{uri}: no Delta table there") from None
    return _kwsniff_layout(opened, uri)


def _kwsniff_layout(opened: DeltaTable, uri: str) -> DeltaTable:
    partitions = tuple(opened.metadata().partition_columns)
    if partitions != PARTITION_COLUMNS:
        raise DeltaTableError(f"{uri}: a Delta table partitioned by {partitions}, not {PARTITION_COLUMNS}")
    return opened


class DeltaTableWriter:
    """Stages kwsniff's finished Parquet files into one Delta table and commits them in one log entry.
    ``schema`` is the kwsniff table's Arrow schema (the table is created if there is none), or None
    for a table that must exist already, committed with its own schema.

    Usage::

        writer = DeltaTableWriter(location, "requests", SCHEMAS["requests"])
        staged = [writer.stage(path, date="2026-12-07", host="broker-1") for path in files]
        writer.commit(staged)   # one new version holding every file, or an exception and none
    """

    def __init__(
        self,
        location: Location,
        table: str,
        schema: pa.Schema | None,
        configuration: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.location = location
        self.table = table
        self.schema: pa.Schema | DeltaSchema
        if schema is None:  # the table's own schema, as it is in the log (compaction, retention)
            self.delta = existing_table(location, table)
            self.schema = self.delta.schema()
        else:
            self.schema = delta_schema(schema)
            self.delta = open_table(location, table, schema, configuration)
        # A staged file's modificationTime in the log is this clock's (seconds): compaction groups
        # files into hours by it (kwsniff.sinks.delta_upkeep), and a bench replays a month on a fake one.
        self.clock = clock
        self._filesystem: tuple[pyarrow.fs.FileSystem, str] | None = None

    def stage(self, path: str | os.PathLike[str], *, date: str, host: str) -> StagedFile:
        """Move (local) or upload and remove (S3) the finished Parquet file ``path`` into the table's
        directory under a name of its own; the file then belongs to the table."""
        return self.stage_as(path, planned_file(path, date=date, host=host))

    def stage_as(self, path: str | os.PathLike[str], planned: PlannedFile) -> StagedFile:
        """:meth:`stage` at the table path ``planned`` chose (a journaled commit names its files
        first); a file already there is replaced, so staging again after a kill is harmless."""
        import pyarrow.fs as pafs

        source = Path(path)
        if self.location.is_local:
            target = Path(self.location.table_uri(self.table)) / planned.path
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.replace(source, target)
            except OSError:  # another filesystem: copy, then drop the source
                shutil.copyfile(source, target)
                source.unlink()
        else:
            if self._filesystem is None:
                self._filesystem = self.location.filesystem()
            fs, root = self._filesystem
            pafs.copy_files(
                str(source),
                f"{root}/{self.table}/{planned.path}",
                destination_filesystem=fs,
                chunk_size=8 << 20,
            )
            source.unlink()
        return self.staged(planned)

    def staged(self, planned: PlannedFile) -> StagedFile:
        """The commit's record of a file already under the table's directory at ``planned.path``."""
        action = _add_action(
            planned.path, planned.size, planned.rows, planned.date, planned.host, self.clock()
        )
        return StagedFile(action, planned.rows)

    def commit(
        self,
        staged: Sequence[StagedFile],
        *,
        overwrite: bool = False,
        app_id: str | None = None,
        app_version: int | None = None,
    ) -> int:
        """One log entry adding every staged file (``overwrite``: and removing every file the table
        had). ``app_id``/``app_version`` record the Delta transaction identifier of the writer (an
        input's key and its run), which :meth:`app_version_of` reads back. Returns the table's version
        once committed (other writers' later commits included)."""
        from deltalake import Transaction

        apps = (
            [Transaction(app_id=app_id, version=app_version)]
            if app_id is not None and app_version is not None
            else None
        )
        from deltalake.exceptions import CommitFailedError

        for _ in range(MAX_COMMIT_RETRIES):
            try:
                self._transact([file.action for file in staged], overwrite, MAX_COMMIT_RETRIES, apps)
                break
            except CommitFailedError as err:
                # delta-rs takes an append for a read of the whole table, so a removal of data by
                # another writer since this one's version (retention) fails it, though it read nothing.
                # It wrote no entry: from the table as it is now, the same files commit.
                if _CONCURRENT_DELETE not in str(err):
                    raise
                self.refresh()
        else:
            raise DeltaTableError(
                f"{self.location.table_uri(self.table)}: {MAX_COMMIT_RETRIES} removals came first"
            )
        self.refresh()
        return self.delta.version()

    def commit_at_next_version(self, staged: Sequence[StagedFile], remove: Sequence[RemoveAction]) -> int:
        """One log entry adding ``staged`` and removing ``remove``, written only as the version right
        after the one this writer read, never retried at a later one: the caller chose ``remove`` from
        that version, and delta-rs does not check an append's removes against other writers' (two
        compactions at once would both replace the same files, and their rows would be there twice).
        Raises :class:`CommitRaced` when another writer's entry came first: the caller reads the table
        again (:meth:`refresh`) and chooses anew. Returns the table's version."""
        from deltalake.exceptions import CommitFailedError

        try:
            self._transact([*(file.action for file in staged), *remove], False, 0, None)
        except CommitFailedError as err:
            raise CommitRaced(f"{self.location.table_uri(self.table)}: {err}") from None
        self.refresh()
        return self.delta.version()

    def refresh(self) -> None:
        """Catch up with the entries other writers committed since this writer's version."""
        self._behind_expired_log(lambda: self.delta.update_incremental())

    def _transact(
        self,
        actions: list[AddAction | RemoveAction],
        overwrite: bool,
        retries: int,
        apps: list[Transaction] | None,
    ) -> None:
        from deltalake import CommitProperties, PostCommitHookProperties

        def transaction() -> None:
            self.delta.create_write_transaction(
                actions,
                mode="overwrite" if overwrite else "append",
                schema=self.schema,
                partition_by=list(PARTITION_COLUMNS),
                commit_properties=CommitProperties(max_commit_retries=retries, app_transactions=apps),
                # delta-rs writes a checkpoint every delta.checkpointInterval commits but, unless
                # asked, never removes the log entries older than delta.logRetentionDuration.
                post_commithook_properties=PostCommitHookProperties(
                    create_checkpoint=True, cleanup_expired_logs=True
                ),
            )

        self._behind_expired_log(transaction)
        # The transaction leaves this DeltaTable at the version it read; the caller's refresh() then
        # keeps the next commit's conflict check to the entries written meanwhile.

    def _behind_expired_log(self, step: Callable[[], object]) -> None:
        """``step``, and again on a table read afresh if this writer's version is older than the log
        entries other writers' commits left (delta.logRetentionDuration): delta-rs cannot replay from
        a version whose following entries were removed, but the latest checkpoint has the state. The
        failure comes before any entry is written, so the step runs once."""
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError

        try:
            step()
        except DeltaError as err:
            if "Invalid table version" not in str(err):
                raise
            self.delta = DeltaTable(
                self.location.table_uri(self.table), storage_options=dict(self.location.storage_options)
            )
            step()

    def app_version_of(self, app_id: str) -> int | None:
        """The last ``app_version`` committed with ``app_id`` (a writer resuming after a kill)."""
        self.refresh()
        return self.delta.transaction_version(app_id)

    def append_files(self, files: Iterable[tuple[str | os.PathLike[str], str, str]]) -> int:
        """Stage every ``(path, date, host)`` and commit them as one append; returns the version."""
        return self.commit([self.stage(path, date=date, host=host) for path, date, host in files])


def dataset_tables(location: Location) -> list[str]:
    """The Delta tables of a dataset: the directories right under ``location`` holding a ``_delta_log``,
    sorted. OSError when the storage cannot be reached or refuses the credentials."""
    import pyarrow.fs as pafs

    fs, root = location.filesystem()
    children = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
    tables = []
    for child in children:
        if child.type == pafs.FileType.Directory:
            log = fs.get_file_info(f"{child.path}/_delta_log")
            if log.type == pafs.FileType.Directory:
                tables.append(child.base_name)
    return sorted(tables)


def table_dataset(location: Location, table: str) -> pyarrow.dataset.Dataset:
    """The table's current files (its last commit's, from the log) as one Arrow dataset, the
    partition columns included: for DuckDB (``duckdb.from_arrow``), pandas and the report."""
    from deltalake import DeltaTable

    return DeltaTable(
        location.table_uri(table), storage_options=dict(location.storage_options)
    ).to_pyarrow_dataset()
