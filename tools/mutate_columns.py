"""Mutation check of the tables: does a wrong value in any column make a non-snapshot test fail?

    python tools/mutate_columns.py                       # every column of every table
    python tools/mutate_columns.py connections.gaps requests.acks --jobs 2 --budget 240
    python tools/mutate_columns.py --report tools/mutation-report.md
    python tools/mutate_columns.py --registry --ci     # what .ci/run runs (tools/mutation_sample.py)

For each column, every row kwsniff writes carries a changed value in that column (+1 for numbers and
timestamps, a flipped bool, a string with "~" appended, and for a null a value instead). The change is
made where rows leave the row builder (the sink TableBuilder writes to, and the live capture's sink
for capture_stats), so the summary and the code's own counters are untouched: only what a user reads
from the tables is wrong. It is driven by the KWSNIFF_MUTATE environment variable (table.column),
read each time a TableBuilder is made; a sitecustomize module on PYTHONPATH applies it in every Python
process the tests start (the CLI) too.

One pytest process per group of columns collects the table's test files once (this module is its
plugin, `-p mutate_columns`) and runs them per column in turn, stopping at the first failing test,
which is recorded as the one that catches the column (it may be a consistency check rather than the
column's independent oracle, which tests/test_oracle_registry.py names); fixtures are torn down
between columns. A run without mutation goes first, within the same time budget: a test failing
there would catch everything.

Snapshot tests (golden digests, `show` excerpts) are left out: they catch everything and prove
nothing. Spark tests are left out for time (their executors decode with the same row builder).

`--ci` mutates a sample of CI_SAMPLE columns drawn with the commit's hash (tools/mutation_sample.py),
three times as many when the row builder (kwsniff/rows/) or this tool changed since HEAD~1, without
the run without mutation (.ci/run has just run every test). The run exits 1 when a column is not
caught.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
ENV = "KWSNIFF_MUTATE"
# Equivalent mutations: columns whose +1 no test can tell from the truth, with the reason. They are
# still mutated in a full run (a test may come to catch them), never drawn for CI's sample, and a
# miss of theirs is reported as allowed, not as a failure.
ALLOWED = {
    ("captures", "started"): "the wall-clock time the run of the input began: nothing outside the "
    "run saw that moment, so 1 µs later is as true (the test bounds it: a 2025-or-later time)",
    ("captures", "duration_ms"): "the run's own perf_counter time: 1 ms more is a slower run, which "
    "nothing outside it can refute (the test bounds it: not negative)",
}
# CI's sample (with --registry): 6 columns, under a minute on a busy 2-core machine, which leaves
# mutate_report's sample the rest of three minutes (docs/test-oracles.md has the figures).
CI_SAMPLE = 6
# A change here or in this tool triples CI's sample.
WATCHED = ("kwsniff/rows", "tools/mutate_columns.py")

# The test files that read each table's values, fastest first (they run with -x: the first failure
# stops the column's run). Snapshot and Spark files are deliberately absent.
CAPTURE_FILES = ["tests/test_read_captures.py", "tests/test_mid_stream_captures.py"]
FILES: dict[str, list[str]] = {
    "requests": [
        *CAPTURE_FILES,
        "tests/test_options.py",
        "tests/test_errors_table.py",
        "tests/test_partitions_table.py",
        "tests/test_records_counts.py",
        "tests/test_capture_edges.py",
        "tests/test_other_protocols.py",
        "tests/test_tls.py",
        "tests/test_hostile.py",
        "tests/test_sasl.py",
        "tests/test_session.py",
        "tests/test_cli_read.py",
        "tests/test_realparts_smoke.py",
        "tests/test_groups_wire.py",
        "tests/test_share_wire.py",
        "tests/test_upgrade.py",
    ],
    "connections": [
        *CAPTURE_FILES,
        "tests/test_accounting.py",
        "tests/test_capture_edges.py",
        "tests/test_other_protocols.py",
        "tests/test_tls.py",
        "tests/test_other_protocol_corpus.py",
        "tests/test_hostile.py",
        "tests/test_errors_table.py",
        "tests/test_sasl.py",
        "tests/test_session.py",
        "tests/test_cli_read.py",
        "tests/test_other_protocol_servers.py",
        "tests/test_tls_decrypt.py",
        "tests/test_net_tunnels.py",
        "tests/test_memory_budget.py",
        "tests/test_bad_input.py",
    ],
    "errors": ["tests/test_errors_table.py", "tests/test_sasl.py", "tests/test_other_protocol_corpus.py"],
    "partitions": [
        "tests/test_partitions_table.py",
        "tests/test_records_table.py",
        "tests/test_records_counts.py",
        "tests/test_hostile.py",
        "tests/test_groups_wire.py",
        "tests/test_share_wire.py",
        "tests/test_upgrade.py",
    ],
    "records": [
        "tests/test_records_table.py",
        "tests/test_records_counts.py",
        "tests/test_records_captures.py",
        "tests/test_partitions_table.py",
        "tests/test_hostile.py",
    ],
    "groups": [
        "tests/test_groups_table.py",
        "tests/test_groups_wire.py",
        "tests/test_groups_classic_protocol.py",
        "tests/test_groups_consumer_protocol.py",
    ],
    "capture_stats": ["tests/test_live_parts.py", "tests/test_live_capture.py"],
    "captures": ["tests/test_captures_table.py"],
}


# -- the mutation, applied inside the processes under test ---------------------------------------------
def mutated(value: Any, arrow_type: Any) -> Any:
    import pyarrow as pa

    if value is None:
        if pa.types.is_boolean(arrow_type):
            return True
        if pa.types.is_string(arrow_type):
            return "~"
        if pa.types.is_binary(arrow_type):
            return b"~"
        if pa.types.is_floating(arrow_type):
            return 1.0
        return 1
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "~"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value) + b"~"
    raise TypeError(f"cannot mutate {type(value).__name__}")


class MutatingSink:
    """Forwards rows to the real sink with one column of one table changed."""

    def __init__(self, sink: Any, table: str, column: str) -> None:
        from kwsniff.tables.schemas import SCHEMAS

        self._sink, self._table, self._column = sink, table, column
        self._type = SCHEMAS[table].field(column).type

    def add(self, table: str, row: dict[str, Any]) -> None:
        if table == self._table and self._column in row:
            row = {**row, self._column: mutated(row[self._column], self._type)}
        self._sink.add(table, row)

    # The compiled partition walker (kwsniff/rows/compiled.py) hands the Parquet writer `partitions`
    # rows as values in schema order: without these, its Produce and Fetch rows went out unchanged.
    def add_values(self, table: str, values: tuple[Any, ...]) -> None:
        self._sink.add_values(table, self._changed(table, values))

    def add_many_values(self, table: str, many: list[tuple[Any, ...]]) -> None:
        self._sink.add_many_values(table, [self._changed(table, values) for values in many])

    def _changed(self, table: str, values: tuple[Any, ...]) -> tuple[Any, ...]:
        if table != self._table:
            return values
        at = self._sink.columns(table).index(self._column)
        return (*values[:at], mutated(values[at], self._type), *values[at + 1 :])

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sink, name)


class _Forward:
    def __init__(self, add: Any, sink: Any) -> None:
        self._add, self._sink = add, sink

    def add(self, table: str, row: dict[str, Any]) -> None:
        self._add(self._sink, table, row)


def _mutation() -> tuple[str, str] | None:
    spec = os.environ.get(ENV)
    if not spec:
        return None
    table, column = spec.split(".", 1)
    return table, column


def install() -> None:
    """Patch the row builder's sink (and the live capture's, for capture_stats; the captures row's
    maker, for captures) to follow KWSNIFF_MUTATE."""
    from kwsniff.pipeline import run
    from kwsniff.rows import builder

    if getattr(builder.TableBuilder, "_mutating", False):
        return
    original_row = run.capture_row

    def capture_row(*args: Any, **kwargs: Any) -> dict[str, object]:
        # `read` and the Python API write the captures row themselves, not through the row builder.
        row = original_row(*args, **kwargs)
        spec = _mutation()
        if spec is not None and spec[0] == "captures" and spec[1] in row:
            from kwsniff.tables.schemas import SCHEMAS

            row = {**row, spec[1]: mutated(row[spec[1]], SCHEMAS["captures"].field(spec[1]).type)}
        return row

    run.capture_row = capture_row  # type: ignore[assignment]
    original_init = builder.TableBuilder.__init__

    def init(self: Any, capture: str, sink: Any, *args: Any, **kwargs: Any) -> None:
        spec = _mutation()
        if spec is not None:
            sink = MutatingSink(sink, *spec)
        original_init(self, capture, sink, *args, **kwargs)

    builder.TableBuilder.__init__ = init  # type: ignore[method-assign]
    builder.TableBuilder._mutating = True  # type: ignore[attr-defined]
    try:
        from kwsniff.sinks import rotating
    except ImportError:
        return
    original_add = rotating.RotatingSink.add

    def add(self: Any, name: str, row: dict[str, Any]) -> None:
        spec = _mutation()
        if spec is not None and spec[0] == "capture_stats" == name:
            # Written by the live capture loop straight into its sink, not by the row builder.
            MutatingSink(_Forward(original_add, self), *spec).add(name, row)
        else:
            original_add(self, name, row)

    rotating.RotatingSink.add = add  # type: ignore[method-assign]


SITECUSTOMIZE = f"""import os, sys
if os.environ.get({ENV!r}):
    sys.path.insert(0, {str(REPO / "tools")!r})
    import mutate_columns
    mutate_columns.install()
