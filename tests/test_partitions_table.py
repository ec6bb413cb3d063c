"""The `partitions` table and `requests` record totals: real captures against what their clients were
told (the .truth.json next to each capture), and hand-built exchanges for the per-API fields."""

from __future__ import annotations

import json
import struct
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from kafkawire import LINKTYPE_RAW_IPV4, Flow, uvarint
from test_records_oracle import GZIP, build_v2

from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import Session, SessionOptions
from kwsniff.protocol import _schema
from kwsniff.rows import ListSink
from kwsniff.rows.partitions import TopicNames

CAPTURES = Path(__file__).parent / "data" / "captures"
NAMES = ("acks_modes", "kafka_python", "legacy_msgset", "produce_codecs")
PRODUCE, FETCH, LIST_OFFSETS, METADATA, OFFSET_COMMIT, OFFSET_FETCH = 0, 1, 2, 3, 8, 9
DELETE_RECORDS, OFFSET_FOR_LEADER_EPOCH = 21, 23


@pytest.fixture(scope="module")
def captures() -> dict[str, tuple[ListSink, dict[str, Any]]]:
    out = {}
    for name in NAMES:
        sink = ListSink()
        run_capture(CAPTURES / f"{name}.pcap", sink, SessionOptions())
        out[name] = sink, json.loads((CAPTURES / f"{name}.pcap.truth.json").read_text())
    return out


def acknowledged(truth: dict[str, Any]) -> dict[tuple[str, int], int]:
    """Records per topic-partition the broker acknowledged with an offset (acks=0 ones have none)."""
    return {
        (topic, int(p)): v["count"]
        for topic, parts in truth["produced"]["per_partition"].items()
        for p, v in parts.items()
        if v["first_offset"] is not None and v["last_offset"] is not None
    }


def sums(rows: list[dict[str, Any]], api_key: int, **where: Any) -> dict[tuple[str, int], int]:
    out: Counter[tuple[str, int]] = Counter()
    for r in rows:
        if r["api_key"] == api_key and all(r.get(k) == v for k, v in where.items()):
            out[r["topic"], r["partition"]] += r["record_count"]
    return dict(out)


# -- real captures ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_acknowledged_produce_records_equal_the_truth_per_topic_partition(
    captures: dict[str, tuple[ListSink, dict[str, Any]]], name: str
) -> None:
    sink, truth = captures[name]
    ours = sums(sink.tables["partitions"], PRODUCE, error_code=0)
    expected = acknowledged(truth)
    assert {k: ours[k] for k in expected} == expected
    # Anything else answered with error 0 is what the client sent with acks=0 (tansu answers those).
    assert set(ours) - set(expected) == {
        (t, int(p))
        for t, parts in truth["produced"]["per_partition"].items()
        for p, v in parts.items()
        if v["first_offset"] is None
    }


def test_produce_rows_carry_the_broker_assigned_offset_range(
    captures: dict[str, tuple[ListSink, dict[str, Any]]],
) -> None:
    sink, truth = captures["produce_codecs"]
    ranges: dict[tuple[str, int], list[int]] = defaultdict(list)
    for r in sink.tables["partitions"]:
        if r["api_key"] == PRODUCE:
            assert r["last_offset"] - r["first_offset"] + 1 == r["record_count"]
            assert r["first_offset"] == r["base_offset"]
            ranges[r["topic"], r["partition"]] += range(r["first_offset"], r["last_offset"] + 1)
    for topic, parts in truth["produced"]["per_partition"].items():
        for p, v in parts.items():
            assert sorted(ranges[topic, int(p)]) == list(range(v["first_offset"], v["last_offset"] + 1))


