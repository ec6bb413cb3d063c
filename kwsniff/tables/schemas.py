"""The Arrow schema of every kwsniff table. Timestamps are UTC microseconds; every row carries
`capture` and `conn_id` so the tables join (DESIGN.md "Tables")."""

from __future__ import annotations

import pyarrow as pa

TS = pa.timestamp("us", tz="UTC")

_EXCHANGE = [
    ("capture", pa.string()),
    ("conn_id", pa.int64()),
    ("correlation_id", pa.int32()),
    ("api_key", pa.int16()),
    ("api_name", pa.string()),
    ("api_version", pa.int16()),
]

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
        ("acks", pa.int16()),
        ("record_count", pa.int64()),
        ("record_bytes", pa.int64()),
        ("status", pa.string()),
        ("reason", pa.string()),
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
)

PARTITIONS = pa.schema(
    _EXCHANGE
    + [
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
        ("fetch_offset", pa.int64()),
        ("base_offset", pa.int64()),
        ("first_offset", pa.int64()),
        ("last_offset", pa.int64()),
        ("high_watermark", pa.int64()),
        ("last_stable_offset", pa.int64()),
        ("log_start_offset", pa.int64()),
        ("committed_offset", pa.int64()),
        ("offset", pa.int64()),
        ("timestamp", pa.int64()),
        ("lag", pa.int64()),
    ]
)

SCHEMAS: dict[str, pa.Schema] = {
    "requests": REQUESTS,
    "connections": CONNECTIONS,
    "errors": ERRORS,
    "partitions": PARTITIONS,
}
TABLES = tuple(SCHEMAS)
