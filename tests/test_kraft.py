"""KRaft and ISR changes (docs/tables.md "KRaft and ISR changes", docs/report.md "KRaft"): Vote,
BeginQuorumEpoch, EndQuorumEpoch, metadata-log Fetch, BrokerRegistration, BrokerHeartbeat and
AlterPartition exchanges encoded by kio (independent of kwsniff's encoder), sent over real TCP sockets
on loopback to a tiny kio-answering server, captured by tcpdump and read with `kwsniff read`. Every
column and every `isr_changes` and `controller` row must equal what the test encoded, computed here
from the exchanges sent (not from kwsniff's output)."""

from __future__ import annotations

import importlib
import json
import socket
import struct
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from kafka.record.default_records import DefaultRecordBatchBuilder
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeader1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeader2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeader0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeader1
from kio.static.primitive import i16, i32
from realparts import free_port, run_kwsniff, tcpdump_capture
from report_engines import answer_sections
from test_fetchers import build, encoded, read_frame

from kwsniff.cli import main

METADATA_TOPIC = "__cluster_metadata"
METADATA_ID = uuid.UUID("00000000-0000-0000-0000-000000000001")  # the metadata log's fixed id
ORDERS_ID = uuid.UUID("6b1d5c2e-0f4a-4d8e-9c3b-2a7e1f9d0c11")
API_KEYS = {
    "fetch": 1,
    "vote": 52,
    "begin_quorum_epoch": 53,
    "end_quorum_epoch": 54,
    "alter_partition": 56,
    "broker_registration": 62,
    "broker_heartbeat": 63,
}
API_NAMES = {
    "fetch": "Fetch",
    "vote": "Vote",
    "begin_quorum_epoch": "BeginQuorumEpoch",
    "end_quorum_epoch": "EndQuorumEpoch",
    "alter_partition": "AlterPartition",
    "broker_registration": "BrokerRegistration",
    "broker_heartbeat": "BrokerHeartbeat",
}
ERROR_NAMES = {
    41: "NOT_CONTROLLER",
    74: "FENCED_LEADER_EPOCH",
    104: "INCONSISTENT_CLUSTER_ID",
    95: "INVALID_UPDATE_VERSION",
    136: "CONTROLLER_ID_NOT_REGISTERED",
}


@dataclass
class Exchange:
    """One request and its response as kio entities' values, and what the tables must say of it."""

    client_id: str
    api: str
    version: int
    request: dict[str, Any]
    response: dict[str, Any]
    # The controller row's facts: node, leader, epoch, fenced, error, vote granted, broker epoch, lag.
    node: int | None = None
    leader: int | None = None
    epoch: int | None = None
    fenced: bool | None = None
    error: int | None = None
    granted: bool | None = None
    broker_epoch: int | None = None
    lag: int | None = None
    # AlterPartition: per partition (topic id, partition, leader, leader epoch, partition epoch,
    # new ISR, ISR, error).
    partitions: list[tuple[Any, ...]] = field(default_factory=list)
    answered: bool = True  # False: the server never answers it (the capture ends first)
    # Metadata Fetch: the rows of the log's records it carries (LOG_ROWS).
    log: list[tuple[Any, ...]] = field(default_factory=list)


class _NewCode(NamedTuple):
    """An error code newer than kio 0.6.5's ErrorCode enum (136, Kafka 4.4): kio writes `.value`."""

    value: int


def _error(code: int) -> Any:
    return ErrorCode(code) if code in ErrorCode._value2member_map_ else _NewCode(code)


def vote(
    version: int, candidate: int, epoch: int, leader: int, granted: bool, top_error: int = 0
) -> Exchange:
    part = {
        "partition_index": 0,
        "replica_epoch": epoch,
        "replica_id": candidate,
        "last_offset_epoch": epoch - 1,
    }
    part["last_offset"] = 90
    if version >= 2:
        part["pre_vote"] = False
    request: dict[str, Any] = {
        "cluster_id": "kraft-test",
        "topics": [{"topic_name": METADATA_TOPIC, "partitions": [part]}],
    }
    if version >= 1:
        request["voter_id"] = 1
    answer = {"partition_index": 0, "error_code": _error(0), "leader_id": leader, "leader_epoch": epoch}
    answer["vote_granted"] = granted
    topics = [] if top_error else [{"topic_name": METADATA_TOPIC, "partitions": [answer]}]
    response = {"error_code": _error(top_error), "topics": topics}
    if top_error:
        return Exchange(
            f"raft-client-{candidate}",
            "vote",
            version,
            request,
            response,
            node=candidate,
            error=top_error,
            granted=False,
        )
    return Exchange(
        f"raft-client-{candidate}",
        "vote",
        version,
        request,
        response,
        node=candidate,
        leader=leader,
        epoch=epoch,
        error=None,
        granted=granted,
    )


