"""counts_v2 (batch headers only, the tables' fast path) agrees with summarize_records.

On every records field of the repository's captures, whole, cut at many points (Fetch responses
stop inside a batch, KIP-74) and with a flipped byte (CRC errors): wherever counts_v2 answers, its
counts equal summarize_records'; it declines (None) only on what is not plain magic 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.records import counts_v2, summarize_records
from kwsniff.rows import ListSink

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = sorted((ROOT / "tests" / "data" / "captures").glob("*.pcap"))


def records_fields(node: Any) -> list[bytes]:
    """Every non-empty `records` value in a decoded message."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "records" and isinstance(value, bytes) and value:
                found.append(value)
            else:
                found += records_fields(value)
    elif isinstance(node, list):
        for item in node:
            found += records_fields(item)
    return found


def summary_counts(data: bytes) -> tuple[Any, ...]:
    s = summarize_records(data)
    return (
        s.record_count,
        s.record_bytes,
        s.batch_count,
        s.compression,
        s.crc_errors,
        s.partial_bytes,
        s.control_batches,
        s.base_offset,
        s.last_offset,
    )


@pytest.mark.parametrize("path", CAPTURES, ids=[p.name for p in CAPTURES])
def test_counts_from_headers_equal_the_full_reader(path: Path) -> None:
    sink = ListSink()
    run_capture(path, sink, SessionOptions(), keep_messages=True)
    fields = [f for row in sink.tables["requests"] for f in records_fields([row["request"], row["response"]])]
    assert fields
    answered = declined = 0
    for data in fields:
        variants = [data, data[:-1], data[: len(data) // 2], data[:16], data[:17], data[:70]]
        flipped = bytearray(data)
        flipped[-1] ^= 0xFF
        variants.append(bytes(flipped))
        for variant in variants:
            counts = counts_v2(variant)
            if counts is None:
                declined += 1
                assert summarize_records(variant).magic != 2 or summarize_records(variant).errors
                continue
            answered += 1
            assert counts == summary_counts(variant)
            assert not summarize_records(variant).errors and not summarize_records(variant).capped_batches
    assert answered > 0
    if path.name == "legacy_msgset.pcap":
        assert declined > 0  # magic 0/1 message sets go to the full reader
