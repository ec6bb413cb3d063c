"""What the tables take from a decoded message: request/response summaries and error codes.

Decoded messages are plain dicts with the spec's snake_case field names (DESIGN.md "The schema
set"), so the same few field names recur across APIs: topics hold `name`/`topic`/`topic_id`,
partitions hold `partition_index`/`partition`/`index`. Walking by those names covers every API
without a hand-written rule per API key. Per-partition facts live in :mod:`kwsniff.rows.partitions`.
"""

from __future__ import annotations

from typing import Any

from kwsniff.protocol import error_name, error_retriable, message_fields
from kwsniff.rows.fact_compiler import PARTITION_KEYS, TOPIC_NAME_KEYS, compile_error_finder
from kwsniff.rows.partitions import (
    COUNTS_ONLY,
    FETCH,
    METADATA,
    PRODUCE,
    REQUEST,
    RESPONSE,
    TOPIC_ID_SOURCES,
    RecordOptions,
    partition_facts,
    record_totals,
    topic_ids,
)
from kwsniff.rows.share import SHARE_APIS, SHARE_FETCH, acknowledgements, acquisitions

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
    elif api_key in LONG_POLLS:
        # How long the broker may hold the poll for data: its latency is judged against this.
        info["max_wait_ms"] = msg.get("max_wait_ms")
    if api_key == FETCH:
        info.update(fetcher(api_version, msg))
    elif api_key in _KRAFT_SENDERS:
        node(api_key, msg, info)
    elif api_key == API_VERSIONS and api_version >= 5:
        # KIP-1242: the cluster and node the client means to reach (null, -1: not said).
        info["intended_cluster_id"] = msg.get("cluster_id")
        intended = msg.get("node_id")
        info["intended_node_id"] = intended if isinstance(intended, int) and intended >= 0 else None
    if type(msg.get("group_id")) is str:
        info["group_id"] = msg["group_id"]
    if api_key in _MEMBER_EPOCHS:
        info["member_epoch"] = _member_epoch(api_key, msg)
    if api_key in _TRANSACTIONAL:
        _producer(msg, info, "")
    parts = partition_facts(api_key, api_version, REQUEST, msg, options)
    if parts:
        if api_key in SHARE_APIS:
            acknowledgements(msg, parts)
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
    parts = partition_facts(api_key, api_version, RESPONSE, msg, options)
    if parts:
        if api_key == SHARE_FETCH:
            acquisitions(msg, parts)
        info["partitions"] = parts
        record_totals(info, parts)
    if api_key in TOPIC_ID_SOURCES:
        info["topic_ids"] = topic_ids(msg)
    if api_key in CLUSTER_ID_SOURCES:
        info["cluster_id"] = msg.get("cluster_id")  # Metadata v2+, DescribeCluster
    if api_key in _PRODUCER_ANSWERS:
        _producer(msg, info, "_response")
    elif api_key == BROKER_REGISTRATION:
        info["broker_epoch"] = msg.get("broker_epoch")  # the epoch the controller gave the broker
    elif api_key == BROKER_HEARTBEAT:
        info["fenced"] = msg.get("is_fenced")
    return info


OFFSET_COMMIT, OFFSET_FETCH, TXN_OFFSET_COMMIT = 8, 9, 28
API_VERSIONS, DESCRIBE_CLUSTER = 18, 60
# Responses that report the cluster's id: Metadata (v2+) and DescribeCluster.
CLUSTER_ID_SOURCES = frozenset({METADATA, DESCRIBE_CLUSTER})
LONG_POLLS = frozenset({FETCH, SHARE_FETCH})
_MEMBER_EPOCHS = frozenset({OFFSET_COMMIT, OFFSET_FETCH, TXN_OFFSET_COMMIT})
# Requests that send a producer id and epoch, and responses that return them (KIP-890: EndTxn v5+
# answers with the epoch the next transaction must use).
INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN = 22, 24, 25, 26
_TRANSACTIONAL = frozenset(
    {INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT}
)
_PRODUCER_ANSWERS = frozenset({INIT_PRODUCER_ID, END_TXN})


# The KRaft metadata log (KIP-500/595): by name, or from Fetch v13 on by its fixed topic id, which no
# Metadata response names (KIP-516).
METADATA_TOPIC = "__cluster_metadata"
METADATA_TOPIC_ID = "00000000-0000-0000-0000-000000000001"


def fetcher(api_version: int, msg: dict[str, Any]) -> dict[str, Any]:
    """Who sent a Fetch: its replica id (the request's field up to v14, replica_state's from v15,
    KIP-903; -1, a consumer's, when that tagged field is absent) and `metadata` (a fetch of the KRaft
    metadata log), `follower` (a broker replicating, replica id >= 0) or `consumer` (replica id < 0)."""
    if api_version >= 15:
        # A tagged field, at the message's end: None where a snap length cut it (unknown), else
        # the decoder's (its default, -1, when absent; the compiled walker leaves an absent one out).
        state = msg.get("replica_state", {})
        replica_id = state.get("replica_id", -1) if isinstance(state, dict) else None
    else:
        replica_id = msg.get("replica_id", -1)
    topics: list[dict[str, Any]] = msg.get("topics") or []
    kind: str | None
    if any(t.get("topic") == METADATA_TOPIC or str(t.get("topic_id")) == METADATA_TOPIC_ID for t in topics):
        kind = "metadata"
    elif replica_id is None:  # a request cut by a snap length before its replica id
        kind = None
    else:
        kind = "follower" if replica_id >= 0 else "consumer"
    return {"replica_id": replica_id, "fetcher": kind}