def quorum_epoch(api: str, version: int, leader: int, epoch: int, answered: tuple[int, int, int]) -> Exchange:
    """BeginQuorumEpoch or EndQuorumEpoch from ``leader``; ``answered``: (error, leader, epoch)."""
    part: dict[str, Any] = {"partition_index": 0, "leader_id": leader, "leader_epoch": epoch}
    request: dict[str, Any] = {
        "cluster_id": "kraft-test",
        "topics": [{"topic_name": METADATA_TOPIC, "partitions": [part]}],
    }
    if api == "begin_quorum_epoch" and version >= 1:
        request["voter_id"] = 2
    code, now_leader, now_epoch = answered
    reply = {
        "partition_index": 0,
        "error_code": _error(code),
        "leader_id": now_leader,
        "leader_epoch": now_epoch,
    }
    response = {"error_code": _error(0), "topics": [{"topic_name": METADATA_TOPIC, "partitions": [reply]}]}
    return Exchange(
        f"raft-client-{leader}",
        api,
        version,
        request,
        response,
        node=leader,
        leader=now_leader,
        epoch=now_epoch,
        error=code or None,
    )


HWM = 100


def _uvarint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


def _compact(items: list[bytes]) -> bytes:
    return _uvarint(len(items) + 1) + b"".join(items)


def _compact_string(text: str) -> bytes:
    return _uvarint(len(text.encode()) + 1) + text.encode()


def _ids(ids: list[int]) -> bytes:
    return _compact([struct.pack(">i", i) for i in ids])


NO_TAGS = b"\x00"


# KRaft metadata-log records (KIP-631), encoded here by hand from Kafka's PartitionRecord.json and
# PartitionChangeRecord.json (metadata/src/main/resources/common/metadata/): a value is the frame
# version (1), the record type and version as unsigned varints, then the record, flexible v0.
PARTITION_RECORD, PARTITION_CHANGE_RECORD, TOPIC_RECORD = 3, 5, 2


def partition_record(
    partition: int, replicas: list[int], isr: list[int], leader: int, epochs: tuple[int, int]
) -> bytes:
    body = struct.pack(">i", partition) + ORDERS_ID.bytes + _ids(replicas) + _ids(isr) + _ids([]) + _ids([])
    body += struct.pack(">iii", leader, *epochs) + NO_TAGS
    return _uvarint(1) + _uvarint(PARTITION_RECORD) + _uvarint(0) + body


def partition_change_record(partition: int, isr: list[int] | None, leader: int | None) -> bytes:
    """Isr (tag 0) and Leader (tag 1) are tagged fields: left out when they did not change."""
    tags = []
    if isr is not None:
        tags.append(_uvarint(0) + _uvarint(len(_ids(isr))) + _ids(isr))
    if leader is not None:
        tags.append(_uvarint(1) + _uvarint(4) + struct.pack(">i", leader))
    body = struct.pack(">i", partition) + ORDERS_ID.bytes + _uvarint(len(tags)) + b"".join(tags)
    return _uvarint(1) + _uvarint(PARTITION_CHANGE_RECORD) + _uvarint(0) + body


def topic_record() -> bytes:
    """TopicRecord (type 2): not an ISR, so no row."""
    body = _compact_string("orders") + ORDERS_ID.bytes + NO_TAGS
    return _uvarint(1) + _uvarint(TOPIC_RECORD) + _uvarint(0) + body


def record_batch(base_offset: int, values: list[bytes]) -> bytes:
    """A magic 2 record batch by kafka-python's builder (its offsets start at 0; the base offset, which
    the CRC does not cover, is set after)."""
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for delta, value in enumerate(values):
        builder.append(delta, 1_700_000_000_000 + delta, None, value, [])
    batch = bytearray(builder.build())
    struct.pack_into(">q", batch, 0, base_offset)
    return bytes(batch)


