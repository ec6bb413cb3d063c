"""Run every fuzz target for a bounded time: ``python fuzz/run.py --seconds 20``.

Each target runs in its own subprocess (libFuzzer's -max_total_time) over a scratch copy of its seed
corpus, so the committed corpus never changes; ``--jobs N`` runs N targets at a time (one core each:
each still gets its whole time). Prints executions per target; exits 1 if any target
found a crash, a hang or a memory blow-up, naming the saved input (replay it with
``python fuzz/target.py NAME FILE``).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from targets import MAX_LEN, TARGETS  # noqa: E402

_DONE = re.compile(rb"stat::number_of_executed_units: (\d+)")
# An input slower than this is a hang; more memory than this is a finding (DESIGN rule 3).
TIMEOUT_S = 10
RSS_LIMIT_MB = 1024


def run_target(name: str, seconds: int, artifacts: Path) -> tuple[bool, int, str]:
    """(clean, executions, last lines of output) for one target."""
    scratch = Path(tempfile.mkdtemp(prefix=f"kwsniff-fuzz-{name}-"))
    command = [
        sys.executable,
        str(HERE / "target.py"),
        name,
        f"-max_total_time={seconds}",
        f"-max_len={MAX_LEN[name]}",
        f"-timeout={TIMEOUT_S}",
        f"-rss_limit_mb={RSS_LIMIT_MB}",
        f"-artifact_prefix={artifacts}/{name}-",
        "-print_final_stats=1",
        str(scratch),  # new inputs land in the first directory: keep them out of the repository
        str(HERE / "corpus" / name),
    ]
    proc = subprocess.run(command, capture_output=True, timeout=seconds * 3 + 120)
    output = proc.stdout + proc.stderr
    done = _DONE.search(output)
    executions = int(done.group(1)) if done else 0
    tail = "\n".join(output.decode(errors="replace").splitlines()[-25:])
    return proc.returncode == 0 and done is not None, executions, tail


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=20, help="fuzzing time per target")
    parser.add_argument("--target", action="append", choices=sorted(TARGETS), help="only these (repeatable)")
    parser.add_argument("--artifacts", type=Path, help="where crashing inputs go (default: a temp dir)")
    parser.add_argument("--jobs", type=int, default=1, help="targets run at a time (give each a core)")
    args = parser.parse_args()
    artifacts = args.artifacts or Path(tempfile.mkdtemp(prefix="kwsniff-fuzz-findings-"))
    artifacts.mkdir(parents=True, exist_ok=True)
    failed = []
    names = args.target or list(TARGETS)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = pool.map(lambda name: run_target(name, args.seconds, artifacts), names)
    for name, (clean, executions, tail) in zip(names, results, strict=True):
        print(f"{name:10} {executions:>10,} executions in {args.seconds} s  {'ok' if clean else 'FINDING'}")
        if not clean:
            failed.append(name)
            print(tail, file=sys.stderr)
    if failed:
        print(f"findings in {', '.join(failed)}: inputs saved under {artifacts}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
