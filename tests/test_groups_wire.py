"""Group, offset and transaction exchanges of every protocol, encoded by kio (independent of kwsniff's
decoder) and assembled into a capture by the test: the share (KIP-932) and streams (KIP-1071)
heartbeats, the KIP-848 error events, OffsetCommit/OffsetFetch v10 by topic id with the member
epoch, and Transactions v2 (KIP-890) producer epochs. Real clients cover classic and consumer
groups (test_groups_classic_protocol.py, test_groups_consumer_protocol.py, test_groups_java_consumer.py).
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import io
import typing
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafkawire import Flow, write_pcap
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeader0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeader1
from kio.serial import entity_writer
from kio.static.constants import EntityType

from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink

ORDERS = uuid.UUID("0f6b0c7e-3c1a-4c55-9d6e-0d7b2a8b5a01")
NEVER_NAMED = uuid.UUID("7d1e0000-0000-4000-8000-000000000002")


def entity(cls: type, **values: Any) -> Any:
    """A kio entity with the given fields; every other required field gets its type's zero."""
    for f in dataclasses.fields(cls):
        if f.name in values or f.default is not dataclasses.MISSING:
            continue
        kind, origin = f.metadata.get("kafka_type"), typing.get_origin(f.type)
        if origin is tuple:
            values[f.name] = ()
        elif dataclasses.is_dataclass(f.type):
            values[f.name] = entity(f.type)  # type: ignore[arg-type]
        elif type(None) in typing.get_args(f.type):
            values[f.name] = None
        elif kind == "error_code":
            values[f.name] = ErrorCode.none
        elif kind and kind.startswith("timedelta"):
            values[f.name] = datetime.timedelta(0)
        elif kind == "string":
            values[f.name] = ""
        elif kind == "bool":
            values[f.name] = False
        else:
            values[f.name] = 0
    return cls(**values)


def kio_module(api: str, version: int, side: str) -> Any:
    return importlib.import_module(f"kio.schema.{api}.v{version}.{side}")


class Exchanges:
    """One client connection; each exchange is a kio-encoded request and response."""

    def __init__(self) -> None:
        self.flow = Flow().handshake()
        self.correlation = 0

    def add(self, api: str, version: int, request: dict[str, Any], response: dict[str, Any]) -> None:
        self.correlation += 1
        req_mod, resp_mod = kio_module(api, version, "request"), kio_module(api, version, "response")
        req_type = _top_level(req_mod, EntityType.request)
        resp_type = _top_level(resp_mod, EntityType.response)
        out = io.BytesIO()
        key = int(req_type.__api_key__)
        entity_writer(RequestHeader)(
            out,
            RequestHeader(
                request_api_key=key,
                request_api_version=version,
                correlation_id=self.correlation,
                client_id="wire",
            ),
        )
        entity_writer(req_type)(out, _build(req_mod, req_type, request))
        self.flow.send(0, len(out.getvalue()).to_bytes(4, "big") + out.getvalue())
        out = io.BytesIO()
        header = ResponseHeader1 if req_type.__flexible__ else ResponseHeader0
        entity_writer(header)(out, header(correlation_id=self.correlation))
        entity_writer(resp_type)(out, _build(resp_mod, resp_type, response))
        self.flow.send(1, len(out.getvalue()).to_bytes(4, "big") + out.getvalue())


def _top_level(module: Any, kind: EntityType) -> Any:
    return next(v for v in vars(module).values() if getattr(v, "__type__", None) == kind)


def _build(module: Any, cls: type, values: dict[str, Any]) -> Any:
    """Nested dicts and lists of dicts become the module's nested entities, by field type."""
    built = {}
    hints = {f.name: f.type for f in dataclasses.fields(cls)}
    for name, value in values.items():
        hint = hints[name]
        target = _entity_in(hint)
        if isinstance(value, dict) and target is not None:
            value = _build(module, target, value)
        elif isinstance(value, list):
            value = tuple(_build(module, target, v) if isinstance(v, dict) and target else v for v in value)
        built[name] = value
    return entity(cls, **built)


def _entity_in(hint: Any) -> Any:
    """The entity class a field's type names, through `tuple[X, ...] | None` and the like."""
    if dataclasses.is_dataclass(hint):
        return hint
    for arg in typing.get_args(hint):
        found = _entity_in(arg)
        if found is not None:
            return found
    return None