def test_every_codec_is_decoded_with_the_truths_counts(
    captures: dict[str, tuple[ListSink, dict[str, Any]]],
) -> None:
    sink, truth = captures["produce_codecs"]
    rows = sink.tables["partitions"]
    for api_key in (PRODUCE, FETCH):
        with_records = [r for r in rows if r["api_key"] == api_key and r["record_count"]]
        assert {r["topic"]: r["compression"] for r in with_records} == {
            f"codec-{c}": c for c in ("none", "gzip", "snappy", "lz4", "zstd")
        }
        assert {
            (r["crc_errors"], r["record_errors"], r["capped_batches"], r["partial_bytes"])
            for r in with_records
        } == {(0, 0, 0, 0)}
        per_topic = Counter[str]()
        for (topic, _), n in sums(rows, api_key).items():
            per_topic[topic] += n
        assert per_topic == {f"codec-{c}": 300 for c in ("none", "gzip", "snappy", "lz4", "zstd")}
    assert sums(rows, PRODUCE, error_code=0) == acknowledged(truth)


def test_legacy_message_sets_are_counted_and_their_rejection_recorded(
    captures: dict[str, tuple[ListSink, dict[str, Any]]],
) -> None:
    # kafka-python forced to Produce v2 (gzip-wrapped magic 1) and v1 (magic 0), one record each;
    # tansu cannot read them and answers UNKNOWN_PRODUCER_ID (the truth's legacy_attempts).
    sink, truth = captures["legacy_msgset"]
    legacy = [
        (r["api_version"], r["record_count"], r["batch_count"], r["compression"], r["error_name"])
        for r in sink.tables["partitions"]
        if r["api_key"] == PRODUCE and r["api_version"] < 3
    ]
    assert legacy == [(2, 1, 1, "gzip", "UNKNOWN_PRODUCER_ID"), (1, 1, 1, "none", "UNKNOWN_PRODUCER_ID")]
    assert [a["result"] for a in truth["legacy_attempts"]] == ["failed: UnknownProducerIdError(None)"] * 2


@pytest.mark.parametrize("name", ["kafka_python", "legacy_msgset", "produce_codecs"])
def test_fetch_rows_count_what_the_consumer_received(
    captures: dict[str, tuple[ListSink, dict[str, Any]]], name: str
) -> None:
    sink, truth = captures[name]
    rows = [r for r in sink.tables["partitions"] if r["api_key"] == FETCH]
    consumed = {
        (t, int(p)): (v["count"], v["first_offset"], v["last_offset"])
        for t, parts in truth["consumed"]["per_partition"].items()
        for p, v in parts.items()
    }
    got = {}
    for key, n in sums(rows, FETCH).items():
        carrying = [r for r in rows if (r["topic"], r["partition"]) == key and r["record_count"]]
        got[key] = (n, min(r["first_offset"] for r in carrying), max(r["last_offset"] for r in carrying))
    assert got == consumed
    assert all(r["lag"] == r["high_watermark"] - r["fetch_offset"] for r in rows)


def test_request_record_totals_sum_their_partitions(
    captures: dict[str, tuple[ListSink, dict[str, Any]]],
) -> None:
    totals = {}
    for name, (sink, _) in captures.items():
        by_exchange: Counter[tuple[int, int]] = Counter()
        for p in sink.tables["partitions"]:
            if p["api_key"] in (PRODUCE, FETCH):
                by_exchange[p["conn_id"], p["correlation_id"]] += p["record_count"]
        per_api: Counter[str] = Counter()
        for r in sink.tables["requests"]:
            if r["api_key"] in (PRODUCE, FETCH):
                assert r["record_count"] == by_exchange[r["conn_id"], r["correlation_id"]]
                per_api[r["api_name"]] += r["record_count"]
            else:
                assert r["record_count"] is None
        totals[name] = dict(per_api)
    assert totals == {
        "acks_modes": {"Produce": 800},
        "kafka_python": {"Produce": 400, "Fetch": 400},
        "legacy_msgset": {"Produce": 22, "Fetch": 20},
        "produce_codecs": {"Produce": 1500, "Fetch": 1500},
    }


@pytest.mark.parametrize("name", ["kafka_python", "produce_codecs"])
def test_request_record_counts_equal_what_the_clients_sent_and_read(
    captures: dict[str, tuple[ListSink, dict[str, Any]]], name: str
) -> None:
    """Each record produced once (no retries in these runs) and each consumed once (one Fetch each)."""
    sink, truth = captures[name]
    rows = sink.tables["requests"]
    assert sum(r["record_count"] for r in rows if r["api_key"] == PRODUCE) == truth["produced"]["total"]
    assert sum(r["record_count"] for r in rows if r["api_key"] == FETCH) == truth["consumed"]["total"]


