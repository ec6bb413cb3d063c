"""Which mutations a CI run makes (`--ci` of tools/mutate_report.py and tools/mutate_columns.py).

A sample that fits CI's time, drawn with the commit's hash as seed: the same commit always draws the
same mutations, and successive commits draw others, so the whole set is covered over a series of
commits. When the code a tool checks changed, the sample is three times as large and takes the
changed files' own mutations first (all of them, where they fit).

"Changed" is the work tree (uncommitted and untracked files included) against HEAD's first parent,
`git diff --name-only HEAD~1`: on a fresh clone, what the last commit (for a merge, what the merge
brought into the main line) changed. Without that parent (a clone made with `--depth 1`, the first
commit, no git) nothing can be compared: the run says so on stderr and makes the sample, so clone
CI's checkout with a depth of 2 or more.
"""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def _git(repo: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def changed(watched: Sequence[str], repo: Path = REPO) -> list[str] | None:
    """The files under ``watched`` (repository paths) that differ from HEAD~1's, or None when there
    is no HEAD~1 to compare with."""
    if _git(repo, "rev-parse", "--verify", "--quiet", "HEAD~1^{commit}") is None:
        return None
    diff = _git(repo, "diff", "--name-only", "HEAD~1", "--", *watched)
    untracked = _git(repo, "ls-files", "--others", "--exclude-standard", "--", *watched)
    if diff is None or untracked is None:
        return None
    return sorted(set(diff.split()) | set(untracked.split()))


def seed(repo: Path = REPO) -> str:
    """HEAD's commit hash (a fixed word outside a git checkout)."""
    head = _git(repo, "rev-parse", "HEAD")
    return head.strip() if head else "no-commit"


# A change to the checked code triples the sample, its own mutations first: every mutation takes
# about 33 minutes (report) and 19 (columns) on a 2-core machine, more than CI's whole budget, so the
# full set is a command of its own (docs/test-oracles.md), and CI covers it over a series of commits.
CHANGED_FACTOR = 3


def ci_choice(
    everything: Sequence[T],
    size: int,
    watched: Sequence[str],
    tool: str,
    repo: Path = REPO,
    touches: Callable[[T, list[str]], bool] | None = None,
) -> list[T]:
    """``size`` of ``everything`` drawn with the commit as seed (in ``everything``'s order); when a
    file under ``watched`` changed, ``CHANGED_FACTOR`` times as many, those that ``touches`` a
    changed file first. Says which on stdout."""
    files = changed(watched, repo)
    commit = seed(repo)
    draw = random.Random(commit)
    if files:
        size *= CHANGED_FACTOR
        own = [i for i, m in enumerate(everything) if touches is not None and touches(m, files)]
        others = [i for i in range(len(everything)) if i not in set(own)]
        picked = set(draw.sample(own, min(size, len(own))))
        picked |= set(draw.sample(others, min(size - len(picked), len(others))))
        shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
        print(
            f"{tool}: {len(picked)} of {len(everything)} mutations ({min(len(own), size)} of the changed"
            f" code's own), seed {commit[:12]}: changed since HEAD~1: {shown}",
            flush=True,
        )
        return [m for i, m in enumerate(everything) if i in picked]
    why = f"{' and '.join(watched)} unchanged since HEAD~1"
    if files is None:
        why = "no HEAD~1 to compare with"
        print(
            f"{tool}: no HEAD~1 to compare with (a shallow clone?): cannot tell whether "
            f"{' or '.join(watched)} changed, so the sample only",
            file=sys.stderr,
            flush=True,
        )
    picked = set(draw.sample(range(len(everything)), min(size, len(everything))))
    print(f"{tool}: {len(picked)} of {len(everything)} mutations, seed {commit[:12]} ({why})", flush=True)
    return [m for i, m in enumerate(everything) if i in picked]
