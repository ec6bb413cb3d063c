"""The Arrow schema of every kwsniff table. Timestamps are UTC microseconds; every row carries
`capture` and `conn_id` so the tables join (DESIGN.md "Tables")."""

from __future__ import annotations

import pyarrow as pa

from kwsniff.rows import DIRECTION_BYTES
from kwsniff.tables.names import TABLES

TS = pa.timestamp("us", tz="UTC")

_EXCHANGE = [
    ("capture", pa.string()),
    ("conn_id", pa.int64()),
    ("correlation_id", pa.int32()),
    ("api_key", pa.int16()),
    ("api_name", pa.string()),
    ("api_version", pa.int16()),
]
# The exchange's client and times, repeated on the rows of the other exchange tables (each equal to
# its `requests` row's, `client_ip` to its `connections` row's), so that a question about them needs no
# join of two large tables (docs/tables.md; the report reads them).
_CLIENT = [("client_id", pa.string()), ("client_ip", pa.string())]
_TIMES = [("ts_request", TS), ("ts_response", TS), ("latency_ms", pa.float64())]
# Who sent a Fetch (docs/tables.md "Who is fetching"): its replica id (the request's, or
# replica_state's from v15; -1 for a consumer) and `consumer`, `follower` or `metadata` (the KRaft
# metadata log); null on every other API. On `requests` and on Fetch's `partitions` rows.
_FETCHER = [("replica_id", pa.int32()), ("fetcher", pa.string())]
# KRaft and ISR changes (docs/tables.md "KRaft and ISR changes"): the node id a Vote (candidate),
# BeginQuorumEpoch/EndQuorumEpoch (leader), AlterPartition (partition leader), BrokerRegistration or
# BrokerHeartbeat (broker) says it is sent by; null on every other API.
_NODE = [("node_id", pa.int32())]
# Which broker answered (docs/tables.md "Which broker answered"): the connection's broker end, and the
# node id learned for it from Metadata, DescribeCluster and FindCoordinator responses of the run or
# from --broker-map (null when never learned). On `requests`, `partitions`, `errors` and `groups`.
_BROKER = [("broker_ip", pa.string()), ("broker_port", pa.int32()), ("broker_id", pa.int32())]

REQUESTS = pa.schema(
    _EXCHANGE
    + [
        ("client_id", pa.string()),
        ("ts_request", TS),
        ("ts_response", TS),
        ("latency_ms", pa.float64()),
        ("request_bytes", pa.int64()),
        ("response_bytes", pa.int64()),
        ("throttle_time_ms", pa.int32()),
        ("error_code", pa.int16()),
        ("error_name", pa.string()),
        # Non-zero error codes anywhere in the response (top level, topics, partitions...): how
        # many, and the first in the response's field order (the `errors` table has them all).
        ("error_count", pa.int32()),
        ("first_error_code", pa.int16()),
        ("first_error_name", pa.string()),
        ("acks", pa.int16()),
        # Fetch and ShareFetch: how long the client lets the broker hold the poll for data.
        ("max_wait_ms", pa.int32()),
        ("record_count", pa.int64()),
        ("record_bytes", pa.int64()),
        ("status", pa.string()),
        ("reason", pa.string()),
        # Transactions (docs/groups.md "Transactions"): the producer id and epoch a request sends
        # (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit) and the ones
        # a response returns (InitProducerId; EndTxn v5+, where Transactions v2 bumps the epoch of
        # every transaction, KIP-890).
        ("producer_id", pa.int64()),
        ("producer_epoch", pa.int16()),
        ("producer_id_response", pa.int64()),
        ("producer_epoch_response", pa.int16()),
        # The first Apache Kafka release whose brokers refuse this request version ("4.0": KIP-896 and
        # the ZooKeeper-era inter-broker APIs; "4.1": share-group v0), null while every release accepts it
        # (kwsniff.protocol.removed_in; docs/upgrade.md).
        ("removed_in", pa.string()),
        ("client_ip", pa.string()),
    ]
    + _FETCHER
    + _NODE
    + [
        # BrokerHeartbeat and AlterPartition requests' broker epoch, BrokerRegistration responses'
        # (the epoch the controller gave the broker); BrokerHeartbeat responses' is_fenced.
        ("broker_epoch", pa.int64()),
        ("fenced", pa.bool_()),
    ]
    + _BROKER
    + [
        # KIP-1242 (docs/report.md "misrouted"): the ClusterId and NodeId an ApiVersions v5 request
        # says the client means to reach (null when it names none: ClusterId null, NodeId -1), and the
        # cluster id a Metadata (v2+) or DescribeCluster response reported; null on other rows.
        ("intended_cluster_id", pa.string()),
        ("intended_node_id", pa.int32()),
        ("cluster_id", pa.string()),
    ]
)