def test_record_bytes_are_the_sizes_of_the_record_sets_sent() -> None:
    """record_bytes is the size of each partition's records field as the client wrote it (batches built
    by kafka-python's DefaultRecordBatchBuilder); a request's is the sum over its partitions."""
    gzip, plain = build_v2(RECORDS, GZIP), build_v2(RECORDS[:1])
    produce = {
        "acks": -1,
        "topic_data": [
            {
                "name": "orders",
                "partition_data": [{"index": 0, "records": gzip}, {"index": 1, "records": plain}],
            }
        ],
    }
    answer = {
        "responses": [
            {
                "name": "orders",
                "partition_responses": [{"index": 0, "base_offset": 10}, {"index": 1, "base_offset": 4}],
            }
        ]
    }
    sink = run([(PRODUCE, 9, produce, answer)])
    assert columns(sink, "partition", "record_count", "record_bytes", "batch_count", "compression") == [
        (0, 3, len(gzip), 1, "gzip"),
        (1, 1, len(plain), 1, "none"),
    ]
    assert columns(sink, "record_count", "record_bytes", table="requests") == [(4, len(gzip) + len(plain))]


def test_acks_0_produce_requests_give_partitions_rows(
    captures: dict[str, tuple[ListSink, dict[str, Any]]],
) -> None:
    sink, _ = captures["acks_modes"]
    acks0 = {(r["conn_id"], r["correlation_id"]) for r in sink.tables["requests"] if r["acks"] == 0}
    rows = [r for r in sink.tables["partitions"] if (r["conn_id"], r["correlation_id"]) in acks0]
    assert len(acks0) == 20
    assert {r["topic"] for r in rows} == {"acks-0"}
    assert sums(rows, PRODUCE) == {("acks-0", 0): 100, ("acks-0", 1): 100}


def test_offset_commits_carry_the_groups_committed_offsets(
    captures: dict[str, tuple[ListSink, dict[str, Any]]],
) -> None:
    for name in ("kafka_python", "produce_codecs"):
        sink, truth = captures[name]
        commits = {
            f"{r['topic']}/{r['partition']}": r["committed_offset"]
            for r in sink.tables["partitions"]
            if r["api_key"] == OFFSET_COMMIT and r["error_code"] == 0
        }
        assert commits == truth["consumer_group"]["committed_offsets"]
        groups = {
            r["group_id"] for r in sink.tables["partitions"] if r["api_key"] in (OFFSET_COMMIT, OFFSET_FETCH)
        }
        assert groups == {truth["consumer_group"]["group"]}


def test_fetch_v13_topic_ids_are_named_from_metadata(
    captures: dict[str, tuple[ListSink, dict[str, Any]]],
) -> None:
    sink, _ = captures["produce_codecs"]
    names = {
        r["topic_id"]: r["topic"]
        for r in sink.tables["partitions"]
        if r["api_key"] == METADATA and r["topic_id"]
    }
    fetches = [r for r in sink.tables["partitions"] if r["api_key"] == FETCH]
    assert {r["api_version"] for r in fetches} == {16}
    assert {(r["topic_id"], r["topic"]) for r in fetches} == set(names.items())
    assert len(names) == 5


# -- hand-built exchanges --------------------------------------------------------------------------
# A small encoder over kwsniff's own schema set: the decoder is proven against kio and kafka-python
# elsewhere, so here it only has to produce bytes that decode to the values given.


_INTS = {"int8": ">b", "int16": ">h", "int32": ">i", "int64": ">q", "uint16": ">H", "uint32": ">I"}


def _length(n: int | None, flexible: bool, fmt: str = ">i") -> bytes:
    if flexible:
        return uvarint(0 if n is None else n + 1)
    return struct.pack(fmt, -1 if n is None else n)


