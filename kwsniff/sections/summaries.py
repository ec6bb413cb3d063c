"""Per-capture summaries: the part of the report's sections that never looks past one capture,
computed once when the capture's tables are written and kept beside them, so that `kwsniff report`
reads them instead of the rows.

All sections but ten (`latency`, `long_polls`, `produce_latency`, `errors`, `throttled`, `throughput`,
`churn`, `brokers`, `isr_changes` and `controller`: percentiles, counts and histories over every
capture at once) join, window and group rows only within one capture. What each computes per capture is a query of its own (catalog.PARTS:
`summary_lag`, ...), and the section is a small query over that. `kwsniff read` and `kwsniff spark`
run PARTS over the captures they stage (DuckDB, under the run's --memory-limit) and write, per
capture and part, one file beside its tables, named like its table files
(`OUT/summary_lag/<name>.parquet`, empty or not), and its `summary_captures` row (capture,
VERSION). A capture read again (``--append``) replaces its summaries with its tables.

`report` reads the summaries (:func:`stored`) when every summarized capture has exactly one
`summary_captures` row of this VERSION, every part has a file per `summary_captures` file, and
neither --since nor --until cuts rows out of a capture (the parts would then be of the rows left).
A capture without summaries (`read` skips them on small runs, kwsniff.commands.summarize; a live
capture's tables; an older kwsniff's) has its parts computed from its rows, beside the others read
from their files. Otherwise every part is computed from the rows by the same query: the answers are
the same either way (tests/test_report_summaries.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from itertools import groupby
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kwsniff.sections.catalog import PARTS
from kwsniff.tables.names import SUMMARIES

if TYPE_CHECKING:
    from kwsniff.sections.dataset import Filters

# Raised whenever a part's query or columns change: summaries of another version are not read.
# 2: stopped's states and never_committed rows; 3: rebalances count only MEMBER_ID_REQUIRED attempts;
# 4: inventory counts a request once per topic, not once per partition; 5: parts count consumer
# fetches only (partition_exchanges reads `fetcher`); 6: the `replication` part; 7: the `misrouted`
# part (KIP-1242); 8: inventory's `unnamed_rows`, topic ids named from the whole dataset; 9: stopped's
# status figures (recent_commits, recent_offsets, lag_rising); 10: produce_to_consume's `unnamed` rows;
# 11: member_lag says what it measures from (`measured_from`).
VERSION = 11
MARKER = "summary_captures"
BATCH_ROWS = 65_536  # rows of a part held in Python at a time while it is written
# DuckDB's threads while summarizing: one a ROWS_PER_THREAD staged rows, at least one. A second
# thread bought no shorter wall time on the 2-core machine and cost CPU: 0.64 against 0.56 s on
# 388k staged rows, 2.74 against 2.35 s on 2.9M (docs/benchmark-history.md, issue 50).
ROWS_PER_THREAD = 1_000_000
assert (MARKER, *PARTS) == SUMMARIES, (MARKER, *PARTS)


def _names(tables: Path, part: str, found: list[str]) -> set[str]:
    """The files of one summary directory, by their path under it."""
    return {str(Path(f).relative_to(tables / part)) for f in found}


def stored(
    con: Any, tables: Path, paths: Mapping[str, list[str]], filters: Filters
) -> tuple[dict[str, list[str]], list[str]] | None:
    """({part: its files}, the captures without summaries) when the report can read the summaries of
    ``tables`` (whose tables' files are ``paths``), else None; ``con`` is a DuckDB connection.

    A table file named like a `summary_captures` file and not newer than it was written with those
    summaries (`read` writes both in one commit, and a capture read again replaces both). Any other
    table file (`spark` names its files apart from its summaries; a live capture's; a small `read`'s;
    one added by hand) is read: a capture in it with a `summary_captures` row is summarized (by
    `spark`), one without is not (its parts are computed from its rows), and one whose row is named
    like a table file makes every part computed from the rows (that capture's rows would then be in
    files its summaries were not made from)."""
    from kwsniff.sections.dataset import files

    if filters.since is not None or filters.until is not None:
        return None
    marker = files(tables, MARKER)
    if not marker:
        return None
    names = _names(tables, MARKER, marker)
    parts = {part: files(tables, part) for part in PARTS}
    if any(_names(tables, part, found) != names for part, found in parts.items()):
        return None
    written_at = {name: os.stat(tables / MARKER / name).st_mtime_ns for name in names}
    unmatched, named = [], set()
    for table, found in paths.items():
        for f in found:
            name = str(Path(f).relative_to(tables / table))
            if name not in names:
                unmatched.append(f)
                continue
            named.add(str(tables / MARKER / name))
            if os.stat(f).st_mtime_ns > written_at[name]:
                return None  # written again, by a writer that did not summarize it
    covered = (
        f"SELECT DISTINCT capture FROM read_parquet({unmatched!r}, union_by_name = true)"
        if unmatched
        else "SELECT 'x' AS capture WHERE false"
    )
    ((missing, split, doubled, other),) = con.execute(
        f"""WITH m AS (SELECT capture, version, filename FROM read_parquet({marker!r}, filename = true)),
        c AS ({covered})
        SELECT (SELECT COALESCE(LIST(capture ORDER BY capture), []) FROM c
                  WHERE capture NOT IN (SELECT capture FROM m)),
               (SELECT COUNT(*) FROM c
                  WHERE capture IN (SELECT capture FROM m WHERE filename IN (SELECT UNNEST(?)))),
               (SELECT COUNT(*) - COUNT(DISTINCT capture) FROM m),
               (SELECT COUNT(*) FROM m WHERE version <> {VERSION})""",
        [sorted(named)],
    ).fetchall()
    return (parts, list(missing)) if split == doubled == other == 0 else None


def write(stage: Path, memory_limit: int | None = None, spill_limit: int | None = None) -> int:
    """Write the summaries of every capture whose tables are in ``stage`` (a run's staging directory,
    `stage/<table>/...parquet`) beside them; the count of captures summarized. Each part comes out of
    DuckDB sorted (by capture first), in batches (memory bounded whatever the captures' size), and is cut
    into one file per capture as it streams. Without pandas or pyarrow.parquet (`read`'s start-up,
    kwsniff.sinks.parquet)."""
    import pyarrow as pa
    from pyarrow._parquet import ParquetWriter

    from kwsniff.sections.dataset import DuckTables, Filters
    from kwsniff.sinks.parquet import WRITER_OPTIONS

    def save(path: Path, schema: Any, tables: Iterable[Any] = ()) -> None:
        out = ParquetWriter(str(path), schema, **WRITER_OPTIONS)
        try:
            for table in tables:
                out.write_table(table, row_group_size=None)
        finally:
            out.close()

    with DuckTables(stage, Filters(), memory_limit, spill_limit) as engine:
        stems = _stems(engine)
        if not stems:
            return 0
        engine.con.execute(f"SET threads = {_threads(engine)}")
        for name in SUMMARIES:
            (stage / name).mkdir(exist_ok=True)
        for capture, stem in stems.items():
            marker = pa.Table.from_arrays(
                [pa.array([capture], pa.string()), pa.array([VERSION], pa.int32())], ["capture", "version"]
            )
            save(stage / MARKER / f"{stem}.parquet", marker.schema, [marker])
        for name, sql in PARTS.items():
            # Every column sorts (`capture` is the first): the same input, the same bytes.
            batches = engine.batches(sql, BATCH_ROWS)
            left = dict(stems)
            for capture, pieces in groupby(_runs(batches), key=itemgetter(0)):
                save(stage / name / f"{left.pop(capture)}.parquet", batches.schema, (t for _, t in pieces))
            for stem in left.values():  # a capture without rows in this part: an empty file all the same
                save(stage / name / f"{stem}.parquet", batches.schema)
    return len(stems)


def _threads(engine: Any) -> int:
    """One DuckDB thread a ROWS_PER_THREAD rows of the staged tables (their files' footers), at least
    one, at most DuckDB's own count (one a core)."""
    listed = [p for files_of in engine.paths.values() for p in files_of]
    ((rows, most),) = engine.con.execute(
        f"SELECT COALESCE(SUM(num_rows), 0), current_setting('threads') FROM parquet_file_metadata({listed!r})"
    ).fetchall()
    return max(1, min(int(most), int(rows) // ROWS_PER_THREAD))


def _runs(batches: Iterable[Any]) -> Iterator[tuple[str, Any]]:
    """(capture, an Arrow table of its rows) of each run of one capture's rows in each batch."""
    import pyarrow as pa

    for batch in batches:
        start = 0
        for capture, rows in groupby(batch.column("capture").to_pylist()):
            n = sum(1 for _ in rows)
            yield capture, pa.Table.from_batches([batch.slice(start, n)])
            start += n


def _stems(engine: Any) -> dict[str, str]:
    """{capture: the file name (without `.parquet`) of its summaries}: the name its table files share
    (`kwsniff read`: the input's), else one made from the capture's name (`kwsniff spark` writes a
    capture split into flow buckets as several files)."""
    from kwsniff.sinks.dataset import path_digest_of
    from kwsniff.sinks.parquet import safe_file_stem

    seen: dict[str, set[str]] = {}
    for capture, path in engine.capture_files():
        seen.setdefault(capture, set()).add(Path(path).name.removesuffix(".parquet"))
    owners: dict[str, int] = {}
    for names in seen.values():
        for name in names:
            owners[name] = owners.get(name, 0) + 1
    return {
        capture: next(iter(names))
        if len(names) == 1 and owners[next(iter(names))] == 1
        else f"{safe_file_stem(capture)}-{path_digest_of(capture)}"
        for capture, names in seen.items()
    }
