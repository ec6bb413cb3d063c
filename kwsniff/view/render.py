"""Decoded exchanges for people: a Wireshark-style tree, or one JSON object per line. Pure functions.

Input is a `requests` row built with ``keep_messages=True`` (see :class:`kwsniff.rows.TableBuilder`):
the row's columns plus the decoded ``request``/``response`` dicts and the connection's endpoints.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from kwsniff.protocol.error_codes import error_label
from kwsniff.protocol.partial import CutRecords
from kwsniff.rows.extract import error_rows
from kwsniff.view.escape import visible

JSON_HEX_BYTES = 32  # bytes of a bytes/records field shown as hex in --json
TREE_HEX_BYTES = 16  # ... and in the tree
INDENT = "  "
INLINE_WIDTH = 100  # a list item whose fields fit this many characters is printed on one line
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Statuses that are a normal outcome, not a problem: acks=0 Produce requests get no response.
_FINE_STATUSES = ("ok", "no_response_expected")
_C1_DEL = re.compile("[\x7f-\x9f]")


@dataclass
class ExchangeFilter:
    """Which exchanges `show` prints; empty criteria match everything."""

    apis: frozenset[str] = frozenset()  # lower-case api names, or api keys as decimal text
    client_id: str | None = None
    conn_id: int | None = None
    errors_only: bool = False
    topic: str | None = None  # named by the exchange (exchange_names)
    group: str | None = None
    min_latency_ms: float | None = None  # unanswered exchanges have no latency: never kept
    statuses: frozenset[str] = frozenset()

    @property
    def needs_names(self) -> bool:
        """Whether :meth:`matches` needs the exchange's topics and groups (exchange_names)."""
        return self.topic is not None or self.group is not None

    def matches(
        self, row: dict[str, Any], topics: frozenset[str] = frozenset(), groups: frozenset[str] = frozenset()
    ) -> bool:
        if self.apis and row["api_name"].lower() not in self.apis and str(row["api_key"]) not in self.apis:
            return False
        if self.client_id is not None and row.get("client_id") != self.client_id:
            return False
        if self.conn_id is not None and row["conn_id"] != self.conn_id:
            return False
        if self.statuses and row["status"] not in self.statuses:
            return False
        if self.min_latency_ms is not None and (
            row["latency_ms"] is None or row["latency_ms"] < self.min_latency_ms
        ):
            return False
        if self.topic is not None and self.topic not in topics:
            return False
        if self.group is not None and self.group not in groups:
            return False
        return not self.errors_only or has_error(row)


# Fields naming a group in requests: group_id (JoinGroup, OffsetCommit, OffsetFetch's groups...),
# group_ids (DescribeGroups, DeleteGroups); FindCoordinator's key(s) when key_type is 0 (a group).
_GROUP_KEYS = ("group_id", "group_ids")


def exchange_names(row: dict[str, Any]) -> tuple[set[str], set[str]]:
    """(topics, groups) a `requests` row built with its messages names by name in its request or
    response (topic ids are named by the exchange's `partitions` rows, which `show` adds)."""
    topics: set[str] = set()
    groups: set[str] = set()
    for message in (row.get("request"), row.get("response")):
        if isinstance(message, dict):
            _walk_names(message, topics, groups)
    request = row.get("request")
    if row["api_key"] == 10 and isinstance(request, dict) and request.get("key_type", 0) == 0:
        keys = request.get("coordinator_keys") or [request.get("key")]
        groups.update(k for k in keys if isinstance(k, str))
    return topics, groups


def _walk_names(value: Any, topics: set[str], groups: set[str], in_topics: bool = False) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, str) and (key in ("topic", "topic_name") or (in_topics and key == "name")):
                topics.add(item)
            elif key in _GROUP_KEYS and isinstance(item, str):
                groups.add(item)
            elif key in _GROUP_KEYS and isinstance(item, list):
                groups.update(g for g in item if isinstance(g, str))
            elif isinstance(item, list | dict):
                _walk_names(item, topics, groups, key in ("topics", "topic_data", "responses"))
    elif isinstance(value, list):
        for item in value:
            _walk_names(item, topics, groups, in_topics)


