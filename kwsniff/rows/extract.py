"""What the tables take from a decoded message: request/response summaries and error codes.

Decoded messages are plain dicts with the spec's snake_case field names (DESIGN.md "The schema
set"), so the same few field names recur across APIs: topics hold `name`/`topic`/`topic_id`,
partitions hold `partition_index`/`partition`/`index`. Walking by those names covers every API
without a hand-written rule per API key. Per-partition facts live in :mod:`kwsniff.rows.partitions`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kwsniff.protocol import error_name, error_retriable
from kwsniff.rows.partitions import (
    COUNTS_ONLY,
    PRODUCE,
    REQUEST,
    RESPONSE,
    TOPIC_ID_SOURCES,
    RecordOptions,
    partition_facts,
    record_totals,
    topic_ids,
)

_TOPIC_NAME_KEYS = ("topic", "topic_name", "name")
_PARTITION_KEYS = ("partition_index", "partition", "index", "partition_id")
_CONTEXT_KEYS = {
    "group_id": "group_id",
    "resource_name": "resource_name",
    "transactional_id": "transactional_id",
}


def request_summary(
    api_key: int, api_version: int, msg: dict[str, Any], options: RecordOptions = COUNTS_ONLY
) -> dict[str, Any]:
    info: dict[str, Any] = {}
    if api_key == PRODUCE:
        info["acks"] = msg.get("acks")
    if type(msg.get("group_id")) is str:
        info["group_id"] = msg["group_id"]
    parts = partition_facts(api_key, REQUEST, msg, options)
    if parts:
        info["partitions"] = parts
        record_totals(info, parts)
    return info


def response_summary(
    api_key: int, api_version: int, msg: dict[str, Any], options: RecordOptions = COUNTS_ONLY
) -> dict[str, Any]:
    info: dict[str, Any] = {}
    if "throttle_time_ms" in msg:
        info["throttle_time_ms"] = msg["throttle_time_ms"]
    if "error_code" in msg:
        info["error_code"] = msg["error_code"]
    parts = partition_facts(api_key, RESPONSE, msg, options)
    if parts:
        info["partitions"] = parts
        record_totals(info, parts)
    if api_key in TOPIC_ID_SOURCES:
        info["topic_ids"] = topic_ids(msg)
    return info


def _topic_of(item: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k in _TOPIC_NAME_KEYS:
        v = item.get(k)
        if isinstance(v, str):
            out["topic"] = v
            break
    tid = item.get("topic_id")
    if tid is not None and getattr(tid, "int", 1) != 0:
        # The all-zero uuid means "no topic id" (KIP-516); names are the key then.
        out["topic_id"] = str(tid)
    return out


def error_rows(
    msg: dict[str, Any], group_id: str | None = None, topic_names: dict[Any, str] | None = None
) -> Iterator[dict[str, Any]]:
    """One row per non-zero error code anywhere in a response, with its path and context.

    ``group_id`` is the request's: JoinGroup, SyncGroup, Heartbeat, OffsetCommit... responses do not
    repeat it. ``topic_names`` resolves topic ids (Fetch v13+ responses carry no names, KIP-516)."""
    yield from _walk_errors(msg, "", {"group_id": group_id} if group_id else {}, topic_names or {})


def _walk_errors(
    node: dict[str, Any], path: str, ctx: dict[str, Any], topic_names: dict[Any, str]
) -> Iterator[dict[str, Any]]:
    ctx = dict(ctx)
    topic = _topic_of(node)
    if "topic" not in topic and "topic_id" in topic and topic["topic_id"] in topic_names:
        topic["topic"] = topic_names[topic["topic_id"]]
    ctx.update(topic)
    for k in _PARTITION_KEYS:
        if isinstance(node.get(k), int) and "topic" in ctx:
            ctx["partition"] = node[k]
            break
    for src, dst in _CONTEXT_KEYS.items():
        if isinstance(node.get(src), str):
            ctx[dst] = node[src]
    for key, value in node.items():
        if key == "_unknown_tags":
            continue  # raw bytes by tag number (int keys), not fields: nothing to walk
        if key.endswith("error_code") and isinstance(value, int) and value != 0:
            yield {
                "path": path + key,
                "error_code": value,
                "error_name": error_name(value),
                "retriable": error_retriable(value),
                "error_message": node.get(key[: -len("code")] + "message"),
                "topic": ctx.get("topic"),
                "partition": ctx.get("partition"),
                "group_id": ctx.get("group_id"),
                "resource_name": ctx.get("resource_name"),
            }
        elif isinstance(value, dict):
            yield from _walk_errors(value, f"{path}{key}.", ctx, topic_names)
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            for item in value:
                yield from _walk_errors(item, f"{path}{key}[].", ctx, topic_names)
