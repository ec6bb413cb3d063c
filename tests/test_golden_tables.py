"""Every table of every repository capture has the same content as the golden reference.

The reference (tests/data/golden/tables.json) holds, per capture and per read mode (default, and
`--record-payloads`), each table's row count and a sha256 over its canonical rows, as read back from
the Parquet files. It guards changes meant to be pure speed (issue 11): they must not change one
value. A change that is meant to alter table content (a new status, a stricter Kafka detection...)
regenerates the reference with one command and commits it with the change:

    python tools/golden_tables.py            # rewrite tests/data/golden/tables.json
    python tools/golden_tables.py --check    # list the tables that differ

Only the columns recorded in the reference are hashed, so adding a column needs no regeneration.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import golden_tables  # noqa: E402


def test_reference_covers_every_capture_and_real_rows() -> None:
    expected = json.loads(golden_tables.GOLDEN.read_text())
    assert sorted(expected["tables"]) == sorted(p.name for p in golden_tables.captures())
    codecs = expected["tables"]["produce_codecs.pcap"]
    # The reference is of real content, not of empty tables.
    assert codecs["plain"]["requests"][0] > 100
    assert codecs["plain"]["partitions"][0] > 100
    assert codecs["record_payloads"]["records"][0] >= 300 * 5 * 2


def test_tables_equal_the_golden_reference() -> None:
    expected = json.loads(golden_tables.GOLDEN.read_text())
    got = golden_tables.digests(expected["columns"])
    assert golden_tables.differences(expected, got) == []