def has_error(row: dict[str, Any]) -> bool:
    """A failed exchange: a non-zero error code anywhere in the response, or no usable outcome."""
    if row["status"] not in _FINE_STATUSES:
        return True
    response = row.get("response")
    return isinstance(response, dict) and bool(error_rows(row["api_key"], row["api_version"], response))


# -- JSON ------------------------------------------------------------------------------------------
def iso_time(ts_us: int | None) -> str | None:
    """UTC ISO-8601 with microseconds, exact (no float rounding)."""
    if ts_us is None:
        return None
    text = (_EPOCH + timedelta(microseconds=ts_us)).isoformat(timespec="microseconds")
    return text.replace("+00:00", "Z")


def plain(value: Any, hex_bytes: int = JSON_HEX_BYTES) -> Any:
    """A decoded value as JSON-ready data: bytes as {"bytes": N, "hex": prefix}, uuids as text."""
    if isinstance(value, dict):
        return {k: plain(v, hex_bytes) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v, hex_bytes) for v in value]
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value[:hex_bytes])
        return {"bytes": len(value), "hex": data.hex()}
    if isinstance(value, CutRecords):  # records a snap length cut: how many bytes, how many kept
        size = value.size if value.size >= 0 else None
        return {"bytes": size, "captured": len(value.kept), "hex": value.kept[:hex_bytes].hex()}
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN/Infinity
    return value


def endpoint(ip: str | None, port: int | None) -> str | None:
    if ip is None:
        return None
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def exchange_json(row: dict[str, Any]) -> dict[str, Any]:
    """The JSON object of one exchange, keys in a fixed order."""
    return {
        "capture": row["capture"],
        "conn_id": row["conn_id"],
        "client": endpoint(row.get("client_ip"), row.get("client_port")),
        "broker": endpoint(row.get("broker_ip"), row.get("broker_port")),
        "api_key": row["api_key"],
        "api_name": row["api_name"],
        "api_version": row["api_version"],
        "correlation_id": row["correlation_id"],
        "client_id": row["client_id"],
        "ts_request": iso_time(row["ts_request"]),
        "ts_request_us": row["ts_request"],
        "ts_response": iso_time(row["ts_response"]),
        "ts_response_us": row["ts_response"],
        "latency_ms": row["latency_ms"],
        "request_bytes": row["request_bytes"],
        "response_bytes": row["response_bytes"],
        "status": row["status"],
        "reason": row["reason"],
        "throttle_time_ms": row["throttle_time_ms"],
        "error_code": row["error_code"],
        "error_name": row["error_name"],
        "request": plain(row.get("request")),
        "response": plain(row.get("response")),
    }


def json_text(value: dict[str, Any]) -> str:
    """One JSON line of `show --json`: C0 controls are escaped by JSON itself; DEL and C1 (which
    JSON leaves raw, and an 8-bit CSI is as live as ESC [) as `\\u009b`."""
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    return _C1_DEL.sub(lambda m: f"\\u{ord(m[0]):04x}", text)


# -- tree ------------------------------------------------------------------------------------------
def _scalar(value: Any) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        prefix = bytes(value[:TREE_HEX_BYTES]).hex()
        more = "..." if len(value) > TREE_HEX_BYTES else ""
        return f"<{len(value)} bytes> {prefix}{more}" if len(value) else "<0 bytes>"
    if isinstance(value, CutRecords):
        if value.size < 0:
            return "<not captured>"
        prefix = value.kept[:TREE_HEX_BYTES].hex()
        return f"<{value.size} bytes, {len(value.kept)} captured> {prefix}..."
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    # JSON spelling: null/true/false, and strings quoted with every control character (C0, DEL,
    # C1) a visible escape, so a hostile client id cannot move the terminal's cursor.
    return visible(json.dumps(value, ensure_ascii=False))


def _is_struct_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and isinstance(value[0], dict)


def _inline(item: dict[str, Any]) -> str | None:
    """A small struct of scalars on one line (ApiVersions' api_keys, partition lists...)."""
    if any(isinstance(v, dict) or _is_struct_list(v) for v in item.values()):
        return None
    text = "  ".join(f"{k}: {_scalar(v)}" for k, v in item.items())
    return text if len(text) <= INLINE_WIDTH else None


