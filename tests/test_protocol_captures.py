"""Every request and response body in the real captures decodes without a DecodeError."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

from kwsniff.protocol import decode_request, decode_response

REPO = Path(__file__).resolve().parent.parent
CAPTURES = sorted((REPO / "tests" / "data" / "captures").glob("*.pcap"))


def _bench() -> ModuleType:
    # The bench's tiny standalone pcap/TCP loop; the project's reader lives elsewhere.
    spec = importlib.util.spec_from_file_location("bench_decode", REPO / "bench" / "bench_decode.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_decode"] = module
    spec.loader.exec_module(module)
    return module


kafka_messages = _bench().kafka_messages


@pytest.mark.parametrize("capture", CAPTURES, ids=[path.name for path in CAPTURES])
def test_every_body_in_capture_decodes(capture: Path) -> None:
    messages = kafka_messages(capture)
    assert len(messages) > 20
    for direction, key, version, body in messages:
        decode = decode_request if direction == "request" else decode_response
        assert isinstance(decode(key, version, body), dict)


def test_captures_cover_the_expected_apis() -> None:
    seen = Counter((key, direction) for path in CAPTURES for direction, key, _v, _b in kafka_messages(path))
    for key in (0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 18, 19, 22):
        assert seen[(key, "request")] > 0 and seen[(key, "response")] > 0, key


def test_produce_request_from_capture_decodes_to_expected_shape() -> None:
    messages = kafka_messages(REPO / "tests" / "data" / "captures" / "kafka_python.pcap")
    direction, key, version, body = next(m for m in messages if m[0] == "request" and m[1] == 0)
    produce = decode_request(key, version, body)
    assert produce["acks"] == -1
    partition = produce["topic_data"][0]["partition_data"][0]
    assert isinstance(partition["records"], bytes) and len(partition["records"]) > 61
    assert partition["records"][16] == 2  # record batch magic v2
