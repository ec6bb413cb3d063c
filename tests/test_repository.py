"""The repository is self-contained (issue 10, item 6): a clean clone needs nothing beside it, and the
README's commands work as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
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


def quick_start() -> list[str]:
    """The README's Quick start commands: the lines of the first ```sh block after the heading."""
    block = README.split("## Quick start", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return block.strip().splitlines()


def test_the_quick_start_is_two_one_line_commands_and_ci_runs_the_second_verbatim() -> None:
    commands = quick_start()
    assert commands == [
        "python3 -m venv .venv && .venv/bin/pip install . && "
        ".venv/bin/kwsniff read sample_pcaps/quickstart.pcap --out kafka-tables --overwrite",
        "./tools/install-test-deps.sh && .venv/bin/python -m pytest -q",
    ]
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    marker = ci.index("# The README's test command (Quick start, second command), verbatim:")
    assert ci[marker + 1] == commands[1]


def test_the_development_lint_command_passes_as_written() -> None:
    page = (REPO / "docs" / "development.md").read_text(encoding="utf-8")
    match = re.search(r"^- Lint and types: `([^`]+)`", page, re.MULTILINE)
    assert match is not None
    assert match[1] == "ruff check . && ruff format --check . && mypy"
    # As in an activated venv: the tools beside the interpreter running the tests come first.
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    proc = subprocess.run(
        ["bash", "-c", match[1]],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PATH": path},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# Pages written by changes made alongside this README (issue 24), linked before they land.
# At merge, once they exist, this set can be emptied.
PAGES_OF_PARALLEL_CHANGES = {
    "docs/datasets.md",
}


def test_every_docs_link_names_a_page_in_docs() -> None:
    pages = {"README.md": README} | {
        f"docs/{p.name}": p.read_text(encoding="utf-8") for p in (REPO / "docs").glob("*.md")
    }
    broken = sorted(
        (page, target)
        for page, text in pages.items()
        for target in re.findall(r"\]\(([^)#:]+\.md)", text)
        if (name := target if page == "README.md" else f"docs/{target}") not in PAGES_OF_PARALLEL_CHANGES
        and not (REPO / name).is_file()
    )
    assert broken == []
    assert "docs/summary.md" in re.findall(r"\]\((docs/[^)#]+)", README)


def test_the_readme_is_a_short_guide() -> None:
    assert len(README.splitlines()) <= 200


# A day (2026-11-27), but not a timestamp in an example (2026-11-22T17:39:30) nor a partition
# folder (date=2024-05-01).
DATED = re.compile(r"(?<!date=)\b20\d\d-[01]\d-[0-3]\d\b(?!T)")


def test_user_pages_say_what_is_true_now_and_dated_figures_live_in_the_benchmark_history() -> None:
    pages = {"README.md": README} | {
        f"docs/{p.name}": p.read_text(encoding="utf-8")
        for p in (REPO / "docs").glob("*.md")
        if p.name != "benchmark-history.md"
    }
    dated = sorted((page, m[0]) for page, text in pages.items() for m in DATED.finditer(text))
    assert dated == []
    assert DATED.findall((REPO / "docs" / "benchmark-history.md").read_text(encoding="utf-8"))
