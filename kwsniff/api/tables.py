"""`kwsniff.Tables`: what :func:`kwsniff.read` decoded, as pyarrow Tables, its summary, and
:meth:`Tables.write` to a Parquet dataset with `read --out`'s commit rules."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kwsniff.api.errors import OutputError, UsageError

if TYPE_CHECKING:
    import pyarrow as pa

    from kwsniff.pipeline.run import CaptureResult


@dataclasses.dataclass
class Part:
    """The batches of one input, per table, as `read` would write them to its files `<table>/<file_name>.parquet`."""

    file_name: str
    tables: tuple[str, ...]
    batches: dict[str, list[pa.RecordBatch]]


def summary_of(result: CaptureResult, rows: dict[str, int]) -> dict[str, Any]:
    """The numbers `read` prints for one capture (kwsniff.view.summary), by name, and its lines."""
    from kwsniff.view.summary import STATUSES, accounting_line, strict_reasons, summary_lines

    t, st = result.totals, result.stats
    return {
        "packets": st.packets,
        "bytes": result.file_bytes,
        "seconds": result.seconds,
        "packets_skipped": dict(sorted(st.skipped_packets.items())),
        "connections": t["connections"],
        "kafka_connections": t["kafka_connections"],
        "frames_to_broker": t["frames_to_broker"],
        "frames_to_client": t["frames_to_client"],
        "requests": sum(result.status.values()),
        "status": {s: result.status.get(s, 0) for s in STATUSES},
        "orphan_responses": t["orphan_responses"],
        "gaps": t["gaps"],
        "gap_bytes": t["gap_bytes"],
        "skipped_bytes": t["skipped_bytes"],
        "not_kafka_bytes": t["not_kafka_bytes"],
        "retransmitted_bytes": t["duplicate_bytes"],
        "implausible_gaps": t["implausible_gaps"],
        "decode_errors": dict(result.decode_errors),
        "record_damage": {k: v for k, v in result.record_damage.items() if v},
        "notes": dict(result.notes),
        "accounting": accounting_line(result),
        "rows": rows,
        "warnings": list(result.warnings),
        "strict": strict_reasons(result),
        "lines": summary_lines(result, None, rows),
    }


class Tables(Mapping[str, "pa.Table"]):
    """The tables of one :func:`kwsniff.read`: ``tables["requests"]`` or ``tables.requests`` is a
    pyarrow.Table (``.to_pandas()`` for a DataFrame), in input order; ``summary`` has, per capture,
    the numbers `read` prints; ``warnings`` what it would say on stderr."""

    def __init__(
        self,
        parts: list[Part],
        names: tuple[str, ...],
        summary: dict[str, dict[str, Any]],
        warnings: list[str],
        memory_limit: int,
    ) -> None:
        self._parts = parts
        self._names = names
        self._cache: dict[str, pa.Table] = {}
        self.summary = summary
        self.warnings = warnings
        self.memory_limit = memory_limit

    def __getitem__(self, name: str) -> pa.Table:
        if name not in self._names:
            raise KeyError(f"no table {name!r}; tables: {', '.join(self._names)}")
        if name not in self._cache:
            import pyarrow as pa

            from kwsniff.tables.schemas import SCHEMAS

            batches = [b for part in self._parts for b in part.batches.get(name, [])]
            self._cache[name] = pa.Table.from_batches(batches, schema=SCHEMAS[name])
        return self._cache[name]

    def __getattr__(self, name: str) -> pa.Table:
        if name.startswith("_") or name not in self._names:
            raise AttributeError(name)
        return self[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return "Tables(" + ", ".join(f"{n}: {self[n].num_rows} rows" for n in self._names) + ")"

    def write(
        self,
        out: str | os.PathLike[str],
        *,
        overwrite: bool = False,
        append: bool = False,
        summaries: str = "auto",
        host: str | None = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> Path | str:
        """Write the tables to ``out`` as `kwsniff read --out OUT` does: a Parquet dataset (a path:
        the same files, the same bytes), or Delta tables (``s3://bucket/prefix`` or ``file:///path``,
        their rows' host ``host``, the AWS variables and ``storage_options`` for S3: docs/delta.md),
        the report's summaries beside them as ``summaries`` says (`read --summaries`), committed as
        `read` commits. Tables already there are refused (OutputError) unless ``overwrite`` or
        ``append``. Returns ``out`` (a Path, or the URI as given)."""
        from kwsniff.core.options import OptionError, ReadOptions, from_keywords
        from kwsniff.core.output import commit, open_output, too_long
        from kwsniff.sinks import ExistingOutput, ParquetSink
        from kwsniff.sinks import OutputError as DatasetError

        given: dict[str, Any] = {"out": out, "overwrite": overwrite, "append": append, "summaries": summaries}
        if host is not None:
            given["host"] = host
        if storage_options:
            given["storage_option"] = [f"{k}={v}" for k, v in storage_options.items()]
        try:
            options = from_keywords(ReadOptions, given, "write")
        except OptionError as exc:
            raise UsageError(str(exc)) from None
        if options.overwrite and options.append:
            raise UsageError("write: overwrite and append exclude each other")
        existing = (
            ExistingOutput.OVERWRITE
            if options.overwrite
            else ExistingOutput.APPEND
            if options.append
            else ExistingOutput.REFUSE
        )
        try:
            output = open_output(
                options.out, existing, host=options.host, storage_options=options.storage_option
            )
        except DatasetError as exc:
            raise OutputError(str(exc)) from None
        try:
            refused = too_long({Path(p.file_name): p.file_name for p in self._parts}, output.name_max())
            if refused:
                raise OutputError(refused)
            for part in self._parts:
                with ParquetSink(output.stage, part.file_name, part.tables) as sink:
                    for table in part.tables:
                        for batch in part.batches.get(table, []):
                            sink.write_batch(table, batch)
            commit(output, self.memory_limit, options.summaries, _warn)
        except DatasetError as exc:
            raise OutputError(str(exc)) from None
        except OSError as exc:
            raise OutputError(f"{out}: {exc.strerror or exc}") from None
        finally:
            output.close()
        return options.out


def _warn(what: str, lines: Iterable[str]) -> None:
    """A warning of the write (summaries not written), on stderr as the command says it."""
    for line in lines:
        print(f"kwsniff: warning: {what}: {line}", file=sys.stderr)