# Metadata-log records the fetches carry: (base offset, values) and, per record that sets an ISR,
# the row it must give: (offset, partition, isr, leader, leader epoch, partition epoch).
LOG_AT_94 = (
    94,
    [
        partition_record(0, [1, 2, 3], [1, 2, 3], 1, (3, 10)),
        partition_change_record(0, [1, 2], None),  # the ISR shrinks, the leader stays
        partition_change_record(0, None, 2),  # the leader changes, the ISR stays: no row
        topic_record(),
    ],
)
LOG_AT_98 = (98, [partition_change_record(0, [1, 2, 3], 1)])
LOG_ROWS = {
    94: (94, 0, "1,2,3", 1, 3, 10),
    95: (95, 0, "1,2", None, None, None),
    98: (98, 0, "1,2,3", 1, None, None),
}


def metadata_fetch(
    version: int,
    replica: int,
    offset: int,
    leader: tuple[int, int] | None,
    log: tuple[int, list[bytes]] | None = None,
) -> Exchange:
    """A Fetch of the metadata log by ``replica`` from ``offset``, answered with the high watermark,
    when given the current leader and epoch (Fetch v12+, KIP-595) and the log's records."""
    named: dict[str, Any] = {"topic_id": METADATA_ID} if version >= 13 else {"topic": METADATA_TOPIC}
    part = {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20, "last_fetched_epoch": 5}
    request: dict[str, Any] = {"max_wait": 500, "min_bytes": 0, "topics": [{**named, "partitions": [part]}]}
    if version >= 15:
        request["replica_state"] = {"replica_id": replica, "replica_epoch": -1}
    else:
        request["replica_id"] = replica
    reply: dict[str, Any] = {"partition_index": 0, "high_watermark": HWM, "last_stable_offset": HWM}
    if leader is not None:
        reply["current_leader"] = {"leader_id": leader[0], "leader_epoch": leader[1]}
    if log is not None:
        reply["records"] = record_batch(*log)
    response = {"responses": [{**named, "partitions": [reply]}]}
    return Exchange(
        f"raft-client-{replica}",
        "fetch",
        version,
        request,
        response,
        node=replica,
        leader=None if leader is None else leader[0],
        epoch=None if leader is None else leader[1],
        lag=HWM - offset,
        log=[row for at, row in LOG_ROWS.items() if log is not None and log[0] <= at < log[0] + len(log[1])],
    )


def registration(version: int, broker: int, broker_epoch: int, code: int = 0) -> Exchange:
    request = {"broker_id": broker, "cluster_id": "kraft-test", "incarnation_id": uuid.UUID(int=broker)}
    response = {"error_code": _error(code), "broker_epoch": broker_epoch}
    return Exchange(
        f"broker-{broker}",
        "broker_registration",
        version,
        request,
        response,
        node=broker,
        error=code or None,
        broker_epoch=broker_epoch,
    )


def heartbeat(
    version: int, broker: int, broker_epoch: int, fenced: bool, code: int = 0, answered: bool = True
) -> Exchange:
    request = {"broker_id": broker, "broker_epoch": broker_epoch, "current_metadata_offset": 90}
    response = {"error_code": _error(code), "is_caught_up": not fenced, "is_fenced": fenced}
    return Exchange(f"broker-{broker}", "broker_heartbeat", version, request, response, node=broker,
                    fenced=fenced if answered else None, error=code or None, broker_epoch=broker_epoch,
                    answered=answered)  # fmt: skip


