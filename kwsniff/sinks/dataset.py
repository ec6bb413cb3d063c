"""The output directory of a run: checked before any capture is decoded, and one file name per input.

`OUT/<table>/` is a Parquet dataset (every visible `*.parquet` file in it is part of it). A run
writes into it only by an explicit choice when it already holds files: ``append`` adds this run's
files, ``overwrite`` removes the old ones first; otherwise the run is refused.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from enum import Enum
from pathlib import Path

from kwsniff.sinks.parquet import TEMP_SUFFIX, safe_file_stem
from kwsniff.tables.schemas import SCHEMAS


class OutputError(Exception):
    """The output directory cannot be used; the message is one line for the user."""


class ExistingOutput(Enum):
    REFUSE = "refuse"
    APPEND = "append"
    OVERWRITE = "overwrite"


def _dataset_files(table_dir: Path) -> list[Path]:
    if not table_dir.is_dir():
        return []
    return [p for p in table_dir.iterdir() if not p.name.startswith((".", "_"))]


def prepare_output(
    out: Path, tables: Iterable[str], existing: ExistingOutput = ExistingOutput.REFUSE
) -> list[Path]:
    """Make ``out`` and the directories of ``tables``, or raise OutputError before anything is decoded.

    Refuses a path that is a file or cannot be created, and (unless ``existing`` says otherwise) a
    directory whose table datasets already hold files. ``OVERWRITE`` removes the old Parquet files
    of every kwsniff table, and temporary files an interrupted run left behind. Returns the
    directories it created, deepest first (for :func:`remove_empty_dirs` when nothing was written).
    """
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {out}: exists and is not a directory")
    held = {t: _dataset_files(out / t) for t in SCHEMAS}
    found = sum(len(files) for files in held.values())
    if found and existing is ExistingOutput.REFUSE:
        tables = ", ".join(t for t, files in held.items() if files)
        raise OutputError(
            f"--out {out}: already holds a dataset ({found} files in {tables}); "
            "use --overwrite to replace it or --append to add to it"
        )
    if existing is ExistingOutput.OVERWRITE:
        for path in (p for files in held.values() for p in files):
            if path.suffix != ".parquet" or not path.is_file():
                raise OutputError(f"--out {out}: {path} is not a Parquet file; not replacing the dataset")
    try:
        if existing is ExistingOutput.OVERWRITE:
            for table, files in held.items():
                for path in (*files, *(out / table).glob(f".*{TEMP_SUFFIX}")):
                    path.unlink()
        created = [p for p in (out, *out.parents) if not p.exists()][::-1]
        for table in tables:
            if not (out / table).exists():
                created.append(out / table)
            (out / table).mkdir(parents=True, exist_ok=True)
        probe = out / f".kwsniff-write-check-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise OutputError(f"--out {out}: {exc.strerror or exc}") from None
    return created[::-1]


def remove_empty_dirs(dirs: Iterable[Path]) -> None:
    """Remove the directories :func:`prepare_output` made, when a run wrote nothing into them."""
    for path in dirs:
        try:
            path.rmdir()
        except OSError:
            return  # not empty (or already gone): its parents are not empty either


def output_name(capture: Path) -> str:
    """The file name (without `.parquet`) of one input's tables: its file name and a short hash of
    its resolved path, so `a/cap.pcap` and `b/cap.pcap` in one dataset never replace each other,
    and reading the same file again (``--append``) replaces its own files rather than doubling rows."""
    digest = hashlib.sha1(os.fsencode(capture.resolve())).hexdigest()[:8]
    return f"{safe_file_stem(capture.name)}-{digest}"
