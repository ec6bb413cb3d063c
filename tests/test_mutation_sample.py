"""CI's choice of mutations (tools/mutation_sample.py, used by `--ci` of tools/mutate_report.py and
tools/mutate_columns.py): a sample drawn with the commit's hash, the same for a commit and another for
the next; three times as large, the changed code's own mutations first, when a watched file changed
since HEAD~1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
from mutation_sample import ci_choice  # noqa: E402

EVERYTHING = [f"m{i}" for i in range(40)]
WATCHED = ("pkg/report",)


# Fixed names and dates: the same commits, hence the same hashes and samples, on every run.
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
}


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    done = subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip()


def commit(repo: Path, path: str, text: str) -> str:
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(text)
    git(repo, "add", path)
    git(repo, "commit", "-q", "-m", path)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    git(tmp_path, "init", "-q")
    commit(tmp_path, "pkg/report/sql.py", "SELECT 1\n")
    return tmp_path


def test_a_commit_outside_the_watched_paths_draws_the_same_sample_each_time_and_the_next_another(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    head = commit(repo, "docs/page.md", "one\n")
    first = ci_choice(EVERYTHING, 5, WATCHED, "tool", repo)
    assert first == ci_choice(EVERYTHING, 5, WATCHED, "tool", repo)
    assert len(first) == 5 and len(set(first)) == 5
    assert first == sorted(first, key=EVERYTHING.index)  # in the list's order
    commit(repo, "docs/page.md", "two\n")
    assert ci_choice(EVERYTHING, 5, WATCHED, "tool", repo) != first
    assert capsys.readouterr().out.splitlines()[0] == (
        f"tool: 5 of 40 mutations, seed {head[:12]} (pkg/report unchanged since HEAD~1)"
    )


def test_a_watched_file_changed_by_the_last_commit_or_the_work_tree_triples_the_sample_its_own_first(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def touches(m: str, files: list[str]) -> bool:  # m0..m3 check pkg/report/sql.py
        return m in ("m0", "m1", "m2", "m3") and "pkg/report/sql.py" in files

    commit(repo, "pkg/report/sql.py", "SELECT 2\n")
    chosen = ci_choice(EVERYTHING, 5, WATCHED, "tool", repo, touches)
    assert len(chosen) == 15 and chosen[:4] == ["m0", "m1", "m2", "m3"]
    commit(repo, "docs/page.md", "one\n")
    assert len(ci_choice(EVERYTHING, 5, WATCHED, "tool", repo, touches)) == 5
    (repo / "pkg/report/new.py").write_text("SELECT 3\n")  # untracked: the sample tripled
    chosen = ci_choice(EVERYTHING, 5, WATCHED, "tool", repo, touches)
    assert len(chosen) == 15
    assert (
        capsys.readouterr()
        .out.splitlines()[-1]
        .startswith("tool: 15 of 40 mutations (0 of the changed code's own), seed ")
    )


def test_without_a_parent_commit_the_sample_is_made_and_stderr_says_why(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert len(ci_choice(EVERYTHING, 5, WATCHED, "tool", repo)) == 5
    err = capsys.readouterr().err
    assert err.startswith("tool: no HEAD~1 to compare with (a shallow clone?)")