def alter_partition(
    version: int,
    leader: int,
    changes: list[tuple[int, int, int, list[int], int, list[int], int]],
    top_error: int = 0,
) -> Exchange:
    """AlterPartition from partition leader ``leader`` (topic orders, by name up to v1, by ORDERS_ID
    from v2); per change: (partition, leader epoch, expected partition epoch, ISR asked, error, ISR
    answered, partition epoch answered)."""
    named: dict[str, Any] = {"topic_id": ORDERS_ID} if version >= 2 else {"topic_name": "orders"}
    topic = (None, str(ORDERS_ID)) if version >= 2 else ("orders", None)
    asked, answered, rows = [], [], []
    for partition, leader_epoch, expected, new_isr, code, isr, new_epoch in changes:
        ask: dict[str, Any] = {"partition_index": partition, "leader_epoch": leader_epoch}
        ask["partition_epoch"] = expected
        if version >= 3:
            ask["new_isr_with_epochs"] = [{"broker_id": b, "broker_epoch": 40 + b} for b in new_isr]
        else:
            ask["new_isr"] = new_isr
        asked.append(ask)
        answer = {"partition_index": partition, "error_code": _error(code), "leader_id": leader}
        answered.append({**answer, "leader_epoch": leader_epoch, "isr": isr, "partition_epoch": new_epoch})
        asked_isr = ",".join(map(str, new_isr))
        if top_error:  # no partition answered: the request's epochs, no leader or ISR
            rows.append(
                (*topic, partition, None, leader_epoch, expected, asked_isr, None, ERROR_NAMES[top_error])
            )
        else:
            committed = ",".join(map(str, isr))
            error = ERROR_NAMES.get(code, "NONE")
            rows.append((*topic, partition, leader, leader_epoch, new_epoch, asked_isr, committed, error))
    request = {"broker_id": leader, "broker_epoch": 41, "topics": [{**named, "partitions": asked}]}
    topics = [] if top_error else [{**named, "partitions": answered}]
    response = {"error_code": _error(top_error), "topics": topics}
    return Exchange(
        f"broker-{leader}", "alter_partition", version, request, response, node=leader, partitions=rows
    )


# The story, in the order sent: node 2 stands for election (Vote v0-v2; v2 refused by a voter of
# another cluster), wins epoch 6 and tells the voters (BeginQuorumEpoch v0-v1); the metadata log is
# fetched by voter 3 and observer broker 4 (v12 by name, v13-v18 by its fixed id), one answer naming
# no leader, one a newer leader; broker 4 registers (v0-v4) and heartbeats (v0-v2), fenced at first,
# once refused with CONTROLLER_ID_NOT_REGISTERED (Kafka 4.4); node 2 resigns (EndQuorumEpoch v0-v1,
# one answered FENCED_LEADER_EPOCH); partition leader 1 shrinks and expands the ISR of orders
# partition 0 (AlterPartition v2-v3), one change refused, one request refused as a whole, then
# partition 1's ISR grows from none and is sent again reordered; broker 4's last heartbeat is never
# answered. Node 3's Vote meets leader 2 in epoch 6 and is refused. AlterPartition v0-v1 (by topic
# name) shrink partition 2's ISR; a change of partition 3 is refused.
EXCHANGES: list[Exchange] = [
    vote(0, 2, 5, -1, True),
    vote(1, 2, 6, -1, True),
    vote(2, 2, 7, 3, False, top_error=104),
    quorum_epoch("begin_quorum_epoch", 0, 2, 6, (0, 2, 6)),
    quorum_epoch("begin_quorum_epoch", 1, 2, 6, (0, 2, 6)),
    vote(1, 3, 6, 2, False),
    *[metadata_fetch(v, 3, 80 + v, (2, 6), LOG_AT_94 if v == 14 else None) for v in (12, 13, 14, 15, 16, 17)],
    metadata_fetch(18, 3, 99, (3, 7)),
    *[metadata_fetch(v, 4, 60 + v, (2, 6), {16: LOG_AT_94, 18: LOG_AT_98}.get(v)) for v in (12, 14, 16, 18)],
    metadata_fetch(13, 4, 70, None),
    *[registration(v, 4, 40 + v) for v in (0, 1, 2, 3)],
    registration(4, 4, 0, code=136),
    heartbeat(0, 4, 43, True),
    heartbeat(1, 4, 43, False),
    heartbeat(2, 4, 43, False, code=136),
    quorum_epoch("end_quorum_epoch", 0, 2, 6, (0, 2, 6)),
    quorum_epoch("end_quorum_epoch", 1, 2, 6, (74, 3, 7)),
    alter_partition(2, 1, [(0, 3, 10, [1, 2, 3], 0, [1, 2, 3], 11)]),
    alter_partition(3, 1, [(0, 3, 11, [1, 2], 0, [1, 2], 12), (1, 3, 4, [1, 3], 95, [], 0)]),
    alter_partition(2, 1, [(0, 3, 12, [1, 2, 3], 0, [1, 2, 3], 13)]),
    alter_partition(3, 1, [(0, 3, 13, [1], 0, [], 0)], top_error=41),
    alter_partition(3, 1, [(1, 3, 4, [1, 3], 0, [1, 3], 5)]),
    alter_partition(2, 1, [(1, 3, 5, [3, 1], 0, [3, 1], 6)]),
    alter_partition(0, 1, [(2, 5, 20, [1, 2, 3], 0, [1, 2, 3], 21)]),
    alter_partition(1, 1, [(2, 5, 21, [1, 3], 0, [1, 3], 22), (3, 5, 7, [2], 95, [], 0)]),
    heartbeat(2, 4, 43, False, answered=False),
]