def _value(typ: str, v: Any, version: int, flexible: bool, children: Any) -> bytes:
    if typ in _INTS:
        return struct.pack(_INTS[typ], v)
    if typ == "bool":
        return b"\x01" if v else b"\x00"
    if typ == "uuid":
        return uuid.UUID(str(v)).bytes
    if typ == "string":
        raw = None if v is None else v.encode()
        return _length(None if raw is None else len(raw), flexible, ">h") + (raw or b"")
    if typ in ("bytes", "records"):
        return _length(None if v is None else len(v), flexible) + (v or b"")
    if typ == "struct":
        return _fields(children, version, flexible, v or {})
    if typ.startswith("[]"):
        if v is None:
            return _length(None, flexible)
        items = [_value(typ[2:], item, version, flexible, children) for item in v]
        return _length(len(items), flexible) + b"".join(items)
    raise AssertionError(typ)


def _fields(fields: Any, version: int, flexible: bool, values: dict[str, Any]) -> bytes:
    out = bytearray()
    for name, typ, (lo, hi), _nullable, tag, default, children in fields:
        if lo <= version <= hi and not (flexible and tag is not None):
            value = values.get(name, default)
            out += _value(typ, {} if value == () and typ == "struct" else value, version, flexible, children)
    if flexible:
        out += b"\x00"  # no tagged fields
    return bytes(out)


def body(api_key: int, version: int, side: int, values: dict[str, Any]) -> tuple[bytes, bool]:
    for lo, hi, first_flexible, fields in _schema.APIS[api_key][1 + side]:  # type: ignore[index]
        if lo <= version <= hi:
            flexible = first_flexible is not None and version >= first_flexible
            return _fields(fields, version, flexible, values), flexible
    raise AssertionError((api_key, version))


def request_frame(api_key: int, version: int, corr: int, values: dict[str, Any]) -> bytes:
    data, flexible = body(api_key, version, 0, values)
    # Request header v1, or v2 (plus an empty tagged-field section) for flexible versions.
    head = struct.pack(">hhih", api_key, version, corr, 1) + b"c" + (b"\x00" if flexible else b"")
    return struct.pack(">i", len(head) + len(data)) + head + data


def response_frame(api_key: int, version: int, corr: int, values: dict[str, Any]) -> bytes:
    data, flexible = body(api_key, version, 1, values)
    head = struct.pack(">i", corr) + (b"\x00" if flexible else b"")  # response header v0 / v1
    return struct.pack(">i", len(head) + len(data)) + head + data


Exchange = tuple[int, int, dict[str, Any], dict[str, Any] | None]


def run(exchanges: list[Exchange], **options: Any) -> ListSink:
    """One connection: each (api key, version, request, response or None) in turn."""
    f = Flow().handshake()
    for corr, (api_key, version, req, resp) in enumerate(exchanges, 1):
        f.send(0, request_frame(api_key, version, corr, req))
        if resp is not None:
            f.send(1, response_frame(api_key, version, corr, resp))
    f.close()
    sink = ListSink()
    session = Session("t.pcap", sink, SessionOptions(**options))
    for ts, data in f.packets:
        session.packet(ts, LINKTYPE_RAW_IPV4, data)
    session.finish()
    assert {r["status"] for r in sink.tables["requests"]} <= {"ok", "no_response_expected", "unanswered"}
    return sink


def columns(sink: ListSink, *names: str, table: str = "partitions") -> list[tuple[Any, ...]]:
    return [tuple(r.get(n) for n in names) for r in sink.tables[table]]


ORDERS_ID = "01a2043c-0000-7000-8000-000000000001"
GONE_ID = "01a2043c-0000-7000-8000-000000000002"
RECORDS = [(1_700_000_000_000, b"k", b"v" * 10, [])] * 3


