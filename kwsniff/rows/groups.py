"""Rows of the `groups` table: one per JoinGroup, SyncGroup, Heartbeat or LeaveGroup exchange.

The request's facts are kept in its small summary while it waits for the response (like every
request, kwsniff/rows/builder.py); the row merges both. A rebalance is derived from these rows in
:func:`kwsniff.report.analytics.rebalances`: the first JoinGroup request of a generation to the last
SyncGroup response of that generation.
"""

from __future__ import annotations

from typing import Any

from kwsniff.protocol import error_name

JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
GROUP_APIS = frozenset({JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP})


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def group_request(api_key: int, msg: dict[str, Any]) -> dict[str, Any]:
    """The request facts of a group exchange (empty strings are what the spec sends for none)."""
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
    elif api_key == LEAVE_GROUP and msg.get("members"):
        # LeaveGroup v3+ (KIP-345) names the members leaving, maybe several.
        members = msg["members"]
        facts["members"] = len(members)
        facts["member_id"] = ",".join(m.get("member_id") or "" for m in members) or None
    elif api_key == SYNC_GROUP:
        # The leader sends every member's assignment, the others none.
        facts["members"] = len(msg.get("assignments") or ())
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
    if _text(msg.get("protocol_type")):
        facts["protocol_type"] = msg["protocol_type"]
    return facts


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
    chosen protocol, the new generation)."""
    facts = {**request, **{k: v for k, v in (response or {}).items() if v is not None}}
    return {
        **context,
        "group_id": group_id,
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
    }