"""


# -- the pytest plugin: one collection, one run per column ---------------------------------------------
def pytest_configure(config: Any) -> None:
    install()


def pytest_runtestloop(session: Any) -> bool:
    from _pytest.runner import runtestprotocol

    table = os.environ["KWSNIFF_MUTATE_TABLE"]
    todo = [c for c in os.environ["KWSNIFF_MUTATE_COLUMNS"].split(",") if c]
    # --registry: each column runs only the test tests/test_oracle_registry.py names for it.
    only: dict[str, str] = json.loads(os.environ.get("KWSNIFF_MUTATE_ONLY", "{}"))
    budget = float(os.environ.get("KWSNIFF_MUTATE_BUDGET", "300"))
    out = Path(os.environ["KWSNIFF_MUTATE_OUT"])
    results: dict[str, str] = {}

    def run(spec: str | None) -> str:
        if spec is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = spec
        items = session.items
        if only:
            wanted = (
                {"tests/" + only[spec.split(".", 1)[1]]}
                if spec is not None
                else {"tests/" + t for t in only.values()}
            )
            items = [i for i in items if i.nodeid.split("[")[0] in wanted]
            if not items:
                return f"NO SUCH TEST {wanted}"
        start = time.monotonic()
        for index, item in enumerate(items):
            over = time.monotonic() - start > budget
            nextitem = items[index + 1] if index + 1 < len(items) and not over else None
            reports = runtestprotocol(item, nextitem=nextitem, log=False)
            if any(r.failed for r in reports):
                session._setupstate.teardown_exact(None)
                return item.nodeid
            if over:
                return f"not caught within {budget:.0f}s"
        return f"NOT CAUGHT ({time.monotonic() - start:.0f}s, {len(items)} tests)"

    baseline = "" if os.environ.get("KWSNIFF_MUTATE_BASELINE") == "no" else run(None)
    if baseline.startswith("tests/"):
        results["(no mutation)"] = f"BASELINE FAILS: {baseline}"
    else:
        for column in todo:
            results[column] = run(f"{table}.{column}")
            print(f"\n{table}.{column}: {results[column]}", flush=True)
    os.environ.pop(ENV, None)
    out.write_text(json.dumps({"table": table, "results": results}))
    return True


# -- the runner ------------------------------------------------------------------------------------------
def columns() -> list[tuple[str, str]]:
    sys.path.insert(0, str(REPO))
    from kwsniff.tables.schemas import SCHEMAS

    return [(t, f.name) for t, schema in SCHEMAS.items() for f in schema]


def registry() -> dict[str, dict[str, str]]:
    sys.path.insert(0, str(REPO / "tests"))
    from test_oracle_registry import ORACLE_CHECKED

    return ORACLE_CHECKED


def run_group(
    table: str,
    names: list[str],
    site: Path,
    budget: float,
    tmp: Path,
    n: int,
    named: dict[str, str] | None,
    without_baseline: bool = False,
) -> dict[str, str]:
    if named is not None:
        # Only this group's tests: its run without mutation need not run the table's others.
        named = {c: named[c] for c in names if c in named}
        files = sorted({"tests/" + test.split("::")[0] for test in named.values()})
        names = list(named)
    else:
        files = [f for f in FILES.get(table, []) if (REPO / f).exists()]
    if not files:
        return dict.fromkeys(names, "NO TEST FILES")
    out = tmp / f"{table}-{n}.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), str(REPO / "tools"), str(REPO)]),
        "KWSNIFF_MUTATE_TABLE": table,
        "KWSNIFF_MUTATE_COLUMNS": ",".join(names),
        "KWSNIFF_MUTATE_BUDGET": str(budget),
        "KWSNIFF_MUTATE_OUT": str(out),
        "KWSNIFF_MUTATE_ONLY": json.dumps(named or {}),
        "KWSNIFF_MUTATE_BASELINE": "no" if without_baseline else "yes",
    }
    env.pop(ENV, None)
    # `-n 0`: the plugin runs the test loop itself, in this one process (pyproject's addopts use xdist).
    command = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider"]
    command += ["-p", "mutate_columns", *files]
    done = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=budget * (len(names) + 2)
    )
    if not out.exists():
        return dict.fromkeys(
            names, f"pytest exit {done.returncode}: {done.stdout[-300:]!r} {done.stderr[-300:]!r}"
        )
    return dict(json.loads(out.read_text())["results"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("only", nargs="*", help="table.column to mutate (default: all)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--group", type=int, default=16, help="columns per pytest process")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds per column")
    parser.add_argument("--report", type=Path, help="write a Markdown table here")
    parser.add_argument(
        "--registry",
        action="store_true",
        help="run only the test tests/test_oracle_registry.py names per column",
    )
    parser.add_argument(
        "--ci", action="store_true", help="a sample, three times as large if the row builder changed"
    )
    parser.add_argument("--sample", type=int, default=CI_SAMPLE, help="the sample's size (with --ci)")
    args = parser.parse_args(argv)
    named_tests = registry() if args.registry else {}
    todo = [c for c in columns() if not args.only or f"{c[0]}.{c[1]}" in args.only]
    if args.ci:
        from mutation_sample import ci_choice

        todo = ci_choice([c for c in todo if c not in ALLOWED], args.sample, WATCHED, "mutate_columns")
    groups: list[tuple[str, list[str]]] = []
    for table in dict.fromkeys(t for t, _ in todo):
        names = [c for t, c in todo if t == table]
        groups += [(table, names[i : i + args.group]) for i in range(0, len(names), args.group)]
    results: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="kwsniff-mutate-") as tmp:
        site = Path(tmp)
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        with ThreadPoolExecutor(args.jobs) as pool:
            jobs = [
                pool.submit(
                    run_group,
                    table,
                    names,
                    site,
                    args.budget,
                    site,
                    n,
                    named_tests.get(table) if args.registry else None,
                    args.ci,
                )
                for n, (table, names) in enumerate(groups)
            ]
            for (table, _), job in zip(groups, jobs, strict=True):
                for column, how in job.result().items():
                    if (table, column) in ALLOWED and not how.startswith("tests/"):
                        how = f"allowed, {how}: {ALLOWED[table, column]}"
                    print(f"{table}.{column}: {how}", flush=True)
                    results.append((table, column, how))
    caught = sum(how.startswith("tests/") for _, _, how in results)
    allowed = sum(how.startswith("allowed, ") for _, _, how in results)
    verdict = f"{caught} of {len(results)} columns caught" + (f", {allowed} allowed" if allowed else "")
    if args.report:
        title = "the registry's test, failing" if args.registry else "first failing test"
        lines = [f"| table | column | {title} |", "|---|---|---|"]
        lines += [f"| {t} | {c} | {how} |" for t, c, how in results]
        args.report.write_text("\n".join(lines) + f"\n\n{verdict}.\n")
    print(verdict)
    return 0 if caught + allowed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
