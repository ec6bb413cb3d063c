"""OUT as Delta tables (``--out s3://bucket/prefix`` or ``file:///path``): what :class:`Output` is for
a directory dataset, for one Delta table per kwsniff table (:mod:`kwsniff.sinks.delta`, docs/delta.md).

A run's sinks write their Parquet files into a local staging directory as they do for a directory
dataset (:attr:`DeltaOutput.stage`, the same files, the same bytes). :meth:`DeltaOutput.commit`
stages each file into its table's storage (moved on local disk, uploaded to S3) and commits each
table in one log entry, the ``captures`` table last: a reader that starts from a run's `captures`
rows finds every row of that run in the other tables. Each file's rows get the partition values
``date`` (the UTC day of the file's earliest time, its table's first time column) and ``host`` (the
capturing host, ``--host``).

Construction reaches the storage (an unknown bucket or refused credentials is an OutputError before
anything is decoded) and refuses tables already there unless ``--append`` or ``--overwrite``.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kwsniff.sinks.commit import Staging, locked, recover
from kwsniff.sinks.dataset import ExistingOutput, OutputError, error_line
from kwsniff.sinks.delta_journal import read_journal
from kwsniff.sinks.location import Location
from kwsniff.tables.names import SUMMARIES, TABLES

if TYPE_CHECKING:
    import pyarrow as pa

    from kwsniff.sinks.delta import DeltaTableWriter, PlannedFile, StagedFile
    from kwsniff.sinks.delta_journal import Journal

# Tables committed in this order: `captures` last (a run is whole once its captures rows are there).
COMMIT_ORDER = (*(t for t in TABLES if t != "captures"), *SUMMARIES, "captures")
# Test-only: a commit paused midway for a test to kill (DeltaOutput._test_pause).
PAUSE_ENV = "KWSNIFF_TEST_COMMIT_PAUSE"
PAUSE_LIMIT_S = 120.0
NAME_MAX = 255  # the longest file name of a staged file (local staging directory; S3 keys take more)


SCRATCH = "kwsniff-delta"  # under the temporary directory: the local files of runs writing Delta tables


def scratch() -> Path:
    """Where a run writing Delta tables keeps its local stage and spools: staging directories
    (kwsniff.sinks.commit.Staging, held by flock) beside ``$TMPDIR/kwsniff-delta/delta``, those of
    killed runs removed by the next run's :func:`kwsniff.sinks.commit.recover`."""
    root = Path(tempfile.gettempdir()) / SCRATCH
    root.mkdir(mode=0o700, exist_ok=True)
    return root / "delta"