# KRaft and inter-broker requests that say which node sends them (docs/tables.md "KRaft and ISR
# changes"): Vote (the candidate), BeginQuorumEpoch and EndQuorumEpoch (the leader), AlterPartition
# (the partition leader), BrokerRegistration and BrokerHeartbeat (the broker).
VOTE, BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH, ALTER_PARTITION = 52, 53, 54, 56
BROKER_REGISTRATION, BROKER_HEARTBEAT = 62, 63
_KRAFT_SENDERS = frozenset(
    {VOTE, BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH, ALTER_PARTITION, BROKER_REGISTRATION, BROKER_HEARTBEAT}
)
_SENDER_FIELD = {VOTE: "replica_id", BEGIN_QUORUM_EPOCH: "leader_id", END_QUORUM_EPOCH: "leader_id"}


def node(api_key: int, msg: dict[str, Any], info: dict[str, Any]) -> None:
    """`node_id`, the sender's node id, and `broker_epoch` where the request sends one."""
    field = _SENDER_FIELD.get(api_key)
    if field is None:
        info["node_id"] = msg.get("broker_id")
        if api_key != BROKER_REGISTRATION:
            info["broker_epoch"] = msg.get("broker_epoch")
        return
    # The quorum APIs name the sender per partition; KRaft has one, the metadata log's (KIP-595).
    for topic in msg.get("topics") or ():
        for part in topic.get("partitions") or ():
            info["node_id"] = part.get(field)
            return


def _member_epoch(api_key: int, msg: dict[str, Any]) -> int | None:
    if api_key != OFFSET_FETCH:
        return msg.get("generation_id_or_member_epoch")
    groups: list[dict[str, Any]] = msg.get("groups") or []
    # OffsetFetch v8+ batches groups, each with its member's epoch from v9; one group is the
    # consumer's own fetch, several an admin's, whose epochs differ.
    return groups[0].get("member_epoch") if len(groups) == 1 else None


def _producer(msg: dict[str, Any], info: dict[str, Any], suffix: str) -> None:
    if "producer_id" not in msg:
        # AddPartitionsToTxn v4+ (KIP-890) batches transactions; a producer sends its own only.
        txns: list[dict[str, Any]] = msg.get("transactions") or []
        if len(txns) != 1:
            return
        msg = txns[0]
    info["producer_id" + suffix] = msg.get("producer_id")
    info["producer_epoch" + suffix] = msg.get("producer_epoch")


def error_rows(
    api_key: int,
    api_version: int,
    msg: dict[str, Any],
    group_id: str | None = None,
    topic_names: dict[Any, str] | None = None,
) -> list[dict[str, Any]]:
    """One row per non-zero error code anywhere in a response, with its path and context, in the
    order of the message's fields.

    ``group_id`` is the request's: JoinGroup, SyncGroup, Heartbeat, OffsetCommit... responses do not
    repeat it. ``topic_names`` resolves topic ids (Fetch v13+ responses carry no names, KIP-516)."""
    find = _finders.get((api_key, api_version), _MISSING)
    if find is _MISSING:
        fields = message_fields(api_key, api_version, True)
        find = compile_error_finder(fields, f"{api_key} v{api_version} response")
        _finders[(api_key, api_version)] = find
    if find is None:
        return []
    found: list[tuple[tuple[dict[str, Any], ...], str, str, int]] = []
    find(msg, found)
    if not found:
        return []
    start = {"group_id": group_id} if group_id else {}
    return [_error_row(chain, path, key, code, start, topic_names or {}) for chain, path, key, code in found]


_MISSING: Any = object()
_finders: dict[tuple[int, int], Any] = {}


def _error_row(
    chain: tuple[dict[str, Any], ...],
    path: str,
    key: str,
    code: int,
    ctx: dict[str, Any],
    topic_names: dict[Any, str],
) -> dict[str, Any]:
    """The row of one error code: the context its enclosing structs name, outermost first (errors
    are rare, so the context is worked out only for them)."""
    for node in chain:
        ctx = _node_context(node, ctx, topic_names)
    node = chain[-1]
    return {
        "path": path,
        "error_code": code,
        "error_name": error_name(code),
        "retriable": error_retriable(code),
        "error_message": node.get(key[: -len("code")] + "message"),
        "topic": ctx.get("topic"),
        "partition": ctx.get("partition"),
        "group_id": ctx.get("group_id"),
        "resource_name": ctx.get("resource_name"),
    }


def _node_context(node: dict[str, Any], ctx: dict[str, Any], topic_names: dict[Any, str]) -> dict[str, Any]:
    """ctx plus the topic, partition, group and resource one struct names."""
    ctx = dict(ctx)
    topic = _topic_of(node)
    if "topic" not in topic and "topic_id" in topic and topic["topic_id"] in topic_names:
        topic["topic"] = topic_names[topic["topic_id"]]
    ctx.update(topic)
    for k in PARTITION_KEYS:
        if isinstance(node.get(k), int) and "topic" in ctx:
            ctx["partition"] = node[k]
            break
    for src, dst in _CONTEXT_KEYS.items():
        if isinstance(node.get(src), str):
            ctx[dst] = node[src]
    return ctx


def _topic_of(item: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k in TOPIC_NAME_KEYS:
        v = item.get(k)
        if isinstance(v, str):
            out["topic"] = v
            break
    tid = item.get("topic_id")
    if tid is not None and getattr(tid, "int", 1) != 0:
        # The all-zero uuid means "no topic id" (KIP-516); names are the key then.
        out["topic_id"] = str(tid)
    return out
