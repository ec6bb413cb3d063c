"""SIGKILL at random moments during `kwsniff read --overwrite` and `kwsniff spark --overwrite`: after
every kill each table of --out is wholly the old run's or wholly the new run's, and all tables agree.

The two runs read different inputs, so the versions differ in every table's files and row counts.
Delays are fractions of the span of a whole run, measured first: drawn from a seeded generator for
`read` (its first eight draws fall early, midway and past the commit), chosen for `spark`, where each
kill costs a Spark start; the loops are bounded in kills and in time.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.dataset as ds

from tests.test_datasets import ACKS, CODECS, KP, leftovers

READ_KILLS = 8
# From Spark's first staged table: early in the staged write, midway, and around the commit at the end.
SPARK_KILL_AT = (0.07, 0.53, 0.94)
READ_BUDGET_S = 100.0
SPARK_BUDGET_S = 200.0
SPARK_WAIT_S = 300.0


def run(args: list[str]) -> float:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "kwsniff", *args], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return time.monotonic() - started


@contextlib.contextmanager
def killed_at_exit(args: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    """Runs kwsniff in a session of its own and SIGKILLs that whole process group (Spark's JVM too)
    when the block ends, unless the run ended before."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kwsniff", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):  # the run ended before its kill
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def killed_after(args: list[str], delay: float) -> None:
    """Runs kwsniff and SIGKILLs its whole process group after ``delay`` seconds."""
    with killed_at_exit(args) as proc, contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=delay)


def state(out: Path) -> tuple[tuple[str, ...], dict[str, int]]:
    """Per table: the data files (relative paths) and the rows a plain reader (pyarrow.dataset) sees."""
    tables = sorted(p.name for p in out.iterdir())
    files = tuple(str(p.relative_to(out)) for t in tables for p in sorted((out / t).glob("*.parquet")))
    return files, {t: ds.dataset(out / t).count_rows() for t in tables}


def spark_state(out: Path) -> dict[str, tuple[int, list[str]]]:
    """Per table: the rows and the captures they come from, as a plain reader sees them (Spark's
    file names change with every job)."""
    found = {}
    for table in sorted(p.name for p in out.iterdir()):
        if not any((out / table).rglob("*.parquet")):
            found[table] = (0, [])  # Spark writes no file for a table without rows
            continue
        rows = ds.dataset(out / table, partitioning="hive").to_table(columns=["capture"])
        found[table] = (rows.num_rows, sorted(set(rows.column("capture").to_pylist())))
    return found


def test_sigkill_during_read_overwrite_leaves_the_old_or_the_new_dataset(tmp_path: Path) -> None:
    out = tmp_path / "t"
    small = [str(ACKS), str(KP)]
    big = []
    for n in range(4):
        big.append(str(tmp_path / f"codecs-{n}.pcap"))
        shutil.copy(CODECS, big[-1])
    versions = {}
    spans = []
    for name, inputs in (("small", small), ("big", big)):
        spans.append(run(["read", *inputs, "-o", str(out), "-q", "--overwrite"]))
        versions[name] = state(out)
    assert versions["small"][1]["requests"] == 103 + 46
    assert versions["big"][1]["requests"] != versions["small"][1]["requests"]
    current = "big"
    rng = random.Random(22)
    seen = {"old": 0, "new": 0}
    deadline = time.monotonic() + READ_BUDGET_S
    for _ in range(READ_KILLS):
        if time.monotonic() > deadline:
            break
        other = "small" if current == "big" else "big"
        inputs = small if other == "small" else big
        killed_after(
            ["read", *inputs, "-o", str(out), "-q", "--overwrite"], rng.uniform(0.2, 1.1) * max(spans)
        )
        found = state(out)
        assert found in (versions[current], versions[other]), found
        seen["new" if found == versions[other] else "old"] += 1
        current = other if found == versions[other] else current
    print(f"read --overwrite: {sum(seen.values())} kills, dataset after them {seen}")
    assert sum(seen.values()) >= 5, seen
    assert seen["old"] >= 1, seen
    # A complete run after the kills: what they left beside --out is gone, nothing hidden inside.
    run(["read", *small, "-o", str(out), "-q", "--overwrite"])
    assert state(out) == versions["small"]
    assert leftovers(out) == []
    assert [p for p in out.rglob(".*")] == []


def staging(out: Path) -> bool:
    """Whether a staging directory beside ``out`` holds anything yet. One may be committed (renamed
    away) between listing it and looking inside: that one holds nothing any more."""
    for stage in out.parent.glob(f".{out.name}.kwsniff-stage-*"):
        try:
            if any(stage.iterdir()):
                return True
        except FileNotFoundError:
            continue
    return False


def killed_while_writing(args: list[str], out: Path, delay: float | None) -> float:
    """Runs kwsniff spark and SIGKILLs its process group (the JVM too) ``delay`` seconds after Spark
    starts writing the tables into the staging directory (before that, nothing can have changed);
    ``None``: lets it finish. Returns the seconds from the first staged table to the end."""
    with killed_at_exit(args) as proc:
        deadline = time.monotonic() + SPARK_WAIT_S
        while proc.poll() is None and time.monotonic() < deadline:
            if staging(out):
                break
            time.sleep(0.05)
        writing = time.monotonic()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=delay if delay is not None else SPARK_WAIT_S)
        assert delay is not None or proc.returncode == 0
        return time.monotonic() - writing


def test_sigkill_during_spark_overwrite_leaves_the_old_or_the_new_dataset(tmp_path: Path) -> None:
    """The old dataset is `kwsniff read`'s of one capture, the new one Spark's of another (Spark's
    tables equal read's: tests/test_spark_pipeline.py), so each kill costs one Spark start, not two."""
    out, reference = tmp_path / "fleet", tmp_path / "reference"
    run(["read", str(KP), "-o", str(reference), "-q", "--summaries", "always"])  # as spark writes them
    new = spark_state(reference)
    run(["read", str(ACKS), "-o", str(out), "-q", "--summaries", "always"])
    old = spark_state(out)
    assert old["requests"] == (103, ["acks_modes.pcap"]) and new["requests"] == (46, ["kafka_python.pcap"])
    spark = ["-o", str(out), "--master", "local[1]", "-q", "--overwrite"]
    versions, inputs = {"acks": old, "kp": new}, {"acks": str(ACKS), "kp": str(KP)}
    # A whole run first: how long Spark takes from its first staged table to the commit's end.
    span = killed_while_writing(["spark", str(KP), *spark], out, None)
    assert spark_state(out) == new
    current = "kp"
    seen = []
    deadline = time.monotonic() + SPARK_BUDGET_S
    for fraction in SPARK_KILL_AT:
        if time.monotonic() > deadline:
            break
        other = "kp" if current == "acks" else "acks"
        killed_while_writing(["spark", inputs[other], *spark], out, fraction * span)
        found = spark_state(out)
        assert found in (versions[current], versions[other]), found
        seen.append("new" if found == versions[other] else "old")
        current = other if found == versions[other] else current
    print(f"spark --overwrite: {len(seen)} kills while writing, dataset after them {seen}")
    assert seen, seen
    other = "kp" if current == "acks" else "acks"
    run(["spark", inputs[other], *spark])  # a complete run after the kills
    assert spark_state(out) == versions[other]
    assert leftovers(out) == []
