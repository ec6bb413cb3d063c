"""A Delta output's commit finished by the next run when a kill stopped it midway (docs/delta.md,
"A commit killed midway").

A commit of :class:`kwsniff.sinks.delta_output.DeltaOutput` writes one log entry per table, so a kill
can fall between two of them: some tables hold the period's rows, the others not yet. Before it
stages a file, the commit writes a journal into its local staging directory: the table path chosen
for every file of every table, and the Delta transaction identifier (``app_id``, the run's; the
commit's number as ``version``) that each table's log entry records. A run killed midway leaves that
directory unlocked; the next run writing to the same location (:func:`resume_commits`, before it
removes what killed runs left) commits every table whose log holds no entry of that identifier yet,
staging again the files still local (a file no longer local was staged already), and skips the tables
that have one: the commit is neither lost nor doubled.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kwsniff.sinks.commit import leftover_prefix, lock_free

if TYPE_CHECKING:
    import pyarrow as pa

    from kwsniff.sinks.delta import PlannedFile
    from kwsniff.sinks.location import Location

JOURNAL = "delta-commit.json"


@dataclass(frozen=True)
class Journal:
    """One commit: where (``uri``), under which transaction identifier, and each table's files as
    ``(local path under the staging directory, planned table file)``, in commit order; the local
    path is None for a file put into the table's storage by another process (a `spark` executor)."""

    uri: str
    endpoint: str  # AWS_ENDPOINT_URL ('' for AWS or local disk): the same URI elsewhere is another table
    app_id: str
    version: int
    tables: dict[str, list[tuple[str | None, PlannedFile]]]


def write_journal(stage: Path, journal: Journal) -> None:
    """The journal into ``stage``, whole or not at all (written aside, then renamed)."""
    data = {
        "uri": journal.uri,
        "endpoint": journal.endpoint,
        "app_id": journal.app_id,
        "version": journal.version,
        "tables": {
            table: [{"local": local, **asdict(planned)} for local, planned in files]
            for table, files in journal.tables.items()
        },
    }
    aside = stage / f".{JOURNAL}"
    aside.write_text(json.dumps(data))
    os.replace(aside, stage / JOURNAL)


def read_journal(stage: Path) -> Journal | None:
    """The journal in ``stage``; None when it has none (a run killed before it began a commit)."""
    from kwsniff.sinks.delta import PlannedFile

    try:
        data = json.loads((stage / JOURNAL).read_text())
        tables = {
            table: [(f.pop("local"), PlannedFile(**f)) for f in files]
            for table, files in data["tables"].items()
        }
        return Journal(data["uri"], data["endpoint"], data["app_id"], int(data["version"]), tables)
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError, AttributeError):
        return None  # not a journal this kwsniff wrote: nothing it can finish


def endpoint_of(location: Location) -> str:
    return location.storage_options.get("AWS_ENDPOINT_URL", "")


def journaled_stages(scratch: Path) -> list[Path]:
    """The staging directories of runs writing Delta tables (beside ``scratch``) that hold a journal."""
    prefix = leftover_prefix(scratch)
    return sorted(p for p in scratch.parent.iterdir() if p.name.startswith(prefix) and (p / JOURNAL).exists())


def resume(stage: Path, journal: Journal, location: Location) -> None:
    """Finish the commit of ``journal`` (its staging directory ``stage``) at ``location``."""
    import pyarrow.parquet as pq

    from kwsniff.sinks.delta import DeltaTableError, DeltaTableWriter, dataset_tables
    from kwsniff.tables.schemas import SCHEMAS

    held = set(dataset_tables(location))
    for table, files in journal.tables.items():
        # A file no longer local (or never: a `spark` executor's) was staged already.
        local = [(stage / name if name is not None else None, planned) for name, planned in files]
        here = [p for p, _ in local if p is not None and p.exists()]
        schema: pa.Schema | None = pq.read_schema(here[0]) if here else None
        if schema is None and table not in held:
            if table not in SCHEMAS or not all(_in_storage(location, table, f.path) for _, f in local):
                continue  # its files were staged into a table removed since: nothing to finish
            schema = SCHEMAS[table]
        writer = DeltaTableWriter(location, table, schema)
        done = writer.app_version_of(journal.app_id)
        if done is not None and done >= journal.version:
            continue
        for p, planned in local:
            if p not in here and not _in_storage(location, table, planned.path):
                # A vacuum removed it (a staged file no commit references, older than the grace):
                # committing it would leave the table naming a file no reader can read.
                raise DeltaTableError(f"{table}/{planned.path} is no longer in the table's storage")
        staged = [
            writer.stage_as(p, planned) if p in here else writer.staged(planned) for p, planned in local
        ]
        writer.commit(staged, app_id=journal.app_id, app_version=journal.version)


def _in_storage(location: Location, table: str, path: str) -> bool:
    import pyarrow.fs as pafs

    fs, root = location.filesystem()
    return bool(fs.get_file_info(f"{root}/{table}/{path}").type != pafs.FileType.NotFound)


def resume_commits(scratch: Path, location: Location) -> int:
    """Finish the journaled commits of dead runs to ``location`` (call with ``scratch``'s parent
    locked); each one's staging directory is then left for :func:`kwsniff.sinks.commit.recover`.
    Journals of other locations are kept for a run writing there. Returns how many were finished;
    DeltaTableError naming the directory when one cannot be finished."""
    from deltalake.exceptions import DeltaError

    from kwsniff.sinks.delta import DeltaTableError

    finished = 0
    for stage in journaled_stages(scratch):
        journal = read_journal(stage)
        mine = journal is not None and (journal.uri, journal.endpoint) == (
            location.uri,
            endpoint_of(location),
        )
        if journal is None or not mine or not lock_free(stage):
            continue
        try:
            resume(stage, journal, location)
        except (OSError, DeltaError, DeltaTableError) as exc:
            # Said with the directory: removing it gives that commit up (the next run goes on).
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise DeltaTableError(f"the commit journaled in {stage}: {reason}") from None
        (stage / JOURNAL).unlink()
        finished += 1
    return finished
