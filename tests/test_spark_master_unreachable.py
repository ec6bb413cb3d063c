"""A standalone master nobody answers at: `kwsniff spark` and `kwsniff report --master` say so in one
line and exit 1, at once, where Spark would retry its registration for over a minute and end in a
Java stack trace."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.realparts import free_port

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "sample_pcaps" / "quickstart.pcap"


@pytest.mark.parametrize("command", ["spark", "report"])
def test_a_spark_master_nobody_answers_at_is_one_error_line(command: str, tmp_path: Path) -> None:
    master = f"spark://127.0.0.1:{free_port()}"  # free: nothing listens there
    if command == "spark":
        args = ["spark", str(QUICKSTART), "--out", str(tmp_path / "out"), "--master", master]
    else:
        read = [sys.executable, "-m", "kwsniff", "read", "-q", str(QUICKSTART), "--out", str(tmp_path / "t")]
        subprocess.run(read, check=True, timeout=120)
        args = ["report", str(tmp_path / "t"), "--master", master]
    run = subprocess.run(
        [sys.executable, "-m", "kwsniff", *args], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 1
    assert run.stderr.splitlines() == [
        f"kwsniff: error: --master {master}: no Spark master answers ({master[8:]}: Connection refused)"
    ]
    # Nothing written, nothing staged beside --out.
    assert sorted(p.name for p in tmp_path.iterdir()) == ([] if command == "spark" else ["t"])