def fetch_v13(topic_id: str, partitions: list[int]) -> Exchange:
    req = {
        "max_wait_ms": 500,
        "topics": [
            {"topic_id": topic_id, "partitions": [{"partition": p, "fetch_offset": 5} for p in partitions]}
        ],
        # A fetch session's removals name partitions the exchange does not act on (KIP-227).
        "forgotten_topics_data": [{"topic_id": topic_id, "partitions": [7]}],
    }
    resp = {
        "responses": [
            {
                "topic_id": topic_id,
                "partitions": [
                    {
                        "partition_index": p,
                        "high_watermark": 20,
                        "last_stable_offset": 20,
                        "log_start_offset": 0,
                        "records": build_v2(RECORDS, GZIP, first_offset=5),
                    }  # fmt: skip
                    for p in partitions
                ],
            }
        ]
    }
    return FETCH, 13, req, resp


def metadata_v12(topics: dict[str, str]) -> Exchange:
    resp = {
        "topics": [
            {
                "name": name,
                "topic_id": tid,
                "partitions": [{"partition_index": 0, "leader_id": 1, "leader_epoch": 4}],
            }
            for name, tid in topics.items()
        ]
    }
    return METADATA, 12, {"topics": None}, resp


def test_topic_ids_learned_after_the_fetch_name_its_rows_at_the_end() -> None:
    unanswered = fetch_v13(GONE_ID, [0])[:3] + (None,)
    sink = run([fetch_v13(ORDERS_ID, [0, 1]), unanswered, metadata_v12({"orders": ORDERS_ID})])
    fetch = [r for r in sink.tables["partitions"] if r["api_key"] == FETCH]
    assert [(r["topic"], r["topic_id"], r["partition"]) for r in fetch] == [
        ("orders", ORDERS_ID, 0),
        ("orders", ORDERS_ID, 1),
        (None, GONE_ID, 0),
    ]
    assert [
        tuple(r.get(k) for k in ("fetch_offset", "high_watermark", "lag", "record_count")) for r in fetch
    ] == [
        (5, 20, 15, 3),
        (5, 20, 15, 3),
        (5, None, None, None),
    ]
    # A Fetch request's log_start_offset is the follower's own (-1 from consumers), not the log's.
    assert [r.get("log_start_offset") for r in fetch] == [0, 0, None]
    assert columns(sink, "correlation_id", "status", table="requests") == [
        (1, "ok"),
        (3, "ok"),
        (2, "unanswered"),
    ]


def test_topic_ids_learned_before_the_fetch_name_its_rows_at_once() -> None:
    sink = run([metadata_v12({"orders": ORDERS_ID}), fetch_v13(ORDERS_ID, [2])])
    assert columns(sink, "api_key", "topic", "partition", "leader_id", "leader_epoch") == [
        (METADATA, "orders", 0, 1, 4),
        (FETCH, "orders", 2, None, None),
    ]


class _Sink:
    def __init__(self) -> None:
        self.rows: list[tuple[str, dict[str, Any]]] = []

    def add(self, table: str, row: dict[str, Any]) -> None:
        self.rows.append((table, row))


def test_rows_held_for_a_topic_name_are_bounded_and_the_overflow_counted() -> None:
    sink = _Sink()
    names = TopicNames(sink, max_held=2)
    names.add("records", [{"topic_id": "a", "n": n} for n in range(3)], None, "a")
    assert (len(names.held), names.held_overflow, [r["n"] for _, r in sink.rows]) == (2, 1, [2])
    names.add("partitions", [{"topic_id": "b"}], None, "b")
    assert (len(names.held), names.held_overflow) == (2, 2)
    names.learn({"a": "orders"})
    assert (names.held, [(t, r["topic"]) for t, r in sink.rows[2:]]) == (
        [],
        [("records", "orders"), ("records", "orders")],
    )
    names.add("records", [{"topic_id": "c"}], None, "c")
    names.finish()
    assert (names.unresolved, sink.rows[-1]) == (1, ("records", {"topic_id": "c", "topic": None}))


def test_topic_names_hand_out_only_the_names_learned_or_changed_since_they_were_last_taken() -> None:
    """A live worker shares the names it learns at each stats message: only the new ones, not every
    name known compared again each time (kwsniff.pipeline.live_worker)."""
    names = TopicNames(_Sink())
    names.learn({"a": "orders", "b": "payments"})
    assert sorted(names.take_fresh()) == [("a", "orders"), ("b", "payments")]  # the first: every name
    assert names.take_fresh() == []
    names.learn({"a": "orders", "c": "audit"})  # a known again: not fresh
    names.learn({"b": "payments-v2"})  # renamed (an id reused): fresh
    assert sorted(names.take_fresh()) == [("b", "payments-v2"), ("c", "audit")]
    assert names.take_fresh() == []


