"""No cut capture fails (issue 44): every capture of the repository, cut by `editcap -s N` (Wireshark's,
an independent tool) at every snap length from 60 to 600 bytes in steps of 4, is read to its end with
every byte accounted for: on the compiled path at every length (the Python API, in this process),
and on the pure Python one (KWSNIFF_PURE_PYTHON=1, `kwsniff read` of a capture's cuts in one process)
at every third length, which keeps the sweep within a CI budget (the pure path is four times slower).

"Read to its end" means: exit 0, no input failed, no exchange kwsniff failed to decode (its decode
error would name a stage and an exception, and its capture would say so), and the accounting line of
each cut holds (docs/accounting.md). The captures' own damage (timestamps going backwards) stays.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import kwsniff
from kwsniff.capture import CaptureError, open_capture
from kwsniff.rows.failed_exchange import is_failed_reason

ROOT = Path(__file__).resolve().parent.parent
SNAP_LENGTHS = range(60, 601, 4)
PURE_SNAP_LENGTHS = range(60, 601, 12)
PURE = {**os.environ, "KWSNIFF_PURE_PYTHON": "1"}


def readable(path: Path) -> bool:
    try:
        open_capture(path).close()
    except CaptureError:
        return False
    return True


CAPTURES = sorted(
    p
    for p in [*(ROOT / "tests" / "data").rglob("*.pcap*"), *(ROOT / "sample_pcaps").glob("*.pcap*")]
    if p.name.endswith((".pcap", ".pcapng", ".pcap.gz", ".pcapng.gz")) and readable(p)
)


def test_the_sweep_covers_the_repositorys_captures() -> None:
    names = {p.name for p in CAPTURES}
    assert {"produce_codecs.pcap", "quickstart.pcap", "java_client.pcap", "two_groups.pcap"} <= names
    assert len(CAPTURES) >= 19


def cuts(capture: Path, tmp: Path) -> list[Path]:
    out = []
    for snaplen in SNAP_LENGTHS:
        path = tmp / f"{capture.name.split('.')[0]}.s{snaplen:03d}.pcap"
        subprocess.run(
            ["editcap", "-F", "pcap", "-s", str(snaplen), str(capture), str(path)], check=True, timeout=60
        )
        out.append(path)
    return out


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.name)
def test_every_snap_length_from_60_to_600_reads_to_the_end_with_every_byte_accounted_for(
    capture: Path, tmp_path: Path
) -> None:
    paths = cuts(capture, tmp_path)
    names = [p.name for p in paths]

    tables = kwsniff.read(paths)
    statuses = {r["capture"]: (r["status"], r["reason"]) for r in tables["captures"].to_pylist()}
    assert sorted(statuses) == names
    assert [n for n, (status, _) in statuses.items() if status == "failed"] == []
    assert [w for w in tables.warnings if "not decoded" in w] == []
    for name in names:
        summary = tables.summary[name]
        assert summary["accounting"].endswith("✓"), (name, summary["accounting"])
        assert not [r for r in summary["decode_errors"] if is_failed_reason(r)], (
            name,
            summary["decode_errors"],
        )

    pure_paths = [p for p, n in zip(paths, SNAP_LENGTHS, strict=True) if n in PURE_SNAP_LENGTHS]
    out = tmp_path / "pure"
    done = subprocess.run(
        [sys.executable, "-m", "kwsniff", "read", *map(str, pure_paths), "--out", str(out)],
        env=PURE,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stderr.splitlines() if ": failed: " in line or "not decoded" in line] == []
    accounting = [line.strip() for line in done.stdout.splitlines() if line.strip().startswith("accounting:")]
    assert len(accounting) == len(pure_paths) and all(line.endswith("✓") for line in accounting)
    # Both paths say the same of each cut, and of each request's status.
    rows = pq.read_table(out / "captures").to_pylist()
    assert {r["capture"]: (r["status"], r["reason"]) for r in rows} == {
        p.name: statuses[p.name] for p in pure_paths
    }
    pure = pq.read_table(out / "requests", columns=["capture", "status"]).to_pylist()
    kept = {p.name for p in pure_paths}
    compiled = [
        r for r in tables["requests"].select(["capture", "status"]).to_pylist() if r["capture"] in kept
    ]
    assert sorted((r["capture"], r["status"]) for r in pure) == sorted(
        (r["capture"], r["status"]) for r in compiled
    )
