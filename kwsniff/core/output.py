"""What opening and committing an output needs at both doors: the report's per-capture summaries,
written by `read`, `spark` and :meth:`kwsniff.Tables.write` beside the tables they stage, and the
check that the output's file system can hold the names of an input's files."""

from __future__ import annotations

import itertools
import os
import shutil
import socket
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from kwsniff.core.options import SUMMARIZE_MIN_ROWS
from kwsniff.memory import DEFAULT_MEMORY_LIMIT
from kwsniff.tables.names import SUMMARIES, TABLES

if TYPE_CHECKING:
    from kwsniff.sinks import ExistingOutput, Output
    from kwsniff.sinks.delta_output import DeltaOutput

# Disk DuckDB may spill into while it summarizes, as `report --spill-limit` by default.
SPILL_LIMIT = 16 * DEFAULT_MEMORY_LIMIT
# A report computes the parts of every capture without summaries from its rows: past this many
# captures a dataset keeps summaries for each new one, however small (the report then reads a few
# summary rows of each instead of all their rows: 19 s against 88 s on 562,400 small captures).
SUMMARIZE_MIN_CAPTURES = 100


Warn = Callable[[str, Iterable[str]], None]  # (what, lines): how the door says a warning


def open_output(
    out: str | os.PathLike[str],
    existing: ExistingOutput,
    *,
    host: str | None = None,
    storage_options: Iterable[tuple[str, str]] = (),
    upkeep_s: float | None = None,
    retain_s: float | None = None,
) -> Output | DeltaOutput:
    """The output of a run at ``out``: a directory dataset (a path), or Delta tables (an s3:// or
    file:// URI, docs/delta.md) whose rows get ``host`` (default: this machine's name) as their host,
    kept every ``upkeep_s`` seconds (a live capture: compacted, days past ``retain_s`` removed).
    Raises kwsniff.sinks.OutputError (one line) for an output kwsniff cannot write: an unknown
    scheme, no bucket, storage that refuses the credentials or cannot be reached, a held dataset."""
    from kwsniff.sinks import Output, OutputError
    from kwsniff.sinks.location import LocationError, parse_location

    text = os.fspath(out)
    options = dict(storage_options)
    if "://" not in text:
        if options:
            raise OutputError(f"--storage-option applies to s3:// outputs, not the directory {text}")
        if retain_s is not None:
            raise OutputError(
                f"--retain applies to Delta tables (an s3:// or file:// --out), not the directory {text}"
            )
        return Output(Path(text), existing)
    try:
        location = parse_location(text, options)
    except LocationError as exc:
        raise OutputError(f"--out {exc}") from None
    from kwsniff.sinks.delta_output import DeltaOutput

    return DeltaOutput(location, existing, host or socket.gethostname(), upkeep_s=upkeep_s, retain_s=retain_s)


def summarize(stage: Path, memory_limit: int | None, mode: str, adding_to: Path | None, warn: Warn) -> None:
    """Write the summaries of the captures in ``stage`` (kwsniff.sections.summaries), DuckDB holding at
    most ``memory_limit`` bytes (the run's --memory-limit, its decoding done): ``mode`` "always",
    "never", or "auto" (`worth_summarizing`; ``adding_to``: the dataset the run's tables are added to,
    under `--append`). `report` computes a capture's parts from its rows when it has none. When they
    cannot be written: one warning, and the tables are committed without them (`report` then computes
    those sections from the rows, as it does for tables written before summaries existed)."""
    if mode == "never" or (mode == "auto" and not worth_summarizing(stage, adding_to)):
        return
    from kwsniff.sections import summaries
    from kwsniff.sinks.dataset import error_line

    try:
        summaries.write(stage, memory_limit, SPILL_LIMIT)
    except Exception as exc:  # DuckDB's errors, a full disk, or a fault of ours: the tables are kept
        for name in SUMMARIES:
            shutil.rmtree(stage / name, ignore_errors=True)
        warn(
            "summaries",
            [f"not written ({error_line(exc)}); `kwsniff report` computes those sections from the rows"],
        )


def commit(output: Output | DeltaOutput, memory_limit: int | None, summaries: str, warn: Warn) -> None:
    """Publish the staged tables of ``output`` in one step, the report's summaries written beside
    them first as ``summaries`` (`--summaries`) says: how `read` and :meth:`kwsniff.Tables.write`
    both end. Raises kwsniff.sinks.OutputError when the commit fails."""
    summarize(output.stage, memory_limit, summaries, output.appending_to, warn)
    output.commit()


def worth_summarizing(stage: Path, adding_to: Path | None) -> bool:
    """Whether `--summaries auto` writes them: the run stages SUMMARIZE_MIN_ROWS rows or more, or it
    adds to a dataset that has summaries already or holds SUMMARIZE_MIN_CAPTURES captures."""
    if adding_to is not None:
        if any(_parquet_files(adding_to / SUMMARIES[0])):
            return True
        captures = itertools.islice(_parquet_files(adding_to / "captures"), SUMMARIZE_MIN_CAPTURES)
        if sum(1 for _ in captures) >= SUMMARIZE_MIN_CAPTURES:
            return True
    return staged_rows(stage) >= SUMMARIZE_MIN_ROWS


def _parquet_files(directory: Path) -> Iterator[Path]:
    return directory.rglob("*.parquet") if directory.is_dir() else iter(())


def staged_rows(stage: Path) -> int:
    """The rows of the tables staged in ``stage``, from their Parquet footers (nothing else read)."""
    from pyarrow._parquet import ParquetReader

    rows = 0
    for table in TABLES:
        for path in _parquet_files(stage / table):
            reader = ParquetReader()
            reader.open(str(path))
            rows += reader.metadata.num_rows
            reader.close()
    return rows


def too_long(names: dict[Path, str], name_max: int) -> str:
    """One line naming an input whose files' names the filesystem of --out cannot hold, or ""."""
    from kwsniff.sinks import ParquetSink

    for path, name in names.items():
        longest = len(os.fsencode(ParquetSink(".", name).temp_path("requests").name))
        if longest > name_max:
            return (
                f"{path}: file name too long for --out ({longest} bytes with kwsniff's suffixes, the "
                f"filesystem allows {name_max}); rename or link the capture under a shorter name"
            )
    return ""
