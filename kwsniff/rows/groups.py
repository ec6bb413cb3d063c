"""Rows of the `groups` table: one per group exchange, of every group protocol (docs/groups.md).

- classic: JoinGroup, SyncGroup, Heartbeat, LeaveGroup (11-14);
- consumer (KIP-848): ConsumerGroupHeartbeat 68, ConsumerGroupDescribe 69;
- share (KIP-932): ShareGroupHeartbeat 76, ShareGroupDescribe 77, ShareFetch 78, ShareAcknowledge 79,
  DescribeShareGroupOffsets 90, AlterShareGroupOffsets 91, DeleteShareGroupOffsets 92;
- streams (KIP-1071): StreamsGroupHeartbeat 88, StreamsGroupDescribe 89.

The request's facts are kept in its small summary while it waits for the response (like every
request, kwsniff/rows/builder.py); the row merges both. Assignments name topics by id (KIP-848), so
a row with ids is written through the capture's topic-id map (:class:`TopicNames`), held until
every id is named or the capture ends. A rebalance is derived from these rows in
the report's `rebalances` section (kwsniff/sections/sections_groups.py).
"""

from __future__ import annotations

from typing import Any

from kwsniff.protocol import consumer_protocol, error_name

JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
CONSUMER_HEARTBEAT, CONSUMER_DESCRIBE = 68, 69
SHARE_HEARTBEAT, SHARE_DESCRIBE, SHARE_FETCH, SHARE_ACKNOWLEDGE = 76, 77, 78, 79
STREAMS_HEARTBEAT, STREAMS_DESCRIBE = 88, 89
SHARE_OFFSETS_DESCRIBE = 90
PROTOCOLS = {
    **dict.fromkeys((JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP), "classic"),
    **dict.fromkeys((CONSUMER_HEARTBEAT, CONSUMER_DESCRIBE), "consumer"),
    **dict.fromkeys((SHARE_HEARTBEAT, SHARE_DESCRIBE, SHARE_FETCH, SHARE_ACKNOWLEDGE, 90, 91, 92), "share"),
    **dict.fromkeys((STREAMS_HEARTBEAT, STREAMS_DESCRIBE), "streams"),
}
GROUP_APIS = frozenset(PROTOCOLS)
_CLASSIC_EVENTS = {JOIN_GROUP: "join", SYNC_GROUP: "sync", HEARTBEAT: "heartbeat", LEAVE_GROUP: "leave"}
_HEARTBEATS = frozenset({CONSUMER_HEARTBEAT, SHARE_HEARTBEAT, STREAMS_HEARTBEAT})
_DESCRIBES = frozenset({CONSUMER_DESCRIBE, SHARE_DESCRIBE, STREAMS_DESCRIBE, SHARE_OFFSETS_DESCRIBE})
# KIP-848 epochs a member sends: 0 joins, -1 leaves, -2 leaves for now (a static member, KIP-848
# "static membership"); and the errors that end a member's epoch.
_SENT_EPOCHS = {0: "join", -1: "leave", -2: "static_leave"}
_ERROR_EVENTS = {110: "fenced", 111: "unreleased", 113: "stale"}  # FENCED_MEMBER_EPOCH...
# Partition lists by topic id: (column, list of (topic id, partitions)).
TopicParts = list[tuple[str, list[int]]]


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _topic_parts(items: Any) -> TopicParts | None:
    """[(topic id, partitions)] of a TopicPartitions list; None when the list is null, which in a
    heartbeat means "unchanged since the last one" (KIP-848)."""
    if items is None:
        return None
    return [(str(t.get("topic_id")), list(t.get("partitions") or ())) for t in items]


def _task_parts(items: Any) -> TopicParts | None:
    """Streams tasks (KIP-1071) are subtopology ids with partitions, already names."""
    if items is None:
        return None
    return [(str(t.get("subtopology_id")), list(t.get("partitions") or ())) for t in items]


def _sorted_names(names: Any) -> str | None:
    return ",".join(sorted(names)) if names is not None else None