class DeltaOutput:
    """A run's output to the Delta tables at ``location`` (see the module's text)."""

    def __init__(
        self,
        location: Location,
        existing: ExistingOutput,
        host: str,
        *,
        upkeep_s: float | None = None,
        retain_s: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.location = location
        self.existing = existing
        self.host = host
        # A live capture's upkeep (kwsniff.sinks.delta_upkeep): at the first commit after each
        # boundary of ``upkeep_s`` seconds on the clock (each hour, on the hour: the hour just
        # finished is compacted at once, whenever the run began), each table it wrote has this
        # host's finished hours compacted, its days older than ``retain_s`` removed, and what left
        # the table vacuumed. None: no upkeep (`read`, `spark`).
        self.upkeep_s = upkeep_s
        self.retain_s = retain_s
        self.clock = clock
        self._next_upkeep = None if upkeep_s is None else self._boundary_after(clock())
        self.upkeeps = 0
        # Called with the clock's time after each upkeep (`capture --retain` with `--write-pcap`:
        # the period pcaps past the retention deleted, kwsniff.capture.pcap_periods.expire_periods).
        self.after_upkeep: Callable[[float], object] | None = None
        self.shown = location.uri
        self.appending_to: Path | None = None  # summaries: the report reads every capture's own
        self.commits = 0
        held = self._held_tables()
        if held and existing is ExistingOutput.REFUSE:
            raise OutputError(
                f"--out {self.shown}: already holds Delta tables ({', '.join(held)}); "
                "use --overwrite to replace them or --append to add to them"
            )
        self._held = held
        self._writers: dict[str, DeltaTableWriter] = {}
        # Files already in the tables' storage that the next commit adds (`spark` executors' uploads).
        self._staged: dict[str, list[PlannedFile]] = {}
        # Told of each commit, with its wall-clock end (Unix seconds) and how long it took (seconds),
        # as Output.on_commit: the capture's metrics (kwsniff_last_commit_timestamp_seconds).
        self.on_commit: Callable[[float, float], None] | None = None
        self._scratch = scratch()
        # Names this run's log entries (a Delta transaction identifier), so that a commit a kill
        # stopped midway is finished by the next run, table by table, never twice.
        self.app_id = f"kwsniff-{uuid.uuid4().hex}"
        self._paused = False  # _test_pause
        with locked(self._scratch.parent):
            # What killed runs left: commits they began finished, their staging directories removed.
            self._resume_commits()
            recover(self._scratch, keep=lambda p: read_journal(p) is not None)
        self._stage: Staging | None = Staging(self._scratch)

    def _resume_commits(self) -> None:
        from deltalake.exceptions import DeltaError

        from kwsniff.sinks.delta import DeltaTableError
        from kwsniff.sinks.delta_journal import resume_commits

        try:
            resume_commits(self._scratch, self.location)
        except (OSError, DeltaError, DeltaTableError) as exc:
            raise OutputError(f"--out {self.shown}: {error_line(exc)}") from None

    def _held_tables(self) -> list[str]:
        """The kwsniff tables at the location; OutputError when the storage cannot be reached or
        refuses the credentials."""
        try:
            return delta_tables(self.location)
        except OSError as exc:
            raise OutputError(f"--out {self.shown}: {error_line(exc)}") from None

    @property
    def stage(self) -> Path:
        assert self._stage is not None
        return self._stage.path

    def name_max(self) -> int:
        return NAME_MAX

    def kept_names(self, table: str) -> set[str]:
        """No name of the tables can collide with a staged one: a staged file gets a name of its own."""
        return set()

    def add_staged(self, table: str, planned: PlannedFile) -> None:
        """A file another process put under ``table``'s directory at ``planned.path`` (a `spark`
        executor, kwsniff.spark.uploads): the next commit adds it with the staged files."""
        self._staged.setdefault(table, []).append(planned)

    def spool(self) -> Staging:
        """A local directory for files other processes write before they are moved into
        :attr:`stage` (`spark` executors of a local master, `capture` workers). Its owner drops it."""
        return Staging(self._scratch)

    def commit(self, *, again: bool = False) -> None:
        """Stage every file of :attr:`stage` into its table and commit each table in one log entry
        (``--overwrite``: the first commit of a run replaces every table it holds, the tables this run
        has no rows of included). OutputError if a table cannot be written (tables committed before
        it keep their commit; the run's `captures` rows come last, so no run reads as whole).

        An appending commit is journaled first (kwsniff.sinks.delta_journal): a run killed between
        two tables' log entries has the rest committed by the next run to this location."""
        from deltalake.exceptions import DeltaError

        from kwsniff.sinks.delta import DeltaTableError

        stage = self.stage
        began = time.monotonic()
        overwrite = self.existing is ExistingOutput.OVERWRITE and not self.commits
        # `--append`: an input read again replaces its own rows (its `capture`, this host's).
        replacing = self.existing is ExistingOutput.APPEND and not self.commits
        try:
            # `spark` stages its files under date=YYYY-MM-DD/ directories: found at any depth.
            found = {t: sorted((stage / t).rglob("*.parquet")) for t in COMMIT_ORDER if (stage / t).is_dir()}
            found = {t: self._with_rows(t, files) for t, files in found.items()}
            found = {t: files for t, files in found.items() if files}
            remote, self._staged = self._staged, {}
            found.update({t: [] for t in remote if t not in found})
            replaced = {t for t in found if replacing and t in self._held and self._holds_own(t, found[t])}
            journal = None if overwrite else self._journal(stage, found, replaced, remote)
            for table in COMMIT_ORDER:
                files = found.get(table, [])
                if table in replaced:
                    self._replace(table, files)
                elif journal is not None and table in journal.tables:
                    self._commit_journaled(table, journal)
                elif files or table in remote or (overwrite and table in self._held):
                    self._commit_table(table, files, overwrite, remote.get(table, []))
        except (OSError, DeltaError, DeltaTableError) as exc:
            raise OutputError(f"--out {self.shown}: {error_line(exc)}") from None
        finally:
            if self._stage is not None:
                self._stage.drop()
            self._stage = None
        self.commits += 1
        if again:
            self._stage = Staging(self._scratch)
        if self.on_commit is not None:
            self.on_commit(time.time(), time.monotonic() - began)
        if self._next_upkeep is not None and self.clock() >= self._next_upkeep:
            self._next_upkeep = self._boundary_after(self.clock())
            self.upkeep()

    def _boundary_after(self, now: float) -> float:
        """The first multiple of ``upkeep_s`` seconds (on the Unix clock) after ``now``."""
        assert self.upkeep_s is not None
        return (math.floor(now / self.upkeep_s) + 1) * self.upkeep_s

    def _with_rows(self, table: str, files: list[Path]) -> list[Path]:
        """``files`` but the empty ones, when the table is there already: an empty file adds nothing
        to a Delta table (its columns are in the log) but a commit (a live capture's quiet tables,
        each period). A table's first file is committed even when empty: it makes the table."""
        import pyarrow.parquet as pq

        if table not in self._writers and table not in self._held:
            return files
        kept = []
        for f in files:
            if pq.read_metadata(f).num_rows:
                kept.append(f)
            else:
                f.unlink()
        return kept

    def _journal(
        self,
        stage: Path,
        found: dict[str, list[Path]],
        replaced: set[str],
        remote: dict[str, list[PlannedFile]],
    ) -> Journal:
        """The commit's journal, written into ``stage``: each appended file's table path, chosen now
        (None as the local path: a file in the table's storage already)."""
        from kwsniff.sinks.delta import planned_file
        from kwsniff.sinks.delta_journal import Journal, endpoint_of, write_journal

        tables: dict[str, list[tuple[str | None, PlannedFile]]] = {
            table: [
                *(
                    (str(f.relative_to(stage)), planned_file(f, date=file_day(f), host=self.host))
                    for f in files
                ),
                *((None, planned) for planned in remote.get(table, [])),
            ]
            for table, files in found.items()
            if table not in replaced
        }
        journal = Journal(self.location.uri, endpoint_of(self.location), self.app_id, self.commits, tables)
        write_journal(stage, journal)
        return journal

    def _commit_journaled(self, table: str, journal: Journal) -> None:
        stage = self.stage
        files = journal.tables[table]
        writer = self._writer(table, [stage / local for local, _ in files if local is not None])
        staged = [
            writer.stage_as(stage / local, planned) if local is not None else writer.staged(planned)
            for local, planned in files
        ]
        self._test_pause(table)
        writer.commit(staged, app_id=journal.app_id, app_version=journal.version)

    def _test_pause(self, table: str) -> None:
        """Test-only (tests/test_delta_fleet.py): with ``KWSNIFF_TEST_COMMIT_PAUSE=TABLE:PATH`` set and
        PATH there, the first commit that stages files of TABLE says so on stderr and waits, its files
        staged and its log entry unwritten, until PATH is removed (at most PAUSE_LIMIT_S): a test kills
        the run there, midway through a commit."""
        want, _, path = os.environ.get(PAUSE_ENV, "").partition(":")
        if self._paused or want != table or not path or not os.path.exists(path):
            return
        self._paused = True
        print(
            f"kwsniff: test: commit {self.commits} paused before {table}'s log entry",
            file=sys.stderr,
            flush=True,
        )
        deadline = time.monotonic() + PAUSE_LIMIT_S
        while os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.05)

    def upkeep(self) -> None:
        """Compact, retain and vacuum every table this run wrote to, for this host
        (kwsniff.sinks.delta_upkeep.upkeep_table); OutputError when a table cannot be kept."""
        from deltalake.exceptions import DeltaError

        from kwsniff.sinks.delta import DeltaTableError
        from kwsniff.sinks.delta_upkeep import upkeep_table

        now = self.clock()
        try:
            for table in self._writers:
                upkeep_table(self.location, table, host=self.host, retain_s=self.retain_s, now=now)
        except (OSError, DeltaError, DeltaTableError) as exc:
            raise OutputError(f"--out {self.shown}: upkeep: {error_line(exc)}") from None
        self.upkeeps += 1
        if self.after_upkeep is not None:
            self.after_upkeep(now)

    def _writer(self, table: str, files: list[Path]) -> DeltaTableWriter:
        import pyarrow.parquet as pq

        from kwsniff.sinks.delta import DeltaTableWriter
        from kwsniff.tables.schemas import SCHEMAS

        writer = self._writers.get(table)
        if writer is None:
            # Kept for the run's later commits (a live capture's periods): each catches up with the
            # log entries written since, instead of reading the table's log again.
            schema = (
                pq.read_schema(files[0])
                if files
                else SCHEMAS[table]
                if table in SCHEMAS and table not in self._held
                else self._schema_of(table)
            )
            writer = self._writers[table] = DeltaTableWriter(self.location, table, schema, clock=self.clock)
        return writer

    def _commit_table(
        self, table: str, files: list[Path], overwrite: bool, remote: list[PlannedFile] | None = None
    ) -> None:
        writer = self._writer(table, files)
        staged: list[StagedFile] = [writer.stage(f, date=file_day(f), host=self.host) for f in files]
        staged += [writer.staged(planned) for planned in remote or []]
        writer.commit(staged, overwrite=overwrite)

    def _holds_own(self, table: str, files: list[Path]) -> bool:
        """Whether ``table`` holds rows of this host with a `capture` of ``files``' rows (an input
        read again)."""
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        from kwsniff.sinks.delta import table_dataset

        names = sorted(
            {c for f in files for c in pq.read_table(f, columns=["capture"]).column(0).to_pylist()}
        )
        names = [n for n in names if n is not None]
        if not names:
            return False
        mine = (pc.field("host") == self.host) & pc.field("capture").isin(names)
        return bool(table_dataset(self.location, table).count_rows(filter=mine))

    def _replace(self, table: str, files: list[Path]) -> None:
        """One commit that deletes this host's rows of ``files``' captures from ``table`` and adds
        ``files``' rows (delta-rs's writer, a predicate overwrite: readers see the old rows or the
        new, never both)."""
        import pyarrow as pa
        import pyarrow.parquet as pq
        from deltalake import CommitProperties, DeltaTable, write_deltalake

        from kwsniff.sinks.delta import MAX_COMMIT_RETRIES

        parts = [pq.read_table(f) for f in files]
        names = sorted({c for part in parts for c in part.column("capture").to_pylist() if c is not None})
        data = pa.concat_tables(
            [
                part.append_column(
                    "date", pa.array([file_day(f)] * part.num_rows, pa.string())
                ).append_column("host", pa.array([self.host] * part.num_rows, pa.string()))
                for f, part in zip(files, parts, strict=True)
            ],
            promote_options="default",
        )
        quoted = ", ".join("'" + n.replace("'", "''") + "'" for n in names)
        host = self.host.replace("'", "''")
        delta = DeltaTable(
            self.location.table_uri(table), storage_options=dict(self.location.storage_options)
        )
        write_deltalake(
            delta,
            data,
            mode="overwrite",
            predicate=f"host = '{host}' AND capture IN ({quoted})",
            commit_properties=CommitProperties(max_commit_retries=MAX_COMMIT_RETRIES),
        )
        for f in files:
            f.unlink()

    def _schema_of(self, table: str) -> pa.Schema:
        """The columns of a table this run has no file of (one that --overwrite empties): its own."""
        import pyarrow as pa
        from deltalake import DeltaTable

        from kwsniff.sinks.delta import PARTITION_COLUMNS

        uri = self.location.table_uri(table)
        held = DeltaTable(uri, storage_options=dict(self.location.storage_options)).schema().to_arrow()

        schema = pa.schema(held)
        for name in PARTITION_COLUMNS:
            if name in schema.names:
                schema = schema.remove(schema.get_field_index(name))
        return schema

    def close(self) -> None:
        if self._stage is not None:
            self._stage.drop()
            self._stage = None


