"""Produce and Fetch summaries read straight from the body by compiled code (kwsniff/rows/_partfacts.c).

A many-partition Fetch costs kwsniff per partition: decoding each partition struct into a dict, then
the generated walker (fact_compiler.py) copying its facts into another. For the four bodies that name
most partitions (Produce and Fetch, request and response), :func:`request_info` and
:func:`response_info` give `request_summary` / `response_summary`'s answer without the decoded
message: the C walker reads the body by a plan made here from the message version's fields, and
fills the partition facts dicts, the same keys and values, directly.

Either answers None when the Python path must answer instead: the extension is not built or
``KWSNIFF_PURE_PYTHON=1``, the version has no plan (legacy record formats, a shape the walker was not
written for), or the body holds anything but the common case (see the C file's header). Both paths
give the same tables: tests/test_partfacts.py compares them on every test and bench capture.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from kwsniff.protocol import message_fields
from kwsniff.protocol.decode import is_flexible
from kwsniff.records import _crc
from kwsniff.rows.extract import METADATA_TOPIC, METADATA_TOPIC_ID, fetcher
from kwsniff.rows.fact_compiler import PARTITION_KEYS, SKIPPED_LISTS, TOPIC_NAME_KEYS
from kwsniff.rows.partitions import _FIELDS, _RENAMES, FETCH, PRODUCE, REQUEST, RESPONSE, record_totals

_partfacts: Any = None
if os.environ.get("KWSNIFF_PURE_PYTHON", "") != "1":
    try:
        from kwsniff.rows import _partfacts  # type: ignore[attr-defined,no-redef]
    except ImportError:  # not built (no C compiler at install): the Python path answers
        _partfacts = None

AVAILABLE = _partfacts is not None
if AVAILABLE and _partfacts.HARDWARE_CRC32C:
    _crc.use(_partfacts.crc32c)
# The oldest versions whose records fields hold magic 2 batches (KIP-98): older ones would always fall
# back, so they get no plan.
FIRST_VERSION = {PRODUCE: 3, FETCH: 4}
_METADATA_ID = uuid.UUID(METADATA_TOPIC_ID).bytes
# Root values each summary takes, by (api key, side).
_ROOT_VALUES = {
    (PRODUCE, REQUEST): frozenset({"acks"}),
    (FETCH, REQUEST): frozenset({"max_wait_ms", "replica_id"}),
    (PRODUCE, RESPONSE): frozenset({"throttle_time_ms", "error_code"}),
    (FETCH, RESPONSE): frozenset({"throttle_time_ms", "error_code"}),
}

# Field codes and flags of _partfacts.c.
_FIXED_CODES = {"int8": 1, "int16": 2, "int32": 3, "int64": 4, "uint16": 5, "uint32": 6, "bool": 7}
_SKIP, _UUID, _STRING, _BYTES, _RECORDS, _STRUCT, _ARRAY_STRUCT, _ARRAY_FIXED, _ARRAY_VAR = (
    0,
    8,
    9,
    10,
    11,
    12,
    13,
    14,
    15,
)
_FIXED_SIZES = {"int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint16": 2, "uint32": 4, "bool": 1}
_SIZES = {**_FIXED_SIZES, "float64": 8, "uuid": 16}
_NULLABLE, _ERROR, _TOPIC_NAME, _TOPIC_ID, _PARTITION, _ROOT, _NAMED = 1, 2, 4, 8, 16, 32, 64
_OTHER, _ROOT_ROLE, _TOPIC, _PART = 0, 1, 2, 3
_INT_KINDS = frozenset({"int8", "int16", "int32", "int64", "uint16", "uint32"})


class _Unsupported(Exception):
    """A message version whose shape the C walker does not cover: the Python path serves it."""


class _Planner:
    def __init__(self, api_key: int, side: int, version: int, flexible: bool) -> None:
        self.version = version
        self.flexible = flexible
        self.roots = _ROOT_VALUES[(api_key, side)]
        self.renames = _RENAMES.get((api_key, side), _FIELDS)
        # A Fetch request's replica_state tag (v15+) says who fetches: any root tag of it goes to the
        # Python path. The other roots' tags (a response's node_endpoints...) change no summary.
        self.root_tags_matter = (api_key, side) == (FETCH, REQUEST)

    def nullable(self, field: Any) -> bool:
        rng = field[3]
        return rng is not None and rng[0] <= self.version <= rng[1]

    def node(self, fields: tuple[Any, ...], role: int) -> tuple[int, tuple[Any, ...], Any]:
        """A struct's plan: (role, its fields in wire order, its tagged fields as (tag, field), or
        None where any tag sends the body to the Python path)."""
        plan: list[tuple[int, int, int, str | None, Any]] = []
        tagged: list[tuple[int, Any]] = []
        names = [str(f[0]) for f in fields]
        pkey = next(
            (k for k in PARTITION_KEYS if k in names and fields[names.index(k)][1] in _INT_KINDS), None
        )
        topic_names = [k for k in TOPIC_NAME_KEYS if k in names and fields[names.index(k)][1] == "string"]
        if role == _TOPIC and len(topic_names) > 1:
            raise _Unsupported("two topic name fields")
        columns: set[str] = set()
        for field in fields:
            name, kind, tag = str(field[0]), field[1], field[4]
            if tag is not None:
                if not self.flexible:
                    raise _Unsupported("a tagged field in a version without tags")
                # Absent tags read as defaults in the Python path: none may be a fact.
                if role == _PART and (name == pkey or (self.renames.get(name) and kind in _INT_KINDS)):
                    raise _Unsupported("a tagged fact")
                if name.endswith("error_code"):
                    raise _Unsupported("a tagged error code")
                entry = self.field(field, _OTHER, None, set(), [])
                if role == _PART and kind == "struct" and self.renames.get(name):
                    # A Fetch v12+ partition's current leader (KIP-595), a fact when it names one:
                    # any id >= 0 in it sends the body to the Python path (-1, none, is skipped).
                    entry = self.named(entry)
                tagged.append((int(tag), entry))
                continue
            plan.append(self.field(field, role, pkey, columns, topic_names))
        return role, tuple(plan), None if role == _ROOT_ROLE and self.root_tags_matter else tuple(tagged)

    @staticmethod
    def named(entry: tuple[int, int, int, str | None, Any]) -> tuple[int, int, int, str | None, Any]:
        """A struct entry whose int32 fields (node ids, epochs) send the body to the Python path when
        >= 0."""
        code, flags, size, column, (role, fields, tagged) = entry
        marked = tuple(
            (c, f | _NAMED if c == _FIXED_CODES["int32"] else f, n, col, child)
            for c, f, n, col, child in fields
        )
        return (code, flags, size, column, (role, marked, tagged))

    def field(
        self, field: Any, role: int, pkey: str | None, columns: set[str], topic_names: list[str]
    ) -> tuple[int, int, int, str | None, Any]:
        """One field's entry: (code, flags, size, column or None, child struct's plan or None)."""
        name, kind, children = str(field[0]), field[1], field[6]
        flags = _NULLABLE if self.nullable(field) else 0
        if kind in _FIXED_CODES:
            column: str | None = None
            if name.endswith("error_code"):
                flags |= _ERROR
            if role == _ROOT_ROLE and name in self.roots:
                flags |= _ROOT
                column = name
            elif role == _PART and name == pkey:
                flags |= _PARTITION
                column = "partition"
            elif role == _PART and kind in _INT_KINDS and (renamed := self.renames.get(name)):
                column = renamed
                if column in columns:
                    raise _Unsupported("two fields of one column")
                columns.add(column)
            return (_FIXED_CODES[kind], flags, _FIXED_SIZES[kind], column, None)
        if kind == "float64":
            return (_SKIP, 0, 8, None, None)
        if kind == "uuid":
            return (_UUID, _TOPIC_ID if role == _TOPIC and name == "topic_id" else 0, 16, None, None)
        if kind == "string":
            if role == _TOPIC and name in topic_names:
                flags |= _TOPIC_NAME
            return (_STRING, flags, 0, None, None)
        if kind in ("bytes", "records"):
            return (_BYTES if kind == "bytes" else _RECORDS, flags, 0, None, None)
        if kind in ("struct", "[]struct"):
            code = _STRUCT if kind == "struct" else _ARRAY_STRUCT
            return (code, flags, 0, None, self.node(children, self.inner(role, name, children)))
        if kind in ("[]string", "[]bytes"):
            return (_ARRAY_VAR, flags, int(kind == "[]bytes"), None, None)
        if kind[2:] in _SIZES:
            return (_ARRAY_FIXED, flags, _SIZES[kind[2:]], None, None)
        raise _Unsupported(f"type {kind}")

    def inner(self, role: int, name: str, children: tuple[Any, ...]) -> int:
        """The role of a struct (or list item) inside one of ``role``: the Python walker's reading of
        the Produce and Fetch shapes, root > topics > partitions; anything it could read otherwise is
        refused."""
        names = {str(f[0]): f[1] for f in children}
        topical = any(names.get(k) == "string" for k in TOPIC_NAME_KEYS) or "topic_id" in names
        partition = any(names.get(k) in _INT_KINDS for k in PARTITION_KEYS)
        if role == _ROOT_ROLE and name not in SKIPPED_LISTS and topical:
            return _TOPIC
        if role == _TOPIC and name not in SKIPPED_LISTS and partition:
            return _PART
        if (
            name not in SKIPPED_LISTS
            and (topical or partition)
            or role == _TOPIC
            and "[]struct" in names.values()
        ):
            raise _Unsupported(f"{name}: a list the Python walker may read")
        return _OTHER


_plans: dict[tuple[int, int, int], Any] = {}


def _plan(api_key: int, version: int, side: int) -> Any:
    key = (api_key, version, side)
    if key in _plans:
        return _plans[key]
    plan = None
    if _partfacts is not None and api_key in FIRST_VERSION and version >= FIRST_VERSION[api_key]:
        try:
            response = side == RESPONSE
            fields = message_fields(api_key, version, response)
            flexible = is_flexible(api_key, version, response)
            root = _Planner(api_key, side, version, flexible).node(fields, _ROOT_ROLE)
            plan = _partfacts.make_plan(root, flexible, api_key != PRODUCE)
        except _Unsupported:
            plan = None
        except Exception:  # an unknown version (the decoder reports it): the Python path answers
            plan = None
    _plans[key] = plan
    return plan


def has_plan(api_key: int, version: int, side: int) -> bool:
    return _plan(api_key, version, side) is not None


def request_info(api_key: int, version: int, body: Any) -> dict[str, Any] | None:
    """`request_summary`'s answer for a Produce or Fetch request body, or None: the Python path answers."""
    plan = _plans.get((api_key, version, REQUEST), _MISSING)
    if plan is _MISSING:
        plan = _plan(api_key, version, REQUEST)
    if plan is None:
        return None
    parts: dict[Any, dict[str, Any]] = {}
    if api_key == FETCH:
        root = _partfacts.walk(plan, body, parts, _crc.crc32c, METADATA_TOPIC, _METADATA_ID)
        if root is None:
            return None
        info = {"max_wait_ms": root.get("max_wait_ms")}
        # A KRaft metadata fetch, or a replica_state tag (v15+), went to the Python path: what is left
        # is the request's replica id (v0-14) or the absent tag's -1.
        info.update(fetcher(version, root))
    else:
        root = _partfacts.walk(plan, body, parts, _crc.crc32c, None, None)
        if root is None:
            return None
        info = {"acks": root.get("acks")}
    if parts:
        info["partitions"] = parts
        if not _partfacts.record_totals(info, parts):
            record_totals(info, parts)
    return info