def group_request(api_key: int, msg: dict[str, Any]) -> dict[str, Any]:
    """The request facts of a group exchange (empty strings are what the spec sends for none)."""
    if api_key not in _CLASSIC_EVENTS:
        return _new_protocol_request(api_key, msg)
    facts: dict[str, Any] = {
        "member_id": _text(msg.get("member_id")) or None,
        "group_instance_id": _text(msg.get("group_instance_id")),
        "generation_id": msg.get("generation_id"),
        "protocol_type": _text(msg.get("protocol_type")) or None,
        "protocol_name": _text(msg.get("protocol_name")) or None,
    }
    if api_key == JOIN_GROUP:
        # The protocols the member offers, in its order of preference.
        facts["protocol_name"] = ",".join(p.get("name") or "" for p in msg.get("protocols") or ()) or None
        facts["session_timeout_ms"] = msg.get("session_timeout_ms")
        facts["rebalance_timeout_ms"] = msg.get("rebalance_timeout_ms")
        protocols = msg.get("protocols") or ()
        if facts["protocol_type"] == "consumer" and protocols:
            # Every offered assignor carries the same subscription; the first is read.
            sub = consumer_protocol.subscription(protocols[0].get("metadata"))
            if sub is not None:
                topics, owned, rack = sub
                facts["subscribed_topics"] = _sorted_names(topics)
                facts["_owned_tasks"] = owned
                facts["rack_id"] = rack
    elif api_key == LEAVE_GROUP and msg.get("members"):
        # LeaveGroup v3+ (KIP-345) names the members leaving, maybe several.
        members = msg["members"]
        facts["members"] = len(members)
        facts["member_id"] = ",".join(m.get("member_id") or "" for m in members) or None
    elif api_key == SYNC_GROUP:
        # The leader sends every member's assignment, the others none.
        facts["members"] = len(msg.get("assignments") or ())
    return facts


def _new_protocol_request(api_key: int, msg: dict[str, Any]) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "member_id": _text(msg.get("member_id")) or None,
        "group_instance_id": _text(msg.get("instance_id")),
        "rack_id": _text(msg.get("rack_id")),
    }
    if api_key in _HEARTBEATS:
        facts["member_epoch"] = msg.get("member_epoch")
        facts["rebalance_timeout_ms"] = msg.get("rebalance_timeout_ms")
        facts["subscribed_topics"] = _sorted_names(msg.get("subscribed_topic_names"))
        facts["subscribed_regex"] = _text(msg.get("subscribed_topic_regex")) or None
        facts["server_assignor"] = _text(msg.get("server_assignor"))
        if api_key == STREAMS_HEARTBEAT:
            topology = msg.get("topology")
            if topology is not None:
                sources = {
                    t for s in topology.get("subtopologies") or () for t in s.get("source_topics") or ()
                }
                facts["subscribed_topics"] = _sorted_names(sources)
            facts["_owned_tasks"] = _task_parts(msg.get("active_tasks"))
        else:
            facts["_owned"] = _topic_parts(msg.get("topic_partitions"))
    elif api_key in _DESCRIBES:
        ids = msg.get("group_ids")
        if ids is None:  # DescribeShareGroupOffsets lists groups with their topics
            ids = [g.get("group_id") for g in msg.get("groups") or ()]
        facts["group_id"] = ",".join(i or "" for i in ids) or None
    return facts


def group_response(api_key: int, msg: dict[str, Any]) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    if api_key == JOIN_GROUP:
        facts["generation_id"] = msg.get("generation_id")
        facts["member_id"] = _text(msg.get("member_id")) or None
        facts["leader_id"] = _text(msg.get("leader")) or None
        facts["protocol_name"] = _text(msg.get("protocol_name")) or None
        # Only the leader is sent the member list.
        facts["members"] = len(msg.get("members") or ())
    elif api_key == SYNC_GROUP:
        facts["protocol_name"] = _text(msg.get("protocol_name")) or None
        # The member's partitions, in the consumer protocol's bytes (protocol type from v5 only).
        if msg.get("protocol_type") in (None, "consumer"):
            facts["_assigned_tasks"] = consumer_protocol.assignment(msg.get("assignment"))
    elif api_key in _HEARTBEATS:
        facts["member_id"] = _text(msg.get("member_id")) or None
        facts["member_epoch_response"] = msg.get("member_epoch")
        facts["heartbeat_interval_ms"] = msg.get("heartbeat_interval_ms")
        if api_key == STREAMS_HEARTBEAT:
            facts["_assigned_tasks"] = _task_parts(msg.get("active_tasks"))
        else:
            assignment = msg.get("assignment")
            facts["_assigned"] = (
                None if assignment is None else _topic_parts(assignment.get("topic_partitions"))
            )
    elif api_key in _DESCRIBES:
        facts["members"] = sum(len(g.get("members") or ()) for g in msg.get("groups") or ())
    if _text(msg.get("protocol_type")):
        facts["protocol_type"] = msg["protocol_type"]
    return facts


