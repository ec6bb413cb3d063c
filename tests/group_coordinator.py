"""A KIP-848 test coordinator in front of tansu, for the consumer-group tests: tansu 0.6 does not
speak the consumer group protocol (its ApiVersions has no key 68), so this proxy forwards every
request to tansu except ConsumerGroupHeartbeat and KIP-932's early-access share keys (heartbeats,
and empty fetches and acknowledgements), which it answers itself, adding their keys to tansu's
ApiVersions answers. Every response it writes itself is encoded by kio (an independent library
generated from the same Kafka specs), never by kwsniff.

    python tests/group_coordinator.py LISTEN_PORT BROKER_PORT TOPIC PARTITIONS LOG

The topic's id is learnt from tansu's Metadata answers passing through (read by kio), so the
test must describe the topic through this proxy before a consumer joins.

The assignor is a plain range assignor over one topic: members sorted by join order, partitions
split in contiguous runs. Each membership change bumps the group epoch; a member heartbeating with
an older epoch is given its new target assignment at the group epoch (KIP-848 reconciliation
without the revocation step, which clients do not need to see). Every answer is logged as a JSON
line to LOG: what the coordinator sent, for the tests to hold the decoded tables against.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import importlib
import io
import json
import struct
import sys
import time
import uuid
from dataclasses import replace
from typing import Any

from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersions0
from kio.schema.api_versions.v1.response import ApiVersionsResponse as ApiVersions1
from kio.schema.api_versions.v2.response import ApiVersionsResponse as ApiVersions2
from kio.schema.api_versions.v3.response import ApiVersionsResponse as ApiVersions3
from kio.schema.api_versions.v4.response import ApiVersionsResponse as ApiVersions4
from kio.schema.consumer_group_heartbeat.v0.request import ConsumerGroupHeartbeatRequest as Heartbeat0
from kio.schema.consumer_group_heartbeat.v0.response import (
    ConsumerGroupHeartbeatResponse as HeartbeatResponse0,
)
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest as Heartbeat1
from kio.schema.consumer_group_heartbeat.v1.response import (
    ConsumerGroupHeartbeatResponse as HeartbeatResponse1,
)
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeader0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeader1
from kio.schema.share_acknowledge.v1.response import ShareAcknowledgeResponse as ShareAcknowledgeResponse1
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest as ShareHeartbeat1
from kio.schema.share_group_heartbeat.v1.response import (
    ShareGroupHeartbeatResponse as ShareHeartbeatResponse1,
)
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

HOST = "127.0.0.1"
CONSUMER_GROUP_HEARTBEAT, API_VERSIONS, METADATA = 68, 18, 3
SHARE_GROUP_HEARTBEAT, SHARE_FETCH, SHARE_ACKNOWLEDGE = 76, 78, 79
# Keys added to tansu's ApiVersions: (key, min, max). The share keys are KIP-932's early-access v0
# (kafka-clients 3.9.1): ShareGroupHeartbeat v0 has exactly v1's fields, so kio's v1 entities write
# its bytes; an empty ShareFetch or ShareAcknowledge v0 answer (throttle, error, message, no
# responses, no endpoints) is byte for byte an empty kio ShareAcknowledge v1 answer.
ADDED_KEYS = (
    (CONSUMER_GROUP_HEARTBEAT, 0, 1),
    (SHARE_GROUP_HEARTBEAT, 0, 0),
    (SHARE_FETCH, 0, 0),
    (SHARE_ACKNOWLEDGE, 0, 0),
)
EMPTY_SHARE_WAIT_S = 0.5
HEARTBEAT_INTERVAL_MS = 300
API_VERSIONS_BY_VERSION = {
    0: ApiVersions0,
    1: ApiVersions1,
    2: ApiVersions2,
    3: ApiVersions3,
    4: ApiVersions4,
}
HEARTBEATS = {
    (CONSUMER_GROUP_HEARTBEAT, 0): (Heartbeat0, HeartbeatResponse0),
    (CONSUMER_GROUP_HEARTBEAT, 1): (Heartbeat1, HeartbeatResponse1),
    (SHARE_GROUP_HEARTBEAT, 0): (ShareHeartbeat1, ShareHeartbeatResponse1),
}


def kafka_member_id() -> str:
    """A member id as Kafka's group coordinator names a member (`Uuid.randomUuid().toString()`): 16
    random bytes in URL-safe base64 without padding, never starting with "-". Clients may parse it:
    kafka-clients 3.9.1's share consumer reads it with `Uuid.fromString`, which throws on a 36-character
    UUID; the exception, swallowed in the heartbeat's response handler, left the member JOINING (an
    immediate heartbeat after every answer), with no share fetches, and close() spent its whole timeout
    waiting for the acknowledgements it could not send, before its leave heartbeat."""
    while True:
        member_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not member_id.startswith("-"):
            return member_id


class Group:
    """One consumer group's members, epochs and target assignment."""

    def __init__(self, partitions: int, share: bool = False) -> None:
        self.partitions = partitions
        self.share = share
        self.epoch = 0
        self.members: dict[str, dict[str, Any]] = {}  # member id -> {"epoch", "assigned"}

    def targets(self) -> dict[str, list[int]]:
        ids = list(self.members)
        if self.share:
            # KIP-932: a share group's members all share every partition.
            return {member: list(range(self.partitions)) for member in ids}
        out: dict[str, list[int]] = {}
        for index, member in enumerate(ids):
            low = index * self.partitions // len(ids)
            high = (index + 1) * self.partitions // len(ids)
            out[member] = list(range(low, high))
        return out

    def heartbeat(self, member_id: str, epoch: int) -> tuple[int, str, int, list[int] | None]:
        """(error code, member id, member epoch, new assignment or None) for one heartbeat."""
        if epoch in (-1, -2):
            # KIP-848: -1 leaves, -2 is a static member's temporary leave; both answered with it.
            if self.members.pop(member_id, None) is not None:
                self.epoch += 1
            return 0, member_id, epoch, None
        if epoch == 0:
            if not member_id:
                member_id = kafka_member_id()  # v0: the coordinator names the member
            self.members[member_id] = {"epoch": 0, "assigned": None}
            self.epoch += 1
        member = self.members.get(member_id)
        if member is None:
            return int(ErrorCode.unknown_member_id), member_id, 0, None
        if epoch != member["epoch"]:
            return int(ErrorCode.fenced_member_epoch), member_id, 0, None
        target = self.targets()[member_id]
        if member["epoch"] < self.epoch:
            member["epoch"] = self.epoch
            if target != member["assigned"]:
                member["assigned"] = target
                return 0, member_id, self.epoch, target
        return 0, member_id, member["epoch"], None