def response_info(api_key: int, version: int, body: Any) -> dict[str, Any] | None:
    """`response_summary`'s answer for a Produce or Fetch response body with no error code, or None."""
    plan = _plans.get((api_key, version, RESPONSE), _MISSING)
    if plan is _MISSING:
        plan = _plan(api_key, version, RESPONSE)
    if plan is None:
        return None
    parts: dict[Any, dict[str, Any]] = {}
    root = _partfacts.walk(plan, body, parts, _crc.crc32c, None, None)
    if root is None:
        return None
    info = root  # throttle_time_ms and error_code where the version has them
    if parts:
        info["partitions"] = parts
        if not _partfacts.record_totals(info, parts):
            record_totals(info, parts)
    return info


_MISSING: Any = object()


def merge_rows(
    index: dict[str, int],
    base: tuple[Any, ...],
    shared: dict[str, Any],
    req_parts: dict[Any, dict[str, Any]],
    resp_parts: dict[Any, dict[str, Any]],
    api_key: int,
    topic_names: dict[Any, str],
) -> list[tuple[Any, ...] | None]:
    """merged_rows' rows of one Produce or Fetch exchange as tuples in the order of ``index`` (column
    -> position), ``base`` holding the exchange's shared values; None for a row the Python path must
    build (records kept, record damage, an error code, a topic id not named yet)."""
    rows: list[tuple[Any, ...] | None] = _partfacts.merge_rows(
        index, base, shared, req_parts, resp_parts, api_key == PRODUCE, topic_names, "NONE"
    )
    return rows


