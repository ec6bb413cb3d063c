"""What the tables take from a decoded message: summaries, per-partition facts, error codes.

Decoded messages are plain dicts with the spec's snake_case field names (DESIGN.md "The schema
set"), so the same few field names recur across APIs: topics hold `name`/`topic`/`topic_id` and a
partitions list, partitions hold `partition_index`/`partition`/`index`. Walking by those names covers
every per-partition API without a hand-written rule per API key.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kwsniff.protocol import error_name, error_retriable
from kwsniff.records import summarize_records

PRODUCE, FETCH, METADATA = 0, 1, 3

_TOPIC_NAME_KEYS = ("topic", "topic_name", "name")
_PARTITION_KEYS = ("partition_index", "partition", "index", "partition_id")
# Per-partition offsets and watermarks the `partitions` table carries, under their table names.
_PARTITION_FIELDS = {
    "fetch_offset": "fetch_offset",
    "base_offset": "base_offset",
    "high_watermark": "high_watermark",
    "last_stable_offset": "last_stable_offset",
    "log_start_offset": "log_start_offset",
    "committed_offset": "committed_offset",
    "offset": "offset",
    "timestamp": "timestamp",
    "low_watermark": "low_watermark",
}
_CONTEXT_KEYS = {
    "group_id": "group_id",
    "resource_name": "resource_name",
    "transactional_id": "transactional_id",
}


def request_summary(api_key: int, api_version: int, msg: dict[str, Any]) -> dict[str, Any]:
    info: dict[str, Any] = {}
    if api_key == PRODUCE:
        info["acks"] = msg.get("acks")
    parts = _partitions(msg)
    if parts:
        info["partitions"] = parts
        _record_totals(info, parts)
    return info


def response_summary(api_key: int, api_version: int, msg: dict[str, Any]) -> dict[str, Any]:
    info: dict[str, Any] = {}
    if "throttle_time_ms" in msg:
        info["throttle_time_ms"] = msg["throttle_time_ms"]
    if "error_code" in msg:
        info["error_code"] = msg["error_code"]
    parts = _partitions(msg)
    if parts:
        info["partitions"] = parts
        if api_key == FETCH:
            _record_totals(info, parts)
    if api_key == METADATA:
        info["topic_ids"] = {
            str(t["topic_id"]): t["name"]
            for t in msg.get("topics") or ()
            if t.get("topic_id") and t.get("name") and getattr(t["topic_id"], "int", 1) != 0
        }
    return info


def _record_totals(info: dict[str, Any], parts: dict[tuple[Any, int], dict[str, Any]]) -> None:
    counts = [p["record_count"] for p in parts.values() if "record_count" in p]
    if counts:
        info["record_count"] = sum(counts)
        info["record_bytes"] = sum(p["record_bytes"] for p in parts.values() if "record_bytes" in p)


def _partitions(msg: dict[str, Any]) -> dict[tuple[Any, int], dict[str, Any]]:
    """Every (topic, partition) in the message with its per-partition facts."""
    out: dict[tuple[Any, int], dict[str, Any]] = {}
    for topic, part in _walk_partitions(msg, {}, 0):
        key = (topic.get("topic") or topic.get("topic_id"), part["partition"])
        out.setdefault(key, {}).update({**topic, **part})
    return out


def _walk_partitions(node: dict[str, Any], ctx: dict[str, Any], depth: int) -> Iterator[tuple[dict, dict]]:
    if depth > 3:
        return
    for value in node.values():
        if not isinstance(value, list) or not value or not isinstance(value[0], dict):
            continue
        for item in value:
            pkey = next((k for k in _PARTITION_KEYS if k in item and isinstance(item[k], int)), None)
            if pkey is not None and ctx:
                yield ctx, _partition_facts(item, pkey)
                continue
            topic = _topic_of(item)
            sub = {**ctx, **topic} if topic else ctx
            if topic or depth == 0:
                yield from _walk_partitions(item, sub, depth + 1)


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


def _partition_facts(item: dict[str, Any], pkey: str) -> dict[str, Any]:
    facts: dict[str, Any] = {"partition": item[pkey]}
    if "error_code" in item:
        facts["error_code"] = item["error_code"]
    for src, dst in _PARTITION_FIELDS.items():
        v = item.get(src)
        if isinstance(v, int) and not isinstance(v, bool):
            facts[dst] = v
    if "records" in item:
        s = summarize_records(item["records"])
        facts.update(
            record_count=s.record_count,
            record_bytes=s.record_bytes,
            batch_count=s.batch_count,
            compression=s.compression,
            crc_errors=s.crc_errors,
            partial_bytes=s.partial_bytes,
        )
        if s.base_offset is not None and "base_offset" not in facts:
            facts["first_offset"] = s.base_offset
        facts["last_offset"] = s.last_offset
    return facts


def error_rows(msg: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """One row per non-zero error code anywhere in a response, with its path and context."""
    yield from _walk_errors(msg, "", {})


def _walk_errors(node: dict[str, Any], path: str, ctx: dict[str, Any]) -> Iterator[dict[str, Any]]:
    ctx = dict(ctx)
    ctx.update(_topic_of(node))
    for k in _PARTITION_KEYS:
        if isinstance(node.get(k), int) and "topic" in ctx:
            ctx["partition"] = node[k]
            break
    for src, dst in _CONTEXT_KEYS.items():
        if isinstance(node.get(src), str):
            ctx[dst] = node[src]
    for key, value in node.items():
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
            yield from _walk_errors(value, f"{path}{key}.", ctx)
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            for item in value:
                yield from _walk_errors(item, f"{path}{key}[].", ctx)


def partition_rows(
    api_key: int, reqi: dict[str, Any], respi: dict[str, Any], topic_names: dict[Any, str]
) -> Iterator[dict[str, Any]]:
    """Request and response sides of each topic-partition merged into one `partitions` row."""
    req_parts = reqi.get("partitions") or {}
    resp_parts = respi.get("partitions") or {}
    for key in dict.fromkeys([*req_parts, *resp_parts]):
        merged: dict[str, Any] = {}
        rq, rs = req_parts.get(key, {}), resp_parts.get(key, {})
        merged.update(rq)
        for k, v in rs.items():
            # Produce counts come from the request (what the producer sent); Fetch counts from
            # the response (what the consumer received). Only the side that has records has them.
            if k not in merged or k not in ("record_count", "record_bytes", "batch_count", "compression"):
                merged[k] = v
        if merged.get("topic") is None and merged.get("topic_id") is not None:
            merged["topic"] = topic_names.get(merged["topic_id"])
        if "high_watermark" in merged and "fetch_offset" in merged:
            merged["lag"] = merged["high_watermark"] - merged["fetch_offset"]
        code = merged.get("error_code")
        merged["error_name"] = error_name(code) if code is not None else None
        yield merged