def alter_partition_v0_v1(exchange: Exchange, correlation: int) -> tuple[bytes, bytes]:
    """AlterPartition v0-v1 (KIP-497, topics by name), which kio 0.6.5 lacks, encoded here by hand from
    Kafka's AlterPartitionRequest/Response.json: flexible from v0 (compact arrays and strings, tagged
    field sections), LeaderRecoveryState from v1; request header v2, response header v1."""
    v, req, resp = exchange.version, exchange.request, exchange.response
    recovery = b"\x00" if v >= 1 else b""  # LeaderRecoveryState: 0, recovered
    topics = []
    for t in req["topics"]:
        parts = [
            struct.pack(">ii", p["partition_index"], p["leader_epoch"]) + _ids(p["new_isr"]) + recovery
            + struct.pack(">i", p["partition_epoch"]) + NO_TAGS
            for p in t["partitions"]
        ]  # fmt: skip
        topics.append(_compact_string(t["topic_name"]) + _compact(parts) + NO_TAGS)
    client = exchange.client_id.encode()
    header = struct.pack(">hhih", API_KEYS["alter_partition"], v, correlation, len(client)) + client + NO_TAGS
    body = struct.pack(">iq", req["broker_id"], req["broker_epoch"]) + _compact(topics) + NO_TAGS
    answers = []
    for t in resp["topics"]:
        parts = [
            struct.pack(">ihii", p["partition_index"], p["error_code"].value, p["leader_id"], p["leader_epoch"])
            + _ids(p["isr"]) + recovery + struct.pack(">i", p["partition_epoch"]) + NO_TAGS
            for p in t["partitions"]
        ]  # fmt: skip
        answers.append(_compact_string(t["topic_name"]) + _compact(parts) + NO_TAGS)
    reply = struct.pack(">i", correlation) + NO_TAGS
    reply += struct.pack(">ih", 0, resp["error_code"].value) + _compact(answers) + NO_TAGS
    request = header + body
    return struct.pack(">i", len(request)) + request, struct.pack(">i", len(reply)) + reply