def test_unanswered_acks_0_produce_gives_request_side_rows() -> None:
    produce = {
        "acks": 0,
        "topic_data": [
            {"name": "orders", "partition_data": [{"index": 3, "records": build_v2(RECORDS, GZIP)}]}
        ],
    }
    sink = run([(PRODUCE, 9, produce, None)])
    assert columns(sink, "status", "acks", "record_count", table="requests") == [
        ("no_response_expected", 0, 3)
    ]
    assert columns(
        sink, "topic", "partition", "record_count", "batch_count", "compression", "error_code", "first_offset"
    ) == [("orders", 3, 3, 1, "gzip", None, None)]


def test_produce_answered_with_an_error_has_no_offsets() -> None:
    produce = {
        "acks": -1,
        "topic_data": [{"name": "orders", "partition_data": [{"index": 0, "records": build_v2(RECORDS)}]}],
    }
    answer = {
        "responses": [
            {"name": "orders", "partition_responses": [{"index": 0, "error_code": 6, "base_offset": -1}]}
        ]
    }
    sink = run([(PRODUCE, 9, produce, answer)])
    assert columns(
        sink, "error_code", "error_name", "record_count", "base_offset", "first_offset", "last_offset"
    ) == [(6, "NOT_LEADER_OR_FOLLOWER", 3, -1, None, None)]


def test_offset_fetch_v8_keeps_groups_apart_and_v1_takes_the_requests_group() -> None:
    v8_request = {
        "groups": [{"group_id": g, "topics": [{"name": "orders", "partition_indexes": [0]}]} for g in "ab"]
    }
    v8_answer = {
        "groups": [
            {
                "group_id": g,
                "topics": [{"name": "orders", "partitions": [{"partition_index": 0, "committed_offset": n}]}],
            }
            for g, n in (("a", 11), ("b", 22))
        ]
    }
    v1_request = {"group_id": "c", "topics": [{"name": "orders", "partition_indexes": [0, 1]}]}
    v1_answer = {
        "topics": [{"name": "orders", "partitions": [{"partition_index": 1, "committed_offset": 33}]}]
    }
    sink = run([(OFFSET_FETCH, 8, v8_request, v8_answer), (OFFSET_FETCH, 1, v1_request, v1_answer)])
    assert columns(sink, "group_id", "topic", "partition", "committed_offset", "error_code") == [
        ("a", "orders", 0, 11, 0),
        ("b", "orders", 0, 22, 0),
        ("c", "orders", 0, None, None),  # asked for, not in the answer
        ("c", "orders", 1, 33, 0),
    ]


def test_unanswered_offset_fetch_v1_lists_the_partitions_asked_for() -> None:
    sink = run(
        [(OFFSET_FETCH, 1, {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [4, 5]}]}, None)]
    )
    assert columns(sink, "group_id", "topic", "partition") == [("g", "t", 4), ("g", "t", 5)]


def test_list_offsets_keeps_the_asked_timestamp_apart_from_the_answer() -> None:
    v0_request = {
        "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1, "max_num_offsets": 1}]}
        ]
    }
    v0_answer = {
        "topics": [{"name": "t", "partitions": [{"partition_index": 0, "old_style_offsets": [42, 0]}]}]
    }
    v7_request = {"topics": [{"name": "t", "partitions": [{"partition_index": 1, "timestamp": -2}]}]}
    v7_answer = {
        "topics": [
            {
                "name": "t",
                "partitions": [{"partition_index": 1, "timestamp": -1, "offset": 7, "leader_epoch": 3}],
            }
        ]
    }
    sink = run([(LIST_OFFSETS, 0, v0_request, v0_answer), (LIST_OFFSETS, 7, v7_request, v7_answer)])
    assert columns(
        sink, "partition", "target_timestamp", "offset", "timestamp", "leader_epoch", "error_name"
    ) == [
        (0, -1, 42, None, None, "NONE"),
        (1, -2, 7, -1, 3, "NONE"),
    ]


