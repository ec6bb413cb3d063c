"""`kwsniff show` filters (--topic, --group, --min-latency, --status, --client) and --records, each
held against an independent view: tshark's inventory of the capture (`.tshark.json`: stream =
conn_id - 1, request and response times), the clients' truth files (records produced per topic, with
keys, value sizes and value hashes) and the sample capture's README (which client is in which group);
records with hostile keys and values are assembled by the test itself."""

from __future__ import annotations

import ast
import hashlib
import json
import struct
from pathlib import Path

from click.testing import CliRunner
from kafkawire import LINKTYPE_RAW_IPV4, Flow, i16, i32, i64, request, response, string, uvarint, write_pcap

from kwsniff.cli import main

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "sample_pcaps" / "quickstart.pcap"
CODECS = REPO / "tests" / "data" / "captures" / "produce_codecs.pcap"


def show(*args: str | Path) -> list[str]:
    result = CliRunner().invoke(main, ["show", *map(str, args)])
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def show_json(*args: str | Path) -> list[dict]:
    return [json.loads(line) for line in show("--json", *args)]


def exchanges(lines: list[dict]) -> set[tuple[int, int]]:
    """(tshark stream, correlation id) of each exchange shown."""
    return {(d["conn_id"] - 1, d["correlation_id"]) for d in lines}


def tshark(capture: Path) -> dict:
    return json.loads(Path(f"{capture}.tshark.json").read_text())


def tshark_requests(capture: Path) -> list[dict]:
    return tshark(capture)["requests"]


def tshark_latencies(capture: Path) -> dict[tuple[int, int], float]:
    """Per answered request, ms from the frame completing the request to the response's first
    frame (the times kwsniff's ts_request and ts_response are, docs/tables.md), in whole µs."""
    view = tshark(capture)
    answers = {(r["stream"], r["correlation_id"]): r for r in view["responses"]}
    out = {}
    for q in view["requests"]:
        a = answers.get((q["stream"], q["correlation_id"]))
        if a is not None:
            us = round(a["first_frame_time_epoch"] * 1e6) - round(q["frame_time_epoch"] * 1e6)
            out[(q["stream"], q["correlation_id"])] = us / 1000
    return out


def test_client_is_the_one_name_and_client_id_its_alias() -> None:
    by_client = show_json(SAMPLE, "--client", "qs-consumer-confluent")
    assert show_json(SAMPLE, "--client-id", "qs-consumer-confluent") == by_client
    expected = {
        (r["stream"], r["correlation_id"])
        for r in tshark_requests(SAMPLE)
        if r.get("client_id") == "qs-consumer-confluent"
    }
    assert exchanges(by_client) == expected
    assert len(expected) == 20


def test_group_keeps_the_exchanges_of_that_group() -> None:
    # sample_pcaps/README.md: `quickstart-group` is kafka-python's (FindCoordinator, JoinGroup twice,
    # SyncGroup, OffsetFetch, OffsetCommit, Heartbeat, LeaveGroup); `quickstart-audit` confluent's.
    group_apis = {10, 11, 14, 9, 8, 12, 13}  # FindCoordinator, JoinGroup, SyncGroup, OffsetFetch,
    # OffsetCommit, Heartbeat, LeaveGroup: the exchanges naming a group
    for group, client in (
        ("quickstart-group", "qs-consumer-kafka-python"),
        ("quickstart-audit", "qs-consumer-confluent"),
    ):
        expected = {
            (r["stream"], r["correlation_id"])
            for r in tshark_requests(SAMPLE)
            if r.get("client_id") == client and r["api_key"] in group_apis
        }
        assert exchanges(show_json(SAMPLE, "--group", group)) == expected, group
    assert show_json(SAMPLE, "--group", "no-such-group") == []


def test_topic_keeps_the_exchanges_naming_it_and_records_are_the_truths() -> None:
    # The truth file lists every record produced, per topic: key, value size, sha256 of the value.
    truth = json.loads(Path(f"{CODECS}.truth.json").read_text())["produced"]["records"]
    for topic in ("codec-gzip", "codec-zstd"):
        lines = show_json(CODECS, "--topic", topic, "--api", "produce", "--records")
        assert lines and all(d["api_name"] == "Produce" for d in lines)
        shown = [
            (topic, r["partition"], r["offset"], r["key"], r["value"]) for d in lines for r in d["records"]
        ]
        expected = sorted((t, p, o, k) for t, p, o, k, *_ in truth if t == topic)
        assert sorted(s[:4] for s in shown) == expected
        digests = {(t, p, o): (size, digest) for t, p, o, _, size, digest, _ in truth if t == topic}
        for _, p, o, _, value in shown:
            size, digest = digests[(topic, p, o)]
            if value is None:
                assert size is None  # a tombstone
            else:
                assert (len(value.encode()), hashlib.sha256(value.encode()).hexdigest()[:16]) == (
                    size,
                    digest,
                )


def test_topic_by_topic_id_is_named_by_metadata() -> None:
    # Fetch v16 names topics by id only (KIP-516); the consumer read every topic, so each topic's
    # filter keeps every Fetch of the consumer that returned records of it.
    fetches = show_json(CODECS, "--api", "fetch", "--topic", "codec-zstd")
    assert fetches and {d["api_version"] for d in fetches} == {16}
    assert all("name" not in t for d in fetches for t in d["request"]["topics"])