def group_event(api_key: int, facts: dict[str, Any], error_code: int | None) -> str | None:
    """What the exchange did to the member (docs/groups.md "Events")."""
    classic = _CLASSIC_EVENTS.get(api_key)
    if classic is not None:
        return classic
    if error_code:
        return _ERROR_EVENTS.get(error_code, "error")
    if api_key not in _HEARTBEATS:
        return None
    sent = facts.get("member_epoch")
    if sent in _SENT_EPOCHS:
        return _SENT_EPOCHS[sent]
    received = facts.get("member_epoch_response")
    if sent is not None and received is not None and received > sent:
        return "assignment"
    return "heartbeat"


def group_row(
    context: dict[str, Any],
    group_id: str | None,
    request: dict[str, Any],
    response: dict[str, Any] | None,
    error_code: int | None,
    ts_request: int,
    ts_response: int | None,
) -> dict[str, Any]:
    """One `groups` row: the response's facts win over the request's (the assigned member id, the
    chosen protocol, the new generation). Assignments by topic id stay in ``_topics`` until
    :func:`spell_topics` names them."""
    response = response or {}
    facts = {**request, **{k: v for k, v in response.items() if v is not None}}
    api_key = context["api_key"]
    topics = {"assignment": response.get("_assigned"), "owned_partitions": request.get("_owned")}
    return {
        **context,
        "group_id": facts.get("group_id") or group_id,
        "member_id": facts.get("member_id"),
        "group_instance_id": facts.get("group_instance_id"),
        "generation_id": facts.get("generation_id"),
        "protocol_type": facts.get("protocol_type"),
        "protocol_name": facts.get("protocol_name"),
        "leader_id": facts.get("leader_id"),
        "members": facts.get("members"),
        "error_code": error_code,
        "error_name": error_name(error_code) if error_code is not None else None,
        "ts_request": ts_request,
        "ts_response": ts_response,
        "latency_ms": (ts_response - ts_request) / 1000.0 if ts_response is not None else None,
        "protocol": PROTOCOLS[api_key],
        "event": group_event(api_key, facts, error_code),
        "rack_id": facts.get("rack_id"),
        "member_epoch": facts.get("member_epoch"),
        "member_epoch_response": facts.get("member_epoch_response"),
        "heartbeat_interval_ms": facts.get("heartbeat_interval_ms"),
        "session_timeout_ms": facts.get("session_timeout_ms"),
        "rebalance_timeout_ms": facts.get("rebalance_timeout_ms"),
        "subscribed_topics": facts.get("subscribed_topics"),
        "subscribed_regex": facts.get("subscribed_regex"),
        "server_assignor": facts.get("server_assignor"),
        # Streams tasks (subtopology ids) and classic assignments (topic names) need no naming.
        "assignment": _spelled(response.get("_assigned_tasks"), {}),
        "owned_partitions": _spelled(request.get("_owned_tasks"), {}),
        "_topics": {k: v for k, v in topics.items() if v is not None},
    }


def topic_ids_of(row: dict[str, Any]) -> set[str]:
    """The topic ids a row's assignments name, for the topic-id map to resolve."""
    return {tid for parts in row.get("_topics", {}).values() for tid, _ in parts}


def spell_topics(row: dict[str, Any], names: dict[Any, str]) -> None:
    """Write a row's assignments as `topic:0,1;topic2:3`, topics by name (unknown ids as the UUID),
    sorted by topic then partition."""
    for column, parts in row.pop("_topics", {}).items():
        row[column] = _spelled(parts, names)


def _spelled(parts: TopicParts | None, names: dict[Any, str]) -> str | None:
    if parts is None:
        return None
    merged: dict[str, set[int]] = {}
    for tid, partitions in parts:
        merged.setdefault(names.get(tid, tid), set()).update(partitions)
    return ";".join(f"{t}:{','.join(map(str, sorted(p)))}" for t, p in sorted(merged.items()))