class Coordinator:
    def __init__(self, broker_port: int, topic: str, partitions: int, log: Any) -> None:
        self.broker_port = broker_port
        self.topic = topic
        self.topic_id: uuid.UUID | None = None
        self.partitions = partitions
        self.groups: dict[str, Group] = {}
        self.log = log

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        broker_reader, broker_writer = await asyncio.open_connection(HOST, self.broker_port)
        try:
            # One request at a time per connection keeps responses in request order.
            while True:
                frame = await _read_frame(reader)
                if frame is None:
                    break
                key, version, correlation = struct.unpack(">hhi", frame[:8])
                if (key, version) in HEARTBEATS:
                    writer.write(self.heartbeat(frame, key, version, correlation))
                elif key in (SHARE_FETCH, SHARE_ACKNOWLEDGE):
                    # Nothing to deliver: an empty answer after a short wait, as a broker's long poll.
                    await asyncio.sleep(EMPTY_SHARE_WAIT_S if key == SHARE_FETCH else 0)
                    writer.write(_empty_share_answer(correlation))
                else:
                    broker_writer.write(struct.pack(">i", len(frame)) + frame)
                    answer = await _read_frame(broker_reader)
                    if answer is None:
                        break
                    if key == METADATA and self.topic_id is None:
                        self.topic_id = _topic_id(answer, version, self.topic)
                    if key == API_VERSIONS:
                        answer = _with_consumer_group_heartbeat(answer, version)
                    writer.write(struct.pack(">i", len(answer)) + answer)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            broker_writer.close()

    def heartbeat(self, frame: bytes, key: int, version: int, correlation: int) -> bytes:
        request_type, response_type = HEARTBEATS[(key, version)]
        _, offset = entity_reader(RequestHeader)(frame, 0)  # flexible requests: header v2
        request, _ = entity_reader(request_type)(frame, offset)
        share = key == SHARE_GROUP_HEARTBEAT
        group = self.groups.setdefault(request.group_id, Group(self.partitions, share))
        error, member_id, epoch, assigned = group.heartbeat(request.member_id, request.member_epoch)
        assignment = None
        if assigned is not None:
            module = sys.modules[response_type.__module__]
            assignment = module.Assignment(
                topic_partitions=(
                    module.TopicPartitions(
                        topic_id=self.topic_id, partitions=tuple(i32(p) for p in assigned)
                    ),
                )
            )
        response = response_type(
            throttle_time=datetime.timedelta(0),
            error_code=ErrorCode(error),
            member_id=member_id,
            member_epoch=i32(epoch),
            heartbeat_interval=datetime.timedelta(milliseconds=HEARTBEAT_INTERVAL_MS),
            assignment=assignment,
        )
        owned = getattr(request, "topic_partitions", None)  # share members report none
        self.log.write(
            json.dumps(
                {
                    "ts": time.time(),
                    "api_key": key,
                    "group_id": request.group_id,
                    "member_id": member_id,
                    "epoch_sent": request.member_epoch,
                    "epoch": epoch,
                    "error_code": error,
                    "assigned": assigned,
                    "owned": None if owned is None else sorted(p for t in owned for p in t.partitions),
                }
            )
            + "\n"
        )
        self.log.flush()
        out = io.BytesIO()
        entity_writer(ResponseHeader1)(out, ResponseHeader1(correlation_id=i32(correlation)))
        entity_writer(response_type)(out, response)
        data = out.getvalue()
        return struct.pack(">i", len(data)) + data