def _tp(topic_id: uuid.UUID, partitions: list[int]) -> dict[str, Any]:
    return {"topic_id": topic_id, "partitions": partitions}


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    x = Exchanges()
    cgh = "consumer_group_heartbeat"
    # A member joins; its assignment names topics by id, named only by a later Metadata answer.
    x.add(
        cgh,
        1,
        {
            "group_id": "g",
            "member_id": "m1",
            "member_epoch": 0,
            "rack_id": "rack-a",
            "rebalance_timeout": datetime.timedelta(seconds=45),
            "subscribed_topic_names": ["orders", "audit"],
            "server_assignor": "uniform",
            "topic_partitions": [],
        },
        {
            "member_id": "m1",
            "member_epoch": 5,
            "heartbeat_interval": datetime.timedelta(seconds=5),
            "assignment": {"topic_partitions": [_tp(ORDERS, [1, 0]), _tp(NEVER_NAMED, [3])]},
        },
    )
    x.add(
        "metadata",
        12,
        {"topics": None},
        {"topics": [{"name": "orders", "topic_id": ORDERS, "partitions": []}]},
    )
    x.add(
        cgh,
        1,
        {"group_id": "g", "member_id": "m1", "member_epoch": 4, "topic_partitions": [_tp(ORDERS, [0])]},
        {"error_code": ErrorCode.stale_member_epoch, "member_epoch": 0},
    )
    x.add(
        cgh,
        1,
        {"group_id": "g", "member_id": "m1", "member_epoch": 5},
        {"error_code": ErrorCode.fenced_member_epoch},
    )
    x.add(
        cgh,
        1,
        {
            "group_id": "g",
            "member_id": "m2",
            "member_epoch": 0,
            "instance_id": "i-2",
            "subscribed_topic_regex": "ord.*",
        },
        {"error_code": ErrorCode.unreleased_instance_id},
    )
    x.add(
        cgh,
        0,
        {"group_id": "g", "member_id": "m3", "member_epoch": -2, "instance_id": "i-3"},
        {"member_id": "m3", "member_epoch": -2},
    )
    x.add(
        "share_group_heartbeat",
        1,
        {"group_id": "sg", "member_id": "s1", "member_epoch": 0, "subscribed_topic_names": ["orders"]},
        {
            "member_id": "s1",
            "member_epoch": 1,
            "heartbeat_interval": datetime.timedelta(seconds=5),
            "assignment": {"topic_partitions": [_tp(ORDERS, [2])]},
        },
    )
    x.add(
        "share_group_heartbeat",
        1,
        {"group_id": "sg", "member_id": "s1", "member_epoch": -1},
        {"member_id": "s1", "member_epoch": -1},
    )
    x.add(
        "streams_group_heartbeat",
        0,
        {
            "group_id": "st",
            "member_id": "t1",
            "member_epoch": 0,
            "rebalance_timeout": datetime.timedelta(seconds=30),
            "topology": {
                "epoch": 1,
                "subtopologies": [{"subtopology_id": "0", "source_topics": ["clicks", "ads"]}],
            },
            "process_id": "p1",
        },
        {
            "member_id": "t1",
            "member_epoch": 1,
            "heartbeat_interval": datetime.timedelta(seconds=5),
            "active_tasks": [{"subtopology_id": "0", "partitions": [1, 0]}],
        },
    )
    x.add(
        "offset_commit",
        10,
        {
            "group_id": "g",
            "generation_id_or_member_epoch": 5,
            "member_id": "m1",
            "topics": [{"topic_id": ORDERS, "partitions": [{"partition_index": 0, "committed_offset": 42}]}],
        },
        {"topics": [{"topic_id": ORDERS, "partitions": [{"partition_index": 0}]}]},
    )
    x.add(
        "offset_fetch",
        10,
        {
            "groups": [
                {
                    "group_id": "g",
                    "member_id": "m1",
                    "member_epoch": 5,
                    "topics": [{"topic_id": ORDERS, "partition_indexes": [0]}],
                }
            ]
        },
        {
            "groups": [
                {
                    "group_id": "g",
                    "topics": [
                        {"topic_id": ORDERS, "partitions": [{"partition_index": 0, "committed_offset": 42}]}
                    ],
                }
            ]
        },
    )
    x.add(
        "init_producer_id",
        5,
        {"transactional_id": "tx", "producer_id": -1, "producer_epoch": -1},
        {"producer_id": 7, "producer_epoch": 0},
    )
    x.add(
        "end_txn",
        5,
        {"transactional_id": "tx", "producer_id": 7, "producer_epoch": 0, "committed": True},
        {"producer_id": 7, "producer_epoch": 1},
    )
    x.add(
        "end_txn",
        5,
        {"transactional_id": "tx", "producer_id": 7, "producer_epoch": 1, "committed": False},
        {"error_code": ErrorCode.transaction_abortable, "producer_id": 7, "producer_epoch": 2},
    )
    x.add(
        "consumer_group_describe",
        0,
        {"group_ids": ["g", "h"]},
        {
            "groups": [
                {"group_id": "g", "members": [{"member_id": "m1"}, {"member_id": "m2"}]},
                {"group_id": "h", "members": [{"member_id": "m9"}]},
            ]
        },
    )
    x.add(
        "share_fetch",
        1,
        {"group_id": "sg", "member_id": "s1", "share_session_epoch": 0, "topics": []},
        {"error_code": ErrorCode.share_session_not_found},
    )
    x.flow.close()
    pcap = write_pcap(Path(tmp_path_factory.mktemp("wire")) / "groups.pcap", x.flow.packets)
    sink = ListSink()
    run_capture(pcap, sink, SessionOptions())
    return dict(sink.tables)


