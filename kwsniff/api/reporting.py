"""`kwsniff.report`: the report's sections (kwsniff.sections.catalog, the one SQL of each answer) over
a dataset or a :class:`kwsniff.Tables`, on DuckDB or on the caller's SparkSession, as pyarrow Tables."""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kwsniff.api.errors import ReportError, UsageError

if TYPE_CHECKING:
    import pyarrow as pa

    from kwsniff.api.tables import Tables

Time = dt.datetime | str | None


def _time(value: Time, name: str) -> dt.datetime | None:
    """A time as `report --since/--until` takes it: text is ISO 8601 (naive times are UTC: core.answers.filters)."""
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value)
        except ValueError:
            raise UsageError(f"report: {name}={value!r} is not an ISO 8601 time") from None
    if value is None:
        return None
    if not isinstance(value, dt.datetime):
        raise UsageError(f"report: {name}={value!r} is not a datetime or an ISO 8601 time")
    return value


def _text(value: object, name: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise UsageError(f"report: {name}={value!r} is not a string")
    return value


def _sizes(
    memory_limit: object, spill_limit: object, session_timeout_ms: object, finding_threshold: object = ()
) -> tuple[int, int, int, tuple[tuple[str, float], ...]]:
    """The DuckDB limits (`report`'s defaults for None), the session timeout and the findings'
    thresholds, checked by their fields of kwsniff.core.options.ReportOptions, as the `report`
    command checks them."""
    from kwsniff.core.options import OptionError, ReportOptions, from_keywords

    given = {
        "memory_limit": memory_limit,
        "spill_limit": spill_limit,
        "session_timeout_ms": session_timeout_ms,
        "finding_threshold": finding_threshold,
    }
    try:
        asked = from_keywords(ReportOptions, {k: v for k, v in given.items() if v is not None}, "report")
    except OptionError as exc:
        raise UsageError(str(exc)) from None
    return asked.memory_limit, asked.spill_limit, asked.session_timeout_ms, asked.finding_threshold


REPORT_KEYWORDS = (
    "sections",
    "since",
    "until",
    "topic",
    "client",
    "group",
    "session_timeout_ms",
    "finding_threshold",
    "memory_limit",
    "spill_limit",
    "spark",
)


def locals_of_report(given: dict[str, Any]) -> dict[str, Any]:
    """The keywords of a :func:`report` call, from its locals."""
    return {k: given[k] for k in REPORT_KEYWORDS}


def report(
    tables: Tables | str | os.PathLike[str],
    *,
    sections: Iterable[str] | None = None,
    since: Time = None,
    until: Time = None,
    topic: str | None = None,
    client: str | None = None,
    group: str | None = None,
    session_timeout_ms: int = 45_000,
    finding_threshold: Iterable[str | tuple[str, float]] = (),
    memory_limit: int | None = None,
    spill_limit: int | None = None,
    spark: Any = None,
) -> dict[str, pa.Table]:
    """{section name: its rows} of `kwsniff report` over ``tables`` (a dataset directory, the --out
    of `kwsniff read` or `kwsniff spark`, or what :func:`kwsniff.read` returned), in the report's
    order; ``sections`` picks some (`--section`), the others are its options by name. On DuckDB,
    unless ``spark`` (a SparkSession) is given: then the same SQL runs on it."""
    from kwsniff.api.tables import Tables

    memory, spill, timeout, thresholds = _sizes(
        memory_limit, spill_limit, session_timeout_ms, finding_threshold
    )
    times = (_time(since, "since"), _time(until, "until"))
    names = (_text(topic, "topic"), _text(client, "client"), _text(group, "group"))
    chosen = [sections] if isinstance(sections, str) else list(sections or ())
    if not all(isinstance(s, str) for s in chosen):
        raise UsageError(f"report: sections={sections!r} is not a list of section names")
    if isinstance(tables, Tables):
        with tempfile.TemporaryDirectory(prefix="kwsniff-report-") as folder:
            dataset = tables.write(Path(folder) / "tables")
            return report(dataset, **locals_of_report(locals()))
    import duckdb

    from kwsniff.core.answers import chosen_sections, missing_tables, refusal
    from kwsniff.core.answers import filters as report_filters
    from kwsniff.sections.run import answer_arrow, open_engine, unheld

    try:
        asked = chosen_sections(chosen)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not isinstance(tables, str | os.PathLike):
        raise UsageError(f"report: {tables!r} is not Tables or a directory")
    from kwsniff.sections.dataset import DatasetError

    # A URI (Delta tables on S3, docs/delta.md) stays as written: a Path would fold its `//`.
    path: Path | str = tables if isinstance(tables, str) and "://" in tables else Path(tables)
    try:
        problem = refusal(path, missing_tables(path))
    except OSError as exc:  # a name too long for the file system, a folder it may not read
        raise ReportError(f"{str(path)[:200]}: {exc.strerror or exc}") from None
    except DatasetError as exc:
        raise ReportError(str(exc)) from None
    if problem:
        raise ReportError(problem)
    filters = report_filters(*times, *names, timeout, thresholds)
    engine = None
    try:
        engine = open_engine(path, filters, spark, memory, spill)
        nothing = unheld(engine, filters)
        if nothing:  # as `kwsniff report --group X` says it, with the API's keyword
            name, _, rest = nothing.removeprefix("--").partition(" ")
            raise ReportError(
                f"report: {name}={getattr(filters, name)!r}" + rest.removeprefix(str(getattr(filters, name)))
            )
        return answer_arrow(engine, filters, asked)
    except duckdb.OutOfMemoryException as exc:
        raise ReportError(
            f"{path}: DuckDB ran out of memory or spill space ({str(exc).splitlines()[0]})"
        ) from None
    finally:
        if engine is not None:
            engine.close()