# Where each column of an exchange's rows comes from, as kwsniff.rows.builder.ExchangeRows writes
# them (_context, _exchange, _who, _broker, _requests_row): the codes of _partfacts.c's exchange_rows.
# A repetition of those methods for the compiled path (tests/test_partfacts.py compares the tables);
# a column either of them changes must change here too.
_X = {
    name: code
    for code, name in enumerate(
        (
            None,
            "capture",
            "conn_id",
            "correlation_id",
            "api_key",
            "api_name",
            "api_version",
            "client_id",
            "client_ip",
            "ts_request",
            "ts_response",
            "latency_ms",
            "broker_ip",
            "broker_port",
            "broker_id",
            "request_bytes",
            "response_bytes",
            "error_name",
            "status",
            "reason",
            "removed_in",
        )
    )
}
_FROM_REQUEST, _FROM_RESPONSE, _FROM_EITHER = len(_X), len(_X) + 1, len(_X) + 2
# The columns every row of an exchange shares (builder's `shared`: context, exchange, who, broker).
SHARED_COLUMNS = frozenset(
    {
        "capture",
        "conn_id",
        "correlation_id",
        "api_key",
        "api_name",
        "api_version",
        "client_id",
        "client_ip",
        "ts_request",
        "ts_response",
        "latency_ms",
        "replica_id",
        "fetcher",
        "node_id",
        "broker_ip",
        "broker_port",
        "broker_id",
    }
)
_WHO = ("replica_id", "fetcher", "node_id")  # builder._who: the request summary's
_REQUESTS_FROM = {
    **dict.fromkeys(
        (
            *_WHO,
            "acks",
            "max_wait_ms",
            "producer_id",
            "producer_epoch",
            "intended_cluster_id",
            "intended_node_id",
        ),
        _FROM_REQUEST,
    ),
    **dict.fromkeys(
        (
            "throttle_time_ms",
            "error_code",
            "error_count",
            "first_error_code",
            "first_error_name",
            "producer_id_response",
            "producer_epoch_response",
            "fenced",
            "cluster_id",
        ),
        _FROM_RESPONSE,
    ),
    **dict.fromkeys(("record_count", "record_bytes", "broker_epoch"), _FROM_EITHER),
}