def delta_tables(location: Location) -> list[str]:
    """The kwsniff tables (and summaries) at ``location`` that are Delta tables (have a log), in
    their order. OSError when the storage cannot be reached or refuses the credentials."""
    from kwsniff.sinks.delta import dataset_tables

    held = set(dataset_tables(location))
    return [t for t in (*TABLES, *SUMMARIES) if t in held]


def file_day(path: Path) -> str:
    """The ``date`` partition of a finished Parquet file: the UTC day of the earliest value of its
    first time column, from the row groups' statistics; the commit's day when it has none."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kwsniff.sinks.delta import utc_day

    meta = pq.read_metadata(path)
    schema = meta.schema.to_arrow_schema()
    times = [i for i, f in enumerate(schema) if pa.types.is_timestamp(f.type)]
    earliest: int | None = None
    if times:
        column = meta.schema.column(times[0]).path
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            for c in range(group.num_columns):
                chunk = group.column(c)
                if chunk.path_in_schema != column or chunk.statistics is None:
                    continue
                stats = chunk.statistics
                if stats.has_min_max:
                    low = stats.min
                    value = int(low.timestamp() * 1_000_000) if hasattr(low, "timestamp") else int(low)
                    earliest = value if earliest is None else min(earliest, value)
    return utc_day(earliest if earliest is not None else time.time_ns() // 1000)
