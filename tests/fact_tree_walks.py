"""The generic tree walks the tables used before issue 11, kept as the reference of an equivalence test.

Not an independent oracle: it is kwsniff's own earlier code and shares its field tables
(kwsniff.rows.partitions); tests/test_fact_compiler.py only shows the compiled extractors did not
change an answer. The facts themselves are checked against independent sources elsewhere: error rows
against every response layout Kafka's Java client writes (test_protocol_oracle_java.py), partition
facts against the truth files of the real clients (test_partitions_table.py, test_records_table.py),
tshark's view (test_read_captures.py) and hand-built exchanges (test_errors_table.py).

They find partitions and error codes by walking every dict of a decoded message by field names;
kwsniff.rows.fact_compiler writes per-version code meant to give exactly the same answers, and
tests/test_fact_compiler.py holds the two against each other. Copied from kwsniff/rows/partitions.py
and kwsniff/rows/extract.py as of commit 977a98e, but for the context one struct adds to an error,
which both share (kwsniff.rows.extract._node_context).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kwsniff.protocol import error_name, error_retriable
from kwsniff.rows.extract import _node_context
from kwsniff.rows.partitions import (
    _FIELDS,
    _NOT_PARTITION_APIS,
    _RENAMES,
    COUNTS_ONLY,
    LIST_OFFSETS,
    PartKey,
    RecordOptions,
    _record_facts,
)

_SKIPPED_LISTS = frozenset({"forgotten_topics_data", "aborted_transactions", "record_errors"})
_PARTITION_KEYS = ("partition_index", "partition", "index", "partition_id")
_PARTITION_LISTS = ("partition_indexes", "partitions")


def partition_facts(
    api_key: int, side: int, msg: dict[str, Any], options: RecordOptions = COUNTS_ONLY
) -> dict[PartKey, dict[str, Any]]:
    """Every topic-partition one side of an exchange names, with its facts under column names."""
    if api_key in _NOT_PARTITION_APIS:
        return {}
    fields = _RENAMES.get((api_key, side), _FIELDS)
    out: dict[PartKey, dict[str, Any]] = {}
    for ctx, item, pkey in _walk(msg, {}, 0):
        facts = dict(ctx)
        if item is None:
            facts["partition"] = pkey
        else:
            facts["partition"] = item[pkey]
            for src, dst in fields.items():
                if dst is not None:
                    v = item.get(src)
                    if type(v) in (int, bool):
                        facts[dst] = v
                    elif type(v) is list and all(type(b) is int for b in v):  # broker ids: an ISR
                        facts[dst] = ",".join(map(str, v))
                    elif type(v) is list and all(type(b) is dict and "broker_id" in b for b in v):
                        facts[dst] = ",".join(str(b["broker_id"]) for b in v)  # NewIsrWithEpochs
                    elif type(v) is dict and v.get("leader_id", -1) >= 0:  # a Fetch's CurrentLeader
                        facts["leader_id"], facts["leader_epoch"] = v["leader_id"], v["leader_epoch"]
            if "records" in item:
                _record_facts(facts, item["records"], api_key, options)
            elif api_key == LIST_OFFSETS and item.get("old_style_offsets"):
                facts["offset"] = item["old_style_offsets"][0]  # v0: a list, newest first
        key = (ctx.get("scope"), ctx.get("topic_id") or ctx.get("topic"), facts["partition"])
        facts.pop("scope", None)
        out.setdefault(key, {}).update(facts)
    return out


def _walk(node: dict[str, Any], ctx: dict[str, Any], depth: int) -> Iterator[tuple[dict, Any, Any]]:
    """(context, partition struct, its partition key) or (context, None, partition number)."""
    if depth > 3:
        return
    for name, value in node.items():
        if type(value) is not list or not value or type(value[0]) is not dict or name in _SKIPPED_LISTS:
            continue
        for item in value:
            sub = _context(item, ctx)
            if "topic" in sub or "topic_id" in sub:
                pkey = next((k for k in _PARTITION_KEYS if type(item.get(k)) is int), None)
                if pkey is not None:
                    yield sub, item, pkey
                    continue
                numbers = next((item[k] for k in _PARTITION_LISTS if type(item.get(k)) is list), None)
                if numbers and type(numbers[0]) is int:
                    for p in numbers:
                        yield sub, None, p
                    continue
            if sub is not ctx or depth == 0:
                yield from _walk(item, sub, depth + 1)


def _context(item: dict[str, Any], ctx: dict[str, Any]) -> dict[str, Any]:
    """ctx plus the topic, topic id, group or transaction an item names (ctx itself if none)."""
    out = None
    for k in ("topic", "topic_name", "name"):
        v = item.get(k)
        if type(v) is str and v:
            out = {**ctx, "topic": v}
            break
    tid = item.get("topic_id")
    # The all-zero uuid means "no topic id" (KIP-516): names are the key then.
    if tid is not None and getattr(tid, "int", 1) != 0:
        out = {**(out or ctx), "topic_id": str(tid)}
    for k in ("group_id", "transactional_id"):
        v = item.get(k)
        if type(v) is str:
            out = {**(out or ctx), "scope": v}
            if k == "group_id":
                out["group_id"] = v
    return ctx if out is None else out


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
    # What one struct adds to the context is shared with the compiled path (kwsniff.rows.extract
    # works it out only for the structs an error sits in); which structs are visited is what differs.
    ctx = _node_context(node, ctx, topic_names)
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