CONNECTIONS = pa.schema(
    [
        ("capture", pa.string()),
        ("conn_id", pa.int64()),
        ("client_ip", pa.string()),
        ("client_port", pa.int32()),
        ("broker_ip", pa.string()),
        ("broker_port", pa.int32()),
        ("ts_first", TS),
        ("ts_last", TS),
        ("kafka", pa.bool_()),
        ("syn_seen", pa.bool_()),
        ("fin_seen", pa.bool_()),
        ("rst_seen", pa.bool_()),
        ("packets_to_broker", pa.int64()),
        ("packets_to_client", pa.int64()),
        ("bytes_to_broker", pa.int64()),
        ("bytes_to_client", pa.int64()),
        ("frames_to_broker", pa.int64()),
        ("frames_to_client", pa.int64()),
        ("frame_bytes_to_broker", pa.int64()),
        ("frame_bytes_to_client", pa.int64()),
        ("duplicate_bytes", pa.int64()),
        ("gaps", pa.int64()),
        ("gap_bytes", pa.int64()),
        ("implausible_gaps", pa.int64()),
        ("ooo_overflows", pa.int64()),
        ("skipped_bytes", pa.int64()),
        ("not_kafka_bytes", pa.int64()),
        ("resyncs", pa.int64()),
        ("requests", pa.int64()),
        ("responses", pa.int64()),
        ("unanswered", pa.int64()),
        ("no_response_expected", pa.int64()),
        ("orphan_responses", pa.int64()),
        ("decode_errors", pa.int64()),
        ("undecodable_frames", pa.int64()),
        ("client_id", pa.string()),
        ("client_software_name", pa.string()),
        ("client_software_version", pa.string()),
        ("protocol_guess", pa.string()),
        ("tls", pa.bool_()),
        ("tls_version", pa.string()),
        ("tls_sni", pa.string()),
        ("tls_state", pa.string()),  # kwsniff.tls.TLS_STATES; null when the connection is not TLS
        ("tls_cipher", pa.string()),
        ("tls_failed_records", pa.int64()),  # records whose AEAD tag check failed
        ("sasl_mechanism", pa.string()),
        ("sasl_outcome", pa.string()),
        ("sasl_tokens", pa.int64()),
        ("sasl_authenticated", pa.bool_()),
        # The identity the client's first SASL token claims (kwsniff.kafka.sasl.principal: PLAIN
        # authcid, SCRAM user, OAUTHBEARER JWT `sub`; null for GSSAPI); never a password or proof.
        ("sasl_principal", pa.string()),
        # Tunnels the connection was seen in, comma-separated, each a path outermost first
        # ("vxlan:vni=42", "gre:key=7/vxlan:vni=1"); null for plain traffic.
        ("tunnel", pa.string()),
        # Copies of packets already seen (mirrored twice, two tunnel ids), dropped before decoding.
        ("duplicate_packets", pa.int64()),
        # Why kwsniff stopped following the connection before it ended: "idle" (no packet for the
        # idle timeout of capture time) or "memory" (evicted under --memory-limit); null otherwise.
        ("expired", pa.string()),
        # The accounting invariant, per direction (docs/accounting.md): stream_bytes = frame_bytes
        # + gap_bytes + skipped_bytes + sasl_bytes + tls_overhead_bytes + encrypted_bytes +
        # not_kafka_bytes. decrypted_bytes (TLS plaintext) is not a term: it became frames or skips.
        *[(name, pa.int64()) for name in DIRECTION_BYTES],
    ]
)