def test_consumer_heartbeat_rows_name_their_topics_through_the_topic_id_map(tables: dict[str, Any]) -> None:
    join = next(
        r
        for r in tables["groups"]
        if r["api_key"] == 68 and r["member_epoch"] == 0 and r["member_id"] == "m1"
    )
    assert {
        k: join[k]
        for k in (
            "protocol",
            "event",
            "member_epoch",
            "member_epoch_response",
            "rack_id",
            "heartbeat_interval_ms",
            "rebalance_timeout_ms",
            "subscribed_topics",
            "server_assignor",
            "assignment",
            "owned_partitions",
        )
    } == {
        "protocol": "consumer",
        "event": "join",
        "member_epoch": 0,
        "member_epoch_response": 5,
        "rack_id": "rack-a",
        "heartbeat_interval_ms": 5000,
        "rebalance_timeout_ms": 45000,
        "subscribed_topics": "audit,orders",
        "server_assignor": "uniform",
        # Named by the Metadata answer after it; the id never named stays a UUID.
        "assignment": f"{NEVER_NAMED}:3;orders:0,1",
        "owned_partitions": "",
    }


def test_error_and_leave_events(tables: dict[str, Any]) -> None:
    # A row waiting for a topic name is written later: the table's order is not the wire's.
    rows = sorted(
        (r for r in tables["groups"] if r["api_key"] in (68, 76, 88)), key=lambda r: r["ts_request"]
    )
    assert [
        (r["protocol"], r["member_id"], r["event"], r["error_name"], r["group_instance_id"]) for r in rows
    ] == [
        ("consumer", "m1", "join", "NONE", None),
        ("consumer", "m1", "stale", "STALE_MEMBER_EPOCH", None),
        ("consumer", "m1", "fenced", "FENCED_MEMBER_EPOCH", None),
        ("consumer", "m2", "unreleased", "UNRELEASED_INSTANCE_ID", "i-2"),
        ("consumer", "m3", "static_leave", "NONE", "i-3"),
        ("share", "s1", "join", "NONE", None),
        ("share", "s1", "leave", "NONE", None),
        ("streams", "t1", "join", "NONE", None),
    ]
    assert [r["subscribed_regex"] for r in rows] == [None, None, None, "ord.*", None, None, None, None]
    stale = rows[1]
    assert (stale["member_epoch"], stale["owned_partitions"]) == (4, "orders:0")


def test_share_and_streams_assignments(tables: dict[str, Any]) -> None:
    share = next(r for r in tables["groups"] if r["api_key"] == 76)
    streams = next(r for r in tables["groups"] if r["api_key"] == 88)
    assert (
        share["group_id"],
        share["member_epoch_response"],
        share["assignment"],
        share["subscribed_topics"],
    ) == ("sg", 1, "orders:2", "orders")
    # Streams tasks are subtopologies with partitions; the subscription is the topology's sources.
    assert (
        streams["group_id"],
        streams["assignment"],
        streams["subscribed_topics"],
        streams["rebalance_timeout_ms"],
    ) == ("st", "0:0,1", "ads,clicks", 30000)


def test_offset_commit_and_fetch_v10_name_their_topic_ids_and_carry_the_member_epoch(
    tables: dict[str, Any],
) -> None:
    rows = [r for r in tables["partitions"] if r["api_key"] in (8, 9)]
    assert [
        (
            r["api_name"],
            r["group_id"],
            r["topic"],
            r["topic_id"],
            r["partition"],
            r["committed_offset"],
            r["member_epoch"],
        )
        for r in rows
    ] == [
        ("OffsetCommit", "g", "orders", str(ORDERS), 0, 42, 5),
        ("OffsetFetch", "g", "orders", str(ORDERS), 0, 42, 5),
    ]


def test_transactions_v2_producer_epochs_per_transaction(tables: dict[str, Any]) -> None:
    rows = [r for r in tables["requests"] if r["api_key"] in (22, 26)]
    assert [
        (
            r["api_name"],
            r["producer_id"],
            r["producer_epoch"],
            r["producer_id_response"],
            r["producer_epoch_response"],
            r["error_name"],
        )
        for r in rows
    ] == [
        ("InitProducerId", -1, -1, 7, 0, "NONE"),
        ("EndTxn", 7, 0, 7, 1, "NONE"),
        ("EndTxn", 7, 1, 7, 2, "TRANSACTION_ABORTABLE"),
    ]
    assert [(r["api_name"], r["error_code"]) for r in tables["errors"]] == [
        ("ConsumerGroupHeartbeat", 113),
        ("ConsumerGroupHeartbeat", 110),
        ("ConsumerGroupHeartbeat", 111),
        ("EndTxn", 120),
        ("ShareFetch", 122),
    ]


def test_describe_and_share_fetch_rows(tables: dict[str, Any]) -> None:
    """A describe asks for several groups (one row, the groups listed, their members counted); a
    ShareFetch carries the share group and member, and an error event."""
    rows = [r for r in tables["groups"] if r["api_key"] in (69, 78)]
    assert [
        (r["protocol"], r["group_id"], r["member_id"], r["members"], r["event"], r["error_name"])
        for r in rows
    ] == [
        ("consumer", "g,h", None, 3, None, None),  # errors are per group here
        ("share", "sg", "s1", None, "error", "SHARE_SESSION_NOT_FOUND"),
    ]
