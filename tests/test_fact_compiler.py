"""Equivalence test: the compiled fact extractors give exactly what the generic tree walks gave
(tests/fact_tree_walks.py, kwsniff's code before issue 11). It proves the compiler changed no answer,
not that the answers are right; the independent checks are named in fact_tree_walks.py.

Two kinds of messages: every request and response of the repository's captures, and, for every
(api key, version, direction) of the schema set, messages built from the field tree with every list
of two items and values chosen to take each branch the compiled code decides at run time (empty and
null strings, the all-zero topic id, zero and non-zero error codes, inherited topics).
"""

from __future__ import annotations

import random
import uuid
from pathlib import Path
from typing import Any

import fact_tree_walks
import pytest

from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.protocol import message_fields, schema_triples
from kwsniff.rows import ListSink
from kwsniff.rows.extract import error_rows
from kwsniff.rows.partitions import REQUEST, RESPONSE, partition_facts

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = sorted((ROOT / "tests" / "data" / "captures").glob("*.pcap")) + [
    ROOT / "sample_pcaps" / "quickstart.pcap"
]
NAMES = {str(uuid.UUID(int=7)): "named-by-id"}


def build(fields: tuple[Any, ...], rnd: random.Random) -> dict[str, Any]:
    """A decoded-message dict of this field tree, values drawn to cover the run-time branches."""
    out: dict[str, Any] = {}
    for name, kind, _versions, nullable, _tag, _default, children in fields:
        out[name] = value(kind, nullable is not None, children, rnd)
    return out


def value(kind: str, nullable: bool, children: tuple[Any, ...] | None, rnd: random.Random) -> Any:
    if nullable and rnd.random() < 0.15:
        return None
    if kind in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return rnd.choice([0, 0, 3, 59, -1])
    if kind == "bool":
        return rnd.random() < 0.5
    if kind == "float64":
        return 1.5
    if kind == "string":
        return rnd.choice(["", "orders", "payments"])
    if kind == "uuid":
        return uuid.UUID(int=rnd.choice([0, 7, 9]))
    if kind in ("bytes", "records"):
        return None if nullable else b""
    if kind == "struct":
        assert children is not None
        return build(children, rnd)
    if kind.startswith("[]"):
        count = rnd.choice([0, 2, 2])
        return [value(kind[2:], False, children, rnd) for _ in range(count)]
    raise AssertionError(kind)


@pytest.mark.parametrize("direction", ["request", "response"])
def test_every_schema_version_agrees_with_the_generic_walks(direction: str) -> None:
    checked = 0
    for api_key, version, side in schema_triples():
        if side != direction:
            continue
        fields = message_fields(api_key, version, side == "response")
        code = REQUEST if side == "request" else RESPONSE
        for seed in range(12):
            msg = build(fields, random.Random(f"{api_key}/{version}/{side}/{seed}"))
            assert partition_facts(api_key, version, code, msg) == fact_tree_walks.partition_facts(
                api_key, code, msg
            ), (api_key, version, side, seed)
            if side == "response":
                want = list(fact_tree_walks.error_rows(msg, "group-a", NAMES))
                assert error_rows(api_key, version, msg, "group-a", NAMES) == want, (api_key, version, seed)
            checked += 1
    assert checked > 12 * 350  # every version of every API (368 each way in the schema set)


@pytest.mark.parametrize("path", CAPTURES, ids=[p.name for p in CAPTURES])
def test_real_messages_agree_with_the_generic_walks(path: Path) -> None:
    sink = ListSink()
    run_capture(path, sink, SessionOptions(), keep_messages=True)
    compared = 0
    for row in sink.tables["requests"]:
        key, version = row["api_key"], row["api_version"]
        if row["request"] is not None:
            got = partition_facts(key, version, REQUEST, row["request"])
            assert got == fact_tree_walks.partition_facts(key, REQUEST, row["request"])
        if row["response"] is not None:
            got = partition_facts(key, version, RESPONSE, row["response"])
            assert got == fact_tree_walks.partition_facts(key, RESPONSE, row["response"])
            assert error_rows(key, version, row["response"]) == list(
                fact_tree_walks.error_rows(row["response"])
            )
            compared += 1
    assert compared > 20
