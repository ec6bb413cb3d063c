"""`kwsniff.read` and `kwsniff.iter_read`: captures decoded in the calling process into Arrow
tables, with `kwsniff read`'s decoder, options and row batches: the keywords checked by
kwsniff.core.options, the inputs decoded by kwsniff.core.decode."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from kwsniff.api.errors import InputError, StrictError, UsageError
from kwsniff.core.decode import Done, InputMissing, Run, decode

if TYPE_CHECKING:
    import pyarrow as pa

    from kwsniff.api.tables import Tables

Captures = str | os.PathLike[str] | Iterable[str | os.PathLike[str]]


class Batch(NamedTuple):
    """One record batch of one table, as :func:`iter_read` yields them."""

    table: str
    batch: pa.RecordBatch


def settings(captures: Captures, given: dict[str, Any]) -> Run:
    """The run ``read(captures, **given)`` asks for, checked as `kwsniff read` checks it: each
    keyword by its field of kwsniff.core.options.ReadOptions."""
    from kwsniff import codecache
    from kwsniff.core.decoding import read_session_options
    from kwsniff.core.options import WRITE_OPTIONS, OptionError, ReadOptions, from_keywords
    from kwsniff.core.values import BadValue
    from kwsniff.memory import ROWS, MemoryBudget
    from kwsniff.pipeline.keylogs import KeyLogError
    from kwsniff.tables import DEFAULT_TABLES

    if "broker_ports" in given:  # the plural reads naturally for a list; the command's name is singular
        given = {("broker_port" if k == "broker_ports" else k): v for k, v in given.items()}
    try:
        asked = from_keywords(ReadOptions, given, "read", skip=WRITE_OPTIONS)
    except OptionError as exc:
        raise UsageError(str(exc)) from None
    given_paths = [captures] if isinstance(captures, str | os.PathLike) else captures
    listed = list(given_paths) if isinstance(given_paths, Iterable) else [given_paths]
    if not all(isinstance(c, str | os.PathLike) for c in listed):
        raise UsageError(f"read: {captures!r} is not a path or a list of paths")
    paths = [Path(os.fsdecode(c)) for c in listed]
    if not paths:
        raise UsageError("read: no captures given")
    if any(str(p) == "-" for p in paths):
        raise UsageError("read: standard input (-) is for the command; give a file")
    try:
        options = read_session_options(asked)
    except BadValue as exc:
        raise UsageError(f"read: fragment_memory: Invalid value for --fragment-memory: {exc}") from None
    except KeyLogError as exc:
        raise InputError(str(exc)) from None
    codecache.use_directory(codecache.cache_dir(os.environ))  # as `read` does: decoders kept for the next run
    tables = (*DEFAULT_TABLES, "records") if options.records else DEFAULT_TABLES
    rows = MemoryBudget(asked.memory_limit).cap(ROWS)
    return Run(paths, options, tables, rows, asked.strict, asked.continuous)


def iter_read(captures: Captures, **options: Any) -> Iterator[Batch]:
    """Decode ``captures`` as :func:`read` does, yielding each table's record batches as they fill
    (``Batch(table, batch)``), under the row buffer of ``memory_limit`` (`--memory-limit`): memory
    stays bounded by the budget whatever the capture's size, as long as the caller lets the batches go.

    An input that fails part-way raises InputError after the batches it gave; with ``strict=True``,
    StrictError is raised after the last batch when something was not decoded."""
    from kwsniff.view.summary import strict_reasons

    run = settings(captures, options)
    reasons = []
    for item in _decoded(run):
        if isinstance(item, Done):
            if item.reason is not None:
                raise InputError(f"{item.name}: {item.reason}")
            assert item.result is not None
            if run.strict:
                reasons += [f"{item.result.name}: {r}" for r in strict_reasons(item.result)]
            continue
        yield Batch(*item)
    if reasons:
        raise StrictError(reasons)


def read(captures: Captures, **options: Any) -> Tables:
    """Decode ``captures`` (a path or a list of paths: pcap, pcapng, optionally gzipped) into
    kwsniff's tables, in this process, as `kwsniff read` does (docs/python-api.md).

    ``options`` are `kwsniff read`'s options by their long names in snake_case (``broker_port``,
    ``keylog``, ``records``, ``record_payloads``, ``memory_limit``, ``no_auto_detect``, ``strict``,
    ``continuous``, ...), with the same defaults. An input that is not a capture fails alone (its
    `captures` row says why, and ``Tables.warnings``) unless none is left (InputError)."""
    from kwsniff.api.tables import Part, Tables, summary_of
    from kwsniff.view.summary import strict_reasons

    run = settings(captures, options)
    parts: list[Part] = []
    batches: dict[str, list[pa.RecordBatch]] = {}
    summaries, warnings, reasons, failed_inputs = {}, [], [], []
    for item in _decoded(run):
        if not isinstance(item, Done):
            batches.setdefault(item[0], []).append(item[1])
            continue
        if item.result is None:
            failed_inputs.append(f"{item.name}: {item.reason}")
            warnings.append(f"{item.name}: failed: {item.reason}")
            parts.append(Part(item.file_name, ("captures",), batches))
        else:
            result = item.result
            parts.append(Part(item.file_name, run.tables, batches))
            summaries[result.name] = summary_of(
                result, {t: sum(len(b) for b in batches.get(t, [])) for t in run.tables}
            )
            warnings += [f"{result.name}: {w}" for w in result.warnings]
            if run.strict:
                reasons += [f"{result.name}: {r}" for r in strict_reasons(result)]
        batches = {}
    if not summaries:  # nothing decoded, as `read` says it: an error (a pipe nobody wrote to, ...)
        raise InputError(
            failed_inputs[0] if len(parts) == 1 else f"none of the {len(parts)} inputs could be read"
        )
    tables = Tables(parts, run.tables, summaries, warnings, run.options.memory_limit)
    if run.strict and (reasons or len(summaries) < len(parts)):
        failed = len(parts) - len(summaries)
        raise StrictError(reasons + ([f"{failed} of {len(parts)} inputs failed"] if failed else []), tables)
    return tables


def _decoded(run: Run) -> Iterator[tuple[str, pa.RecordBatch] | Done]:
    """kwsniff.core.decode.decode, an input that is missing (or none readable) an InputError."""
    try:
        yield from decode(run)
    except InputMissing as exc:
        raise InputError(str(exc)) from None
