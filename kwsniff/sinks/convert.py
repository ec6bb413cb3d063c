"""`kwsniff convert OUT`: a directory dataset written by an earlier kwsniff (docs/datasets.md) made
Delta tables in place, in one step (docs/delta.md, "Older datasets").

The next OUT is built in a staging directory beside it, as every commit of a directory dataset is
(kwsniff.sinks.commit): each table's Parquet files are hard-linked in under ``date=/host=``
directories and committed in one Delta log entry per table (the files unchanged: the same bytes);
OUT's other entries are carried over; then the staging directory replaces OUT at once. A kill at any
moment leaves OUT as it was (a later run's recovery removes the staging directory) or converted, never
half of it: a dataset is never part Delta tables and part plain files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kwsniff.sinks.commit import Staging, locked, recover
from kwsniff.sinks.dataset import DATASET_DIRS, OutputError, _carry, _check_out, _link_or_copy, error_line
from kwsniff.sinks.location import Location
from kwsniff.sinks.parquet import TEMP_SUFFIX

INCOMING = "_kwsniff_incoming"  # a table's files linked in, before the writer moves each into place


@dataclass(frozen=True)
class Converted:
    """What a conversion committed: per table, its files and rows."""

    files: dict[str, int]
    rows: dict[str, int]


def table_files(table_dir: Path) -> list[Path]:
    """The Parquet files of one table of a directory dataset, at any depth (Spark's ``date=``
    directories), hidden and temporary files left out, in name order."""
    found = []
    for root, dirs, names in os.walk(table_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        found += [
            Path(root) / n
            for n in sorted(names)
            if n.endswith(".parquet") and not n.startswith((".", "_")) and not n.endswith(TEMP_SUFFIX)
        ]
    return found


def convert(out: Path, host: str) -> Converted:
    """Make the directory dataset ``out`` Delta tables whose rows' host is ``host`` (see the
    module's text). OutputError (one line) for a folder that holds no kwsniff tables, tables that
    are Delta tables already, or a failure (``out`` then as it was)."""
    import pyarrow.parquet as pq

    from kwsniff.sinks.delta import DeltaTableWriter
    from kwsniff.sinks.delta_output import file_day
    from kwsniff.tables.schemas import SCHEMAS

    if not out.is_dir():
        raise OutputError(f"{out}: not a directory of kwsniff tables")
    logged = [t for t in DATASET_DIRS if (out / t / "_delta_log").exists()]
    if logged:
        raise OutputError(f"{out}: {', '.join(logged)} are Delta tables already; nothing to convert")
    tables = {t: table_files(out / t) for t in DATASET_DIRS if (out / t).is_dir()}
    if not any(tables.values()):
        raise OutputError(f"{out}: no Parquet files of kwsniff tables to convert")
    real = _check_out(out)
    try:
        with locked(real.parent):
            recover(real)
            staging = Staging(real)
    except OSError as exc:
        raise OutputError(f"{out}: {exc.strerror or exc}") from None
    location = Location(str(staging.path))
    files: dict[str, int] = {}
    rows: dict[str, int] = {}
    try:
        for table, found in tables.items():
            if not found:
                continue
            incoming = staging.path / table / INCOMING
            incoming.mkdir(parents=True)
            linked = []
            for i, path in enumerate(found):
                target = incoming / f"{i:06d}-{path.name}"
                _link_or_copy(str(path), str(target))
                linked.append(target)
            schema = SCHEMAS[table] if table in SCHEMAS else pq.read_schema(found[0])
            writer = DeltaTableWriter(location, table, schema)
            staged = [writer.stage(p, date=file_day(p), host=host) for p in linked]
            writer.commit(staged)
            incoming.rmdir()
            files[table] = len(staged)
            rows[table] = sum(s.rows for s in staged)
        for entry in real.iterdir():
            if entry.name not in DATASET_DIRS:
                _carry(entry, staging.path / entry.name)
        with locked(real.parent):
            staging.publish()
    except Exception as exc:  # deltalake's, a full disk: OUT stays as it was
        raise OutputError(f"{out}: not converted ({error_line(exc)}); the dataset is as it was") from None
    finally:
        staging.drop()
    return Converted(files, rows)