def frames(exchange: Exchange, correlation: int) -> tuple[bytes, bytes]:
    """The request frame and its response frame, both kio-encoded (AlterPartition v0-v1 by hand)."""
    if exchange.api == "alter_partition" and exchange.version < 2:
        return alter_partition_v0_v1(exchange, correlation)
    module = f"kio.schema.{exchange.api}.v{exchange.version}"
    name = "".join(word.capitalize() for word in exchange.api.split("_"))
    request_type = getattr(importlib.import_module(f"{module}.request"), f"{name}Request")
    response_type = getattr(importlib.import_module(f"{module}.response"), f"{name}Response")
    flexible = request_type.__flexible__
    header = (RequestHeader2 if flexible else RequestHeader1)(
        request_api_key=i16(API_KEYS[exchange.api]),
        request_api_version=i16(exchange.version),
        correlation_id=i32(correlation),
        client_id=exchange.client_id,
    )
    reply = (ResponseHeader1 if flexible else ResponseHeader0)(correlation_id=i32(correlation))
    req = encoded(header) + encoded(build(request_type, exchange.request))
    resp = encoded(reply) + encoded(build(response_type, exchange.response))
    return struct.pack(">i", len(req)) + req, struct.pack(">i", len(resp)) + resp


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tables of the capture of EXCHANGES, each client on a connection of its own, in order."""
    tmp = tmp_path_factory.mktemp("kraft")
    port = free_port()
    sent = [frames(exchange, correlation) for correlation, exchange in enumerate(EXCHANGES, start=1)]
    # The server's answer to each request frame; None: it never answers.
    answers = {req: resp if e.answered else None for e, (req, resp) in zip(EXCHANGES, sent, strict=True)}
    names = list(dict.fromkeys(e.client_id for e in EXCHANGES))
    pcap = tmp / "kraft.pcap"
    with socket.create_server(("127.0.0.1", port)) as server, tcpdump_capture(pcap, port):
        server.settimeout(10)
        # One connection per client, all open at once, requests sent in the story's order.
        thread = threading.Thread(target=serve_all, args=(server, answers, len(names)), daemon=True)
        thread.start()
        clients = {name: socket.create_connection(("127.0.0.1", port), timeout=10) for name in names}
        try:
            for exchange, (req, resp) in zip(EXCHANGES, sent, strict=True):
                clients[exchange.client_id].sendall(req)
                if exchange.answered:
                    assert read_frame(clients[exchange.client_id]) == resp  # answered before the next
        finally:
            for client in clients.values():
                client.close()
        thread.join(timeout=10)
        assert not thread.is_alive()
    out = tmp / "tables"
    done = CliRunner().invoke(main, ["read", "-q", str(pcap), "--out", str(out), "--overwrite"])
    assert done.exit_code == 0, done.output
    return out


def serve_all(server: socket.socket, answers: dict[bytes, bytes | None], connections: int) -> None:
    """Answer every connection at once (a thread each), as a controller does."""
    accepted = []
    for _ in range(connections):
        conn, _addr = server.accept()
        thread = threading.Thread(target=_answer, args=(conn, answers), daemon=True)
        thread.start()
        accepted.append(thread)
    for thread in accepted:
        thread.join(timeout=10)


def _answer(conn: socket.socket, answers: dict[bytes, bytes | None]) -> None:
    with conn:
        conn.settimeout(10)
        while True:
            try:
                frame = read_frame(conn)
            except (ConnectionError, OSError):
                return
            answer = answers[frame]
            if answer is not None:
                conn.sendall(answer)


def table(out: Path, name: str) -> list[dict[str, Any]]:
    return sorted(pq.read_table(out / name).to_pylist(), key=lambda r: r["correlation_id"])


def test_requests_rows_carry_the_sender_broker_epoch_and_fenced_state(tables: Path) -> None:
    rows = table(tables, "requests")
    got = [
        (r["correlation_id"], r["api_name"], r["api_version"], r["status"], r["node_id"], r["replica_id"],
         r["fetcher"], r["broker_epoch"], r["fenced"], r["first_error_name"])
        for r in rows
    ]  # fmt: skip
    want = []
    for correlation, e in enumerate(EXCHANGES, start=1):
        fetch = e.api == "fetch"
        # AlterPartition requests send the leader's broker epoch (41); registrations get theirs back.
        epoch = 41 if e.api == "alter_partition" else e.broker_epoch
        error = e.error
        if e.api == "alter_partition":
            error = next(
                (code for code in (41, 95) if any(ERROR_NAMES[code] == p[-1] for p in e.partitions)), None
            )
        want.append(
            (correlation, API_NAMES[e.api], e.version, "ok" if e.answered else "unanswered", None if fetch else e.node, e.node if fetch else None,
             "metadata" if fetch else None, epoch, e.fenced, ERROR_NAMES.get(error) if error else None)
        )  # fmt: skip
    assert got == want


def test_partitions_rows_carry_leaders_epochs_votes_and_isrs(tables: Path) -> None:
    rows = table(tables, "partitions")
    by_exchange: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        by_exchange.setdefault(r["correlation_id"], []).append(r)
    for correlation, e in enumerate(EXCHANGES, start=1):
        if e.api in ("broker_registration", "broker_heartbeat"):
            assert correlation not in by_exchange  # no partition in them
            continue
        got = sorted(by_exchange.pop(correlation), key=lambda r: r["partition"])
        if e.api == "alter_partition":
            assert [
                (r["topic"], r["topic_id"], r["partition"], r["leader_id"], r["leader_epoch"], r["partition_epoch"],
                 r["new_isr"], r["isr"], r["error_name"] or ERROR_NAMES[41], r["node_id"])
                for r in got
            ] == [(*p, 1) for p in e.partitions]  # fmt: skip
            continue
        log = sorted((r for r in got if r["isr"] is not None), key=lambda r: r["offset"])
        assert [
            (r["offset"], r["partition"], r["isr"], r["leader_id"], r["leader_epoch"], r["partition_epoch"])
            for r in log
        ] == e.log
        for r in log:  # the metadata log's records, on their Fetch's exchange
            assert (r["topic"], r["topic_id"], r["fetcher"], r["replica_id"]) == (
                None,
                str(ORDERS_ID),
                "metadata",
                e.node,
            )
        (row,) = [r for r in got if r["isr"] is None]
        quorum = e.api in ("vote", "begin_quorum_epoch", "end_quorum_epoch")
        if quorum:
            assert (row["topic"], row["topic_id"]) == (METADATA_TOPIC, None)
        elif e.version >= 13:
            assert (row["topic"], row["topic_id"]) == (None, str(METADATA_ID))
        else:
            assert (row["topic"], row["topic_id"]) == (METADATA_TOPIC, None)
        # A Vote refused as a whole has only its request's partition: no leader, no answer.
        leader = e.leader
        epoch = e.epoch
        if e.api == "begin_quorum_epoch" or e.api == "end_quorum_epoch":
            assert row["node_id"] == e.node
        assert (row["leader_id"], row["leader_epoch"], row["vote_granted"], row["lag"]) == (
            leader,
            epoch,
            e.granted if e.api == "vote" and e.leader is not None else None,
            e.lag,
        )
        assert (row["isr"], row["new_isr"], row["partition_epoch"]) == (None, None, None)
    assert not by_exchange


def test_spark_decodes_the_same_kraft_columns(tables: Path, tmp_path: Path) -> None:
    """`kwsniff spark` (split by flow, so its bucketed sessions) writes the same columns."""
    fleet = tmp_path / "fleet"
    done = run_kwsniff(
        "spark", str(tables.parent / "kraft.pcap"), "--out", str(fleet), "--master", "local[1]",
        "--flow-buckets", "2", "-q",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    requests = ds.dataset(fleet / "requests", partitioning="hive").to_table().to_pylist()
    got = sorted((r["correlation_id"], r["node_id"], r["broker_epoch"], r["fenced"]) for r in requests)
    want = []
    for correlation, e in enumerate(EXCHANGES, start=1):
        epoch = 41 if e.api == "alter_partition" else e.broker_epoch
        want.append((correlation, None if e.api == "fetch" else e.node, epoch, e.fenced))
    assert got == want
    partitions = ds.dataset(fleet / "partitions", partitioning="hive").to_table().to_pylist()
    isrs = sorted(
        ((r["topic"], r["topic_id"], r["partition"], r["leader_id"], r["leader_epoch"], r["partition_epoch"],
         r["new_isr"], r["isr"], r["error_name"] or ERROR_NAMES[41])
        for r in partitions if r["api_key"] == API_KEYS["alter_partition"]), key=repr
    )  # fmt: skip
    assert isrs == sorted((p for e in EXCHANGES for p in e.partitions), key=repr)
    votes = [(r["leader_id"], r["vote_granted"]) for r in sorted(partitions, key=lambda r: r["correlation_id"])
             if r["api_key"] == API_KEYS["vote"]]  # fmt: skip
    assert votes == [(-1, True), (-1, True), (None, None), (2, False)]


def expected_isr_changes() -> list[tuple[Any, ...]]:
    """docs/report.md `isr_changes`, from the exchanges sent: one row per partition per AlterPartition
    and per metadata-log record that sets an ISR (once, at the first fetch carrying it);
    `previous_isr` the ISR the partition's previous row of the same source gave, `change` the ISR
    asked for (the record's: set) against it."""
    out = []
    last: dict[tuple[Any, ...], str | None] = {}
    seen: set[int] = set()

    def change(asked: str, previous: str | None) -> str | None:
        if previous is None:
            return None
        wanted, had = len(asked.split(",")), len(previous.split(",")) if previous else 0
        return "shrink" if wanted < had else "expand" if wanted > had else "same"

    for e in EXCHANGES:
        for offset, partition, isr, leader, epoch, pepoch in e.log:
            if offset in seen:
                continue
            seen.add(offset)
            previous = last.get(("log", partition))
            row = (
                "metadata log",
                None,
                None,
                None,
                str(ORDERS_ID),
                partition,
                leader,
                epoch,
                pepoch,
                None,
                isr,
            )
            out.append((*row, previous, change(isr, previous), None, offset))
            last[("log", partition)] = isr
        if e.api != "alter_partition":
            continue
        for topic, topic_id, partition, leader, epoch, pepoch, new_isr, isr, error in sorted(
            e.partitions, key=lambda p: p[2]
        ):
            key = (topic_id or topic, partition)
            previous = last.get(key)
            row = (
                "AlterPartition",
                1,
                e.version,
                topic,
                topic_id,
                partition,
                leader,
                epoch,
                pepoch,
                new_isr,
                isr,
            )
            out.append((*row, previous, change(new_isr, previous), error, None))
            last[key] = isr
    return out


def expected_controller() -> list[tuple[Any, ...]]:
    """docs/report.md `controller`, from the exchanges sent: one row per API, node, leader, epoch,
    fenced state and error, in order of first appearance; requests, votes granted, broker epoch, lag
    at most and at the last fetch."""
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for e in EXCHANGES:
        if e.api == "alter_partition":
            continue
        key = (API_NAMES[e.api], e.node, e.leader, e.epoch, e.fenced, ERROR_NAMES.get(e.error or 0))
        g = groups.setdefault(key, {"requests": 0, "unanswered": 0, "granted": 0, "epochs": [], "lags": []})
        g["requests"] += 1
        g["unanswered"] += not e.answered
        g["granted"] += bool(e.granted)
        g["epochs"].append(e.broker_epoch)
        g["lags"].append(e.lag)
    out = []
    for key, g in groups.items():
        epochs = [x for x in g["epochs"] if x is not None]
        lags = [x for x in g["lags"] if x is not None]
        out.append(
            (*key, g["requests"], g["unanswered"], g["granted"] if key[0] == "Vote" else None, max(epochs) if epochs else None,
             max(lags) if lags else None, lags[-1] if lags else None)
        )  # fmt: skip
    return out


def run_sections(
    tables: Path, engine_name: str, request: pytest.FixtureRequest
) -> dict[str, list[dict[str, Any]]]:
    return answer_sections(tables, ["isr_changes", "controller"], engine_name, request)


ISR_KEYS = ("source", "node_id", "api_version", "topic", "topic_id", "partition", "leader_id", "leader_epoch", "partition_epoch",
            "new_isr", "isr", "previous_isr", "change", "error_name", "log_offset")  # fmt: skip
CONTROLLER_KEYS = ("api_name", "node_id", "leader_id", "leader_epoch", "fenced", "error_name", "requests",
                   "unanswered", "votes_granted", "broker_epoch", "max_lag", "last_lag")  # fmt: skip


@pytest.mark.parametrize("engine_name", ["duckdb", "spark"])
def test_report_sections_are_what_was_encoded(
    tables: Path, engine_name: str, request: pytest.FixtureRequest
) -> None:
    rows = run_sections(tables, engine_name, request)
    assert [tuple(r[k] for k in ISR_KEYS) for r in rows["isr_changes"]] == expected_isr_changes()
    assert [tuple(r[k] for k in CONTROLLER_KEYS) for r in rows["controller"]] == expected_controller()
    for r in rows["controller"]:
        assert r["client_ip"] == "127.0.0.1"
        assert r["first_seen"] <= r["last_seen"]
        if r["unanswered"] == r["requests"]:
            assert (r["p50_ms"], r["max_ms"]) == (None, None)  # no answer, no latency
        else:
            assert 0 <= r["p50_ms"] <= r["max_ms"]


def test_report_command_prints_both_sections(tables: Path) -> None:
    done = CliRunner().invoke(
        main,
        ["report", str(tables), "--section", "isr_changes", "--section", "controller", "--format", "json"],
    )
    assert done.exit_code == 0, done.output
    rows = json.loads(done.output)
    assert sorted(rows) == ["controller", "isr_changes"]
    assert [r["change"] for r in rows["isr_changes"]] == [c[12] for c in expected_isr_changes()]
    heartbeats = [
        (r["fenced"], r["error_name"]) for r in rows["controller"] if r["api_name"] == "BrokerHeartbeat"
    ]
    assert heartbeats == [
        (True, None),
        (False, None),
        (False, "CONTROLLER_ID_NOT_REGISTERED"),
        (None, None),  # never answered
    ]