def _with_consumer_group_heartbeat(answer: bytes, version: int) -> bytes:
    """tansu's ApiVersions answer with key 68 (v0-1) added, re-encoded by kio. ApiVersions responses
    always use header v0, so any client can read them (KIP-511)."""
    response_type = API_VERSIONS_BY_VERSION.get(version)
    if response_type is None:
        return answer
    header, offset = entity_reader(ResponseHeader0)(answer, 0)
    response, _ = entity_reader(response_type)(answer, offset)
    if response.error_code != ErrorCode.none:
        return answer
    module = sys.modules[response_type.__module__]
    added = {key for key, _, _ in ADDED_KEYS}
    keys = tuple(k for k in response.api_keys if k.api_key not in added)
    keys += tuple(
        module.ApiVersion(api_key=i16(key), min_version=i16(low), max_version=i16(high))
        for key, low, high in ADDED_KEYS
    )
    out = io.BytesIO()
    entity_writer(ResponseHeader0)(out, header)
    entity_writer(response_type)(out, replace(response, api_keys=keys))
    return out.getvalue()


def _empty_share_answer(correlation: int) -> bytes:
    out = io.BytesIO()
    entity_writer(ResponseHeader1)(out, ResponseHeader1(correlation_id=i32(correlation)))
    empty = ShareAcknowledgeResponse1(
        throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, responses=(), node_endpoints=()
    )
    entity_writer(ShareAcknowledgeResponse1)(out, empty)
    return struct.pack(">i", len(out.getvalue())) + out.getvalue()


def _topic_id(answer: bytes, version: int, topic: str) -> uuid.UUID | None:
    """The topic's id in a Metadata answer (v10+, KIP-516), read by kio."""
    if version < 10:
        return None
    module = importlib.import_module(f"kio.schema.metadata.v{version}.response")
    header_type = ResponseHeader1 if version >= 9 else ResponseHeader0
    _, offset = entity_reader(header_type)(answer, 0)
    response, _ = entity_reader(module.MetadataResponse)(answer, offset)
    for item in response.topics:
        if item.name == topic and item.topic_id is not None:
            return item.topic_id
    return None


async def _read_frame(reader: asyncio.StreamReader) -> bytes | None:
    try:
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        return None


async def main(listen: int, broker: int, topic: str, partitions: int, log_path: str) -> None:
    with open(log_path, "a") as log:
        coordinator = Coordinator(broker, topic, partitions, log)
        server = await asyncio.start_server(coordinator.serve, HOST, listen)
        print("listening", flush=True)
        async with server:
            await server.serve_forever()


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(main(int(args[0]), int(args[1]), args[2], int(args[3]), args[4]))