def tree_lines(message: dict[str, Any], depth: int) -> Iterator[str]:
    """``field: value`` lines of a decoded message, nested structs indented, list items indexed."""
    pad = INDENT * depth
    for name, value in message.items():
        if isinstance(value, dict):
            yield f"{pad}{name}:"
            yield from tree_lines(value, depth + 1)
        elif _is_struct_list(value):
            yield f"{pad}{name}: [{len(value)}]"
            for i, item in enumerate(value):
                inline = _inline(item)
                if inline is not None:
                    yield f"{pad}{INDENT}[{i}] {inline}"
                else:
                    yield f"{pad}{INDENT}[{i}]"
                    yield from tree_lines(item, depth + 2)
        elif isinstance(value, list):
            yield f"{pad}{name}: [{', '.join(_scalar(v) for v in value)}]"
        else:
            yield f"{pad}{name}: {_scalar(value)}"


def _error_summary(row: dict[str, Any]) -> str:
    response = row.get("response")
    if not response:
        return ""
    names = dict.fromkeys(
        error_label(e["error_code"]) for e in error_rows(row["api_key"], row["api_version"], response)
    )
    return f"  error {', '.join(names)}" if names else ""


def header_line(row: dict[str, Any]) -> str:
    ts = iso_time(row["ts_request"])
    ends = f"{endpoint(row.get('client_ip'), row.get('client_port'))} -> "
    ends += f"{endpoint(row.get('broker_ip'), row.get('broker_port'))}"
    latency = f"  {row['latency_ms']:.3f} ms" if row["latency_ms"] is not None else ""
    return (
        f"{ts}  conn {row['conn_id']}  {ends}  {row['api_name']} v{row['api_version']}"
        f"  corr {row['correlation_id']}  client_id {_scalar(row['client_id'])}  {row['status']}"
        f"{latency}{_error_summary(row)}"
    )


# -- records (show --records) --------------------------------------------------------------------
RECORD_TEXT_CHARS = 200  # characters of a record key or value shown as text; hex as TREE_HEX_BYTES


def payload_text(data: bytes | None, limit: int = RECORD_TEXT_CHARS) -> str:
    """A record key or value: `null`; valid UTF-8 as quoted text, every character that is not
    printable (control characters, line separators, bidi controls) and `\\` and `"` escaped as in
    Python (`\\x1b`, `\\u202e`), so the terminal shows them rather than obeys them, cut after
    ``limit`` characters; anything else as ``<N bytes>`` and a hex prefix, like other bytes."""
    if data is None:
        return "null"
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        return _scalar(bytes(data))
    shown = "".join(_escaped(c) for c in text[:limit])
    return f'"{shown}"' + (f"... ({len(data)} bytes)" if len(text) > limit else "")


def _escaped(c: str) -> str:
    if c in '\\"':
        return "\\" + c
    if c.isprintable():
        return c
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def record_lines(records: list[dict[str, Any]]) -> list[str]:
    """The records of one exchange (`records` rows with their keys and values), one line each."""
    lines = [f"{INDENT}records ({len(records)}):"]
    for r in records:
        offset = "?" if r["offset"] is None else r["offset"]
        lines.append(
            f"{INDENT * 2}{r['topic']}/{r['partition']} offset {offset}"
            f"  key {payload_text(r['key'])}  value {payload_text(r['value'])}"
        )
    return lines


def record_json(r: dict[str, Any]) -> dict[str, Any]:
    """One record in `show --json --records`: key and value as text where valid UTF-8 (JSON escapes
    control characters itself), else as {"bytes": N, "hex": prefix}."""

    def payload(data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            return bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            return plain(bytes(data))

    return {
        "topic": r["topic"],
        "partition": r["partition"],
        "offset": r["offset"],
        "key": payload(r["key"]),
        "value": payload(r["value"]),
    }


def tree_text(row: dict[str, Any]) -> str:
    """One exchange: a header line, then the request and response fields indented below it."""
    lines = [header_line(row)]
    if row.get("reason"):
        lines.append(f"{INDENT}reason: {visible(row['reason'])}")
    for side, size_key in (("request", "request_bytes"), ("response", "response_bytes")):
        message = row.get(side)
        size = row.get(size_key)
        if message is None:
            lines.append(f"{INDENT}{side}: none")
            continue
        lines.append(f"{INDENT}{side} ({size} bytes):" if size is not None else f"{INDENT}{side}:")
        lines.extend(tree_lines(message, 2))
    return "\n".join(lines)