def test_tree_records_show_text_keys_and_values() -> None:
    truth = json.loads(Path(f"{CODECS}.truth.json").read_text())["produced"]["records"]
    by_offset = {(t, p, o): (k, size, digest) for t, p, o, k, size, digest, _ in truth}
    lines = show(CODECS, "--topic", "codec-none", "--api", "produce", "--records")
    records = [line for line in lines if line.startswith("    codec-none/")]
    assert len(records) == 300  # truth: 300 records produced to codec-none
    checked = 0
    for line in records:
        place, rest = line.strip().split("  key ", 1)
        topic_partition, _, offset = place.split(" ")
        partition = int(topic_partition.split("/")[1])
        key_text, value_text = rest.split("  value ", 1)
        key, size, digest = by_offset[("codec-none", partition, int(offset))]
        assert ast.literal_eval(key_text) == key
        if size is None:
            assert value_text == "null"
        elif size <= 200:  # shown whole: its text is the value
            value = ast.literal_eval(value_text)
            assert hashlib.sha256(value.encode()).hexdigest()[:16] == digest
            checked += 1
        else:
            assert value_text.endswith(f'"... ({size} bytes)')
    assert checked > 10


def test_min_latency_keeps_exchanges_at_least_that_slow() -> None:
    latencies = tshark_latencies(SAMPLE)
    ordered = sorted(set(latencies.values()))
    threshold = (ordered[-20] + ordered[-21]) / 2  # between two latencies tshark saw
    expected = {k for k, ms in latencies.items() if ms >= threshold}
    shown = show_json(SAMPLE, "--min-latency", str(threshold))
    assert exchanges(shown) == expected
    assert len(expected) >= 20


def test_status_keeps_exchanges_of_that_status() -> None:
    # tshark: one request of produce_codecs was never answered (the consumer's last Metadata).
    view = tshark(CODECS)
    answered = {(r["stream"], r["correlation_id"]) for r in view["responses"]}
    unanswered = {(r["stream"], r["correlation_id"]) for r in view["requests"]} - answered
    assert exchanges(show_json(CODECS, "--status", "unanswered")) == unanswered
    assert len(unanswered) == view["summary"]["unanswered"] == 1
    both = show_json(CODECS, "--status", "unanswered", "--status", "ok")
    assert len(both) == view["summary"]["total_requests"]


def _record(key: bytes | None, value: bytes | None, offset_delta: int) -> bytes:
    def zigzag(v: int) -> bytes:
        return uvarint((v << 1) ^ (v >> 63))

    def field(data: bytes | None) -> bytes:
        return zigzag(-1) if data is None else zigzag(len(data)) + data

    body = b"\x00" + zigzag(0) + zigzag(offset_delta) + field(key) + field(value) + zigzag(0)
    return zigzag(len(body)) + body


def _batch(records: list[tuple[bytes | None, bytes | None]]) -> bytes:
    from kafka.record.util import calc_crc32c

    data = b"".join(_record(k, v, i) for i, (k, v) in enumerate(records))
    after_crc = struct.pack(">hiqqqhii", 0, len(records) - 1, 0, 0, -1, -1, -1, len(records)) + data
    return struct.pack(">qiiBI", 0, 9 + len(after_crc), 0, 2, calc_crc32c(after_crc)) + after_crc


def test_hostile_keys_and_values_are_escaped_or_hex(tmp_path: Path) -> None:
    records = [
        (b"\x1b[31mred\x1b[0m", b"\xff\x00ab"),  # an ANSI colour key; a value that is not UTF-8
        ("caf\u00e9 \u202egnp.exe".encode(), b'say "hi"\\\n'),  # bidi override; quote, backslash, newline
        (None, b""),
    ]
    batch = _batch(records)
    body = i16(-1) + i16(1) + i32(30_000) + i32(1) + string("t") + i32(1) + i32(0) + i32(len(batch)) + batch
    answer = i32(1) + string("t") + i32(1) + i32(0) + i16(0) + i64(500) + i64(-1) + i32(0)
    flow = Flow().handshake()
    flow.send(0, request(0, 3, 1, body))
    flow.send(1, response(1, answer))
    path = write_pcap(tmp_path / "hostile.pcap", flow.packets, LINKTYPE_RAW_IPV4)
    lines = show(path, "--records")
    assert lines[-4:] == [
        "  records (3):",
        '    t/0 offset 500  key "\\x1b[31mred\\x1b[0m"  value <4 bytes> ff006162',
        '    t/0 offset 501  key "caf\u00e9 \\u202egnp.exe"  value "say \\"hi\\"\\\\\\x0a"',
        '    t/0 offset 502  key null  value ""',
    ]
    (line,) = show_json(path, "--records")
    assert line["records"] == [
        {
            "topic": "t",
            "partition": 0,
            "offset": 500,
            "key": "\x1b[31mred\x1b[0m",
            "value": {"bytes": 4, "hex": "ff006162"},
        },
        {
            "topic": "t",
            "partition": 0,
            "offset": 501,
            "key": "caf\u00e9 \u202egnp.exe",
            "value": 'say "hi"\\\n',
        },
        {"topic": "t", "partition": 0, "offset": 502, "key": None, "value": ""},
    ]
