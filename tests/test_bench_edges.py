"""bench/bench_capture.py at its edges (issue 24): a missing tool is one line naming it and what to
install, before any network namespace is made, so none is left behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10, check=True)
    return sorted(line.split()[0] for line in out.stdout.splitlines() if line.strip())


def test_bench_capture_without_ethtool_says_so_in_one_line_and_leaves_no_namespace(tmp_path: Path) -> None:
    # A PATH holding ip and tcpdump but no ethtool, whether or not the machine has it.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("ip", "tcpdump"):
        found = shutil.which(tool, path=SYSTEM_PATH)
        assert found is not None, tool  # tools/install-test-deps.sh installs both
        (bin_dir / tool).symlink_to(found)
    before = namespaces()
    done = subprocess.run(
        [sys.executable, "bench/bench_capture.py", "--seconds", "1", "--rate", "1"],
        cwd=REPO,
        env={**os.environ, "PATH": str(bin_dir)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        "bench_capture: ethtool missing: install with `apt-get install ethtool` "
        "(tools/install-test-deps.sh does)\n",
    )
    assert namespaces() == before