def _source(column: str, requests: bool) -> tuple[int, str | None]:
    if column in _REQUESTS_FROM and (requests or column in _WHO):
        return _REQUESTS_FROM[column], column
    if column in _X and (requests or column in SHARED_COLUMNS):
        return _X[column], None
    if requests:
        raise _Unsupported(f"requests column {column}")
    return 0, None  # a partitions column the exchange's shared values leave null


def exchange_plan(requests: tuple[str, ...], partitions: tuple[str, ...], status_ok: str) -> Any:
    """exchange_rows' plan for a sink's `requests` and `partitions` columns (in its order), or None:
    the extension is not built, or a requests column has no source here (the Python path writes)."""
    if _partfacts is None:
        return None
    from kwsniff.protocol import api_name, error_name, removed_in

    try:
        req_sources = tuple(_source(c, True) for c in requests)
    except _Unsupported:
        return None
    part_sources = tuple(_source(c, False) for c in partitions)
    index = {c: i for i, c in enumerate(partitions)}
    return _partfacts.exchange_plan(
        req_sources, part_sources, index, api_name, removed_in, error_name(0), status_ok
    )


def exchange_rows(
    plan: Any,
    handler: tuple[str, int, str | None],
    broker: dict[str, Any],
    req: Any,
    resp: Any,
    reqi: dict[str, Any],
    respi: dict[str, Any],
    topic_names: dict[Any, str],
) -> tuple[tuple[Any, ...], list[tuple[Any, ...]] | None] | None:
    """The `requests` row and the `partitions` rows of one Produce or Fetch exchange whose status is
    ok, as values in the sink's column order, or None: the Python path writes the exchange (a
    reason, a group, an error code, a broker without a node id yet, a row merged_rows builds)."""
    result: tuple[tuple[Any, ...], list[tuple[Any, ...]] | None] | None = _partfacts.exchange_rows(
        plan, handler, broker, req, resp, reqi, respi, topic_names
    )
    return result
