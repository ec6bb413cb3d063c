"""What both doors do to answer the report's sections (kwsniff.report): the tables a dataset must
hold, and the sections asked for by name."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kwsniff.sections.catalog import Section
    from kwsniff.sections.dataset import Filters

# The tables every report reads; a dataset without one of them is refused.
NEEDED = ("requests", "connections", "errors", "partitions", "groups")


def missing_tables(path: Path | str) -> list[str] | None:
    """The NEEDED tables ``path`` holds no Parquet file (or no Delta table) of (None: not a directory
    nor a URI of Delta tables). OSError for a name the file system refuses or a folder it may not
    read, or storage that cannot be reached; kwsniff.sections.dataset.DatasetError for a URI
    kwsniff cannot read or a directory mixing Delta and Parquet tables."""
    from kwsniff.sections.dataset import delta_location

    if "://" not in str(path) and not Path(path).is_dir():
        return None
    location = delta_location(path)
    if location is not None:
        from kwsniff.sinks.delta_output import delta_tables

        held = set(delta_tables(location))
        return [n for n in NEEDED if n not in held]
    return [n for n in NEEDED if not any((Path(path) / n).rglob("*.parquet"))]


def refusal(path: Path | str, missing: list[str] | None) -> str:
    """Why a report of ``path`` cannot run, or ""."""
    if missing is None:
        return f"{path}: not a directory of kwsniff tables"
    if missing:
        return f"{path}: no {', '.join(missing)} table (written by kwsniff read or spark)"
    return ""


def chosen_sections(chosen: Iterable[str]) -> list[Section]:
    """The sections named (all of them when none is), in the report's order; ValueError naming any
    that is no section."""
    from kwsniff.sections.catalog import SECTIONS

    names = set(chosen)
    unknown = sorted(names - {s.name for s in SECTIONS})
    if unknown:
        raise ValueError(f"no section {', '.join(unknown)}; sections: {', '.join(s.name for s in SECTIONS)}")
    return [s for s in SECTIONS if not names or s.name in names]


def filters(
    since: dt.datetime | None,
    until: dt.datetime | None,
    topic: str | None,
    client: str | None,
    group: str | None,
    session_timeout_ms: int,
    finding_thresholds: tuple[tuple[str, float], ...] = (),
) -> Filters:
    """The report's filters (`--since` ... `--session-timeout-ms`); a time without a zone is UTC."""
    from kwsniff.sections.dataset import Filters

    return Filters(_utc(since), _utc(until), topic, client, group, session_timeout_ms, finding_thresholds)


def _utc(value: dt.datetime | None) -> dt.datetime | None:
    return None if value is None else value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value
