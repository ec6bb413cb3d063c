"""The repository is self-contained (issue 10, item 6): a clean clone needs nothing beside it, and the
README's commands work as written."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")


def tracked_files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True, timeout=30
    )
    return out.stdout.splitlines()


def test_no_tracked_file_reads_from_beside_the_repository() -> None:
    outside = re.compile(r"\.\./shared|parent\s*/\s*\"shared\"")
    found = [
        name
        for name in tracked_files()
        # Code, configuration and the README; docs/DESIGN.md names ../shared as where things came from.
        if (name.endswith((".py", ".sh", ".toml", ".cfg", "/run")) or name == "README.md")
        and name != "tests/test_repository.py"  # the pattern itself
        and (REPO / name).is_file()
        and outside.search((REPO / name).read_text(encoding="utf-8", errors="replace"))
    ]
    assert found == []


def test_the_kafka_specs_and_design_notes_are_kept_with_their_source_notes() -> None:
    files = set(tracked_files())
    for folder in ("tools/kafka-message-specs", "tools/kafka-message-specs-latest"):
        assert {f"{folder}/SOURCE.txt", f"{folder}/LICENSE", f"{folder}/NOTICE"} <= files
    assert sum(f.startswith("tools/kafka-message-specs/") and f.endswith(".json") for f in files) == 186
    assert (
        sum(f.startswith("tools/kafka-message-specs-latest/") and f.endswith(".json") for f in files) == 203
    )
    assert "docs/DESIGN.md" in files


def test_the_readme_lint_command_passes_as_written() -> None:
    match = re.search(r"^- Lint and types: `([^`]+)`", README, re.MULTILINE)
    assert match is not None
    assert match[1] == "ruff check . && ruff format --check . && mypy"
    proc = subprocess.run(["bash", "-c", match[1]], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