ERRORS = pa.schema(
    _EXCHANGE
    + [
        ("path", pa.string()),
        ("error_code", pa.int16()),
        ("error_name", pa.string()),
        ("retriable", pa.bool_()),
        ("error_message", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("group_id", pa.string()),
        ("resource_name", pa.string()),
    ]
    + _CLIENT
    + _TIMES
    + _BROKER
)

# One row per topic-partition per exchange, request and response merged (kwsniff/rows/partitions.py).
# Produce record facts come from the request, Fetch ones from the response; offsets by API: Produce
# base_offset (and first/last_offset, the broker-assigned range of the records sent), Fetch
# fetch_offset/high_watermark/last_stable_offset/log_start_offset and first/last_offset of the records
# received, ListOffsets target_timestamp (asked) and offset/timestamp (answered), OffsetCommit/
# OffsetFetch committed_offset, DeleteRecords offset (asked) and log_start_offset (answered),
# OffsetForLeaderEpoch leader_epoch and offset (its end offset), Metadata leader_id/leader_epoch.
PARTITIONS = pa.schema(
    _EXCHANGE
    + [
        ("group_id", pa.string()),
        ("topic", pa.string()),
        ("topic_id", pa.string()),
        ("partition", pa.int32()),
        ("error_code", pa.int16()),
        ("error_name", pa.string()),
        ("record_count", pa.int64()),
        ("record_bytes", pa.int64()),
        ("batch_count", pa.int32()),
        ("compression", pa.string()),
        ("crc_errors", pa.int32()),
        ("partial_bytes", pa.int64()),
        ("control_batches", pa.int32()),
        ("capped_batches", pa.int32()),
        ("record_errors", pa.int32()),
        ("record_error", pa.string()),
        ("fetch_offset", pa.int64()),
        ("base_offset", pa.int64()),
        ("first_offset", pa.int64()),
        ("last_offset", pa.int64()),
        ("high_watermark", pa.int64()),
        ("last_stable_offset", pa.int64()),
        ("log_start_offset", pa.int64()),
        ("lag", pa.int64()),
        ("committed_offset", pa.int64()),
        ("offset", pa.int64()),
        ("timestamp", pa.int64()),
        ("target_timestamp", pa.int64()),
        ("leader_id", pa.int32()),
        ("leader_epoch", pa.int32()),
        # OffsetCommit/TxnOffsetCommit generation_id_or_member_epoch (a classic group's generation,
        # a consumer group's member epoch from v9, KIP-848), OffsetFetch v9+ member_epoch.
        ("member_epoch", pa.int32()),
        # Share groups (KIP-932, kwsniff/rows/share.py; docs/groups.md "Share groups"). ShareFetch
        # responses: the offsets acquired for the member, those delivered before (DeliveryCount > 1),
        # the highest DeliveryCount, the acquired range and the lock timeout (v1+). ShareFetch and
        # ShareAcknowledge requests: the offsets accepted, released and rejected, and their range.
        ("acquired_records", pa.int64()),
        ("redelivered_records", pa.int64()),
        ("max_delivery_count", pa.int16()),
        ("acquired_first_offset", pa.int64()),
        ("acquired_last_offset", pa.int64()),
        ("acquisition_lock_timeout_ms", pa.int32()),
        ("accepted_records", pa.int64()),
        ("released_records", pa.int64()),
        ("rejected_records", pa.int64()),
        ("acknowledged_first_offset", pa.int64()),
        ("acknowledged_last_offset", pa.int64()),
        # Produce record sets in message format v0 or v1 (magic 0/1): "4.0", the release whose brokers
        # refuse them (KIP-724); null for magic 2 and on every other API.
        ("removed_in", pa.string()),
    ]
    + _CLIENT
    + _TIMES
    + _FETCHER
    + _NODE
    + [
        # AlterPartition: the ISR the partition leader asks for (NewIsr, or NewIsrWithEpochs' broker
        # ids from v3) and the one the controller committed (the response's Isr), "1,2,3" as listed;
        # the partition epoch (the response's, else the request's expected one). Vote responses:
        # whether the vote was granted.
        ("isr", pa.string()),
        ("new_isr", pa.string()),
        ("partition_epoch", pa.int32()),
        ("vote_granted", pa.bool_()),
    ]
    + _BROKER
)

# One row per record of a Produce request or Fetch response; opt-in (`kwsniff read --records`).
# Produce offsets are the ones the broker assigned (null when no response assigned any).
RECORDS = pa.schema(
    _EXCHANGE
    + [
        ("topic", pa.string()),
        ("topic_id", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", TS),
        ("timestamp_type", pa.string()),
        ("key_size", pa.int32()),
        ("value_size", pa.int32()),
        ("header_count", pa.int32()),
        ("producer_id", pa.int64()),
        ("producer_epoch", pa.int16()),
        ("sequence", pa.int32()),
        ("compression", pa.string()),
        ("is_control", pa.bool_()),
        ("key", pa.binary()),  # only with --record-payloads
        ("value", pa.binary()),
    ]
)

# One row per JoinGroup, SyncGroup, Heartbeat or LeaveGroup exchange (kwsniff/rows/groups.py):
# member_id is the one the response assigned (JoinGroup) or the request's; protocol_name is the chosen
# protocol, or for an unanswered JoinGroup the offered ones comma-separated; members is the member
# list of a JoinGroup response (sent to the leader only), the assignments of a SyncGroup request (sent
# by the leader only) or the members leaving in a LeaveGroup v3+ request.
GROUPS = pa.schema(
    _EXCHANGE
    + [
        ("group_id", pa.string()),
        ("member_id", pa.string()),
        ("group_instance_id", pa.string()),
        ("generation_id", pa.int32()),
        ("protocol_type", pa.string()),
        ("protocol_name", pa.string()),
        ("leader_id", pa.string()),
        ("members", pa.int32()),
        ("error_code", pa.int16()),
        ("error_name", pa.string()),
        ("ts_request", TS),
        ("ts_response", TS),
        ("latency_ms", pa.float64()),
        # Every group protocol (docs/groups.md): classic, consumer (KIP-848), share (KIP-932),
        # streams (KIP-1071); what the exchange did to the member.
        ("protocol", pa.string()),
        ("event", pa.string()),
        ("rack_id", pa.string()),
        ("member_epoch", pa.int32()),  # sent by the member
        ("member_epoch_response", pa.int32()),  # returned by the coordinator
        ("heartbeat_interval_ms", pa.int32()),
        ("session_timeout_ms", pa.int32()),
        ("rebalance_timeout_ms", pa.int32()),
        ("subscribed_topics", pa.string()),  # comma-separated, sorted
        ("subscribed_regex", pa.string()),
        ("server_assignor", pa.string()),
        # `topic:0,1,2;topic2:3`, topics named through the topic-id map, sorted.
        ("assignment", pa.string()),
        ("owned_partitions", pa.string()),
    ]
    + _CLIENT
    + _BROKER
)

# One row per input of `kwsniff read` or `kwsniff spark` (docs/captures-table.md): what was read of
# it and whether its rows are in the other tables. status: ok; damaged (decoded, but the file is cut
# or broken somewhere: `reason` says where, as the warning did); failed (no rows of it anywhere:
# `reason` is the one-line error). `path` is absolute (a URI without its query), `bytes` the file's
# size (compressed size for .gz), null when it could not be opened.
CAPTURES = pa.schema(
    [
        ("capture", pa.string()),
        ("path", pa.string()),
        ("bytes", pa.int64()),
        ("packets", pa.int64()),  # null when failed
        ("status", pa.string()),
        ("reason", pa.string()),
        ("warnings", pa.int32()),
        ("started", TS),  # wall clock when its decoding began
        ("duration_ms", pa.float64()),  # wall time of its decoding (Spark: summed over its tasks)
        # Where the capture ended as it knew it: its last packet's time (null when failed or empty).
        ("ended", TS),
        # Claims of a broker's node id that disagreed with the id its address had (docs/tables.md
        # "Which broker answered"; the summary names them); null when failed.
        ("broker_conflicts", pa.int64()),
    ]
)

# One row per rotation period of a live capture (`kwsniff capture`): what the interface gave and lost.
CAPTURE_STATS = pa.schema(
    [
        ("capture", pa.string()),
        ("period_start", TS),
        ("period_end", TS),
        ("packets", pa.int64()),
        ("bytes", pa.int64()),
        ("kernel_drops", pa.int64()),  # libpcap ps_drop during the period
        ("if_drops", pa.int64()),  # libpcap ps_ifdrop during the period
        ("queue_drops", pa.int64()),  # read from the kernel, dropped because decoding fell behind
        ("worker", pa.int32()),  # the capture worker (`--workers`) whose socket these counters are
    ]
)

SCHEMAS: dict[str, pa.Schema] = {
    "requests": REQUESTS,
    "connections": CONNECTIONS,
    "errors": ERRORS,
    "partitions": PARTITIONS,
    "records": RECORDS,
    "groups": GROUPS,
    "captures": CAPTURES,
    "capture_stats": CAPTURE_STATS,
}
# The light list of names (kwsniff.tables.names) must name exactly these, in this order.
assert tuple(SCHEMAS) == TABLES, (tuple(SCHEMAS), TABLES)