def test_delete_records_and_offset_for_leader_epoch_name_their_offsets() -> None:
    delete = {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "offset": 100}]}]}
    deleted = {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "low_watermark": 100}]}]}
    epochs = {
        "topics": [
            {"topic": "t", "partitions": [{"partition": 1, "current_leader_epoch": 5, "leader_epoch": 2}]}
        ]
    }
    answer = {
        "topics": [{"topic": "t", "partitions": [{"partition": 1, "leader_epoch": 2, "end_offset": 640}]}]
    }
    sink = run([(DELETE_RECORDS, 2, delete, deleted), (OFFSET_FOR_LEADER_EPOCH, 4, epochs, answer)])
    assert columns(sink, "api_key", "partition", "offset", "log_start_offset", "leader_epoch") == [
        (DELETE_RECORDS, 0, 100, 100, None),
        (OFFSET_FOR_LEADER_EPOCH, 1, 640, None, 2),
    ]


def test_damaged_record_sets_are_counted_on_their_partition_rows() -> None:
    """Batches built by kafka-python, then damaged by hand: a flipped value byte fails the CRC-32C
    (KIP-98 batch format), a batch cut short is partial bytes, and an unknown magic stops the reader
    with its offset. Undamaged partitions count nothing."""
    good = build_v2(RECORDS)
    bad_crc = bytearray(build_v2(RECORDS))
    bad_crc[-3] ^= 0x01
    cut = build_v2(RECORDS)
    foreign = bytearray(good)
    foreign[16] = 7  # the magic byte
    produce = {
        "acks": -1,
        "topic_data": [
            {"name": "orders", "partition_data": [
                {"index": 0, "records": good},
                {"index": 1, "records": bytes(bad_crc)},
                {"index": 2, "records": good + cut[:30]},
                {"index": 3, "records": good + bytes(foreign)},
            ]}
        ],
    }  # fmt: skip
    sink = run([(PRODUCE, 9, produce, None)])
    assert columns(
        sink, "partition", "record_count", "crc_errors", "partial_bytes", "record_errors", "record_error"
    ) == [
        (0, 3, 0, 0, 0, None),
        (1, 3, 1, 0, 0, None),
        (2, 3, 0, 30, 0, None),
        (3, 3, 0, 0, 1, f"unknown magic 7 at offset {len(good)}"),
    ]
    assert columns(sink, "capped_batches", "control_batches") == [(0, 0)] * 4


def test_fetch_rows_carry_the_offsets_asked_and_answered() -> None:
    """Fetch v11 (topic names): the offset asked for from the request, the broker's watermarks from the
    response (KIP-98 last stable offset, KIP-107 log start offset), the records' range, and the lag
    high_watermark - fetch_offset."""
    req = {
        "max_wait_ms": 500,
        "topics": [
            {"topic": "orders", "partitions": [{"partition": 2, "fetch_offset": 5, "log_start_offset": 0}]}
        ],
    }
    resp = {
        "responses": [
            {"topic": "orders", "partitions": [
                {"partition_index": 2, "high_watermark": 21, "last_stable_offset": 19, "log_start_offset": 3,
                 "preferred_read_replica": -1, "records": build_v2(RECORDS, GZIP, first_offset=5)}
            ]}
        ]
    }  # fmt: skip
    sink = run([(FETCH, 11, req, resp)])
    assert columns(
        sink,
        "topic",
        "partition",
        "fetch_offset",
        "high_watermark",
        "last_stable_offset",
        "log_start_offset",
        "lag",
        "first_offset",
        "last_offset",
        "record_count",
    ) == [("orders", 2, 5, 21, 19, 3, 16, 5, 7, 3)]
    assert columns(sink, "capture", "conn_id", "correlation_id", "api_key", "api_name", "api_version") == [
        ("t.pcap", 1, 1, FETCH, "Fetch", 11)
    ]
