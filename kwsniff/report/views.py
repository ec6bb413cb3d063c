"""The views every report section reads: the tables (each with every column of its schema, nulls
where an older table lacks one) and a few derived views shared by sections, in DuckDB SQL."""

from __future__ import annotations

# The groups columns of the KIP-848/share/streams decoding (docs/groups.md "Columns"): the report
# reads them whether or not the tables it is given were written by a kwsniff that fills them.
GROUPS_CONTRACT = (
    ("protocol", "VARCHAR"),
    ("event", "VARCHAR"),
    ("rack_id", "VARCHAR"),
    ("member_epoch", "INTEGER"),
    ("member_epoch_response", "INTEGER"),
    ("heartbeat_interval_ms", "INTEGER"),
    ("session_timeout_ms", "INTEGER"),
    ("rebalance_timeout_ms", "INTEGER"),
    ("subscribed_topics", "VARCHAR"),
    ("subscribed_regex", "VARCHAR"),
    ("server_assignor", "VARCHAR"),
    ("assignment", "VARCHAR"),
    ("owned_partitions", "VARCHAR"),
)
TABLES = ("requests", "connections", "errors", "partitions", "groups", "records", "captures")


def _duck_type(arrow_type: object) -> str:
    import pyarrow as pa

    if pa.types.is_timestamp(arrow_type):
        return "TIMESTAMPTZ"
    return {
        "string": "VARCHAR",
        "int64": "BIGINT",
        "int32": "INTEGER",
        "int16": "SMALLINT",
        "double": "DOUBLE",
        "bool": "BOOLEAN",
        "binary": "BLOB",
    }[str(arrow_type)]


def table_columns() -> dict[str, list[tuple[str, str]]]:
    """Per table, (column, DuckDB type) of every column the sections may read."""
    from kwsniff.tables.schemas import SCHEMAS

    out = {t: [(f.name, _duck_type(f.type)) for f in SCHEMAS[t]] for t in TABLES}
    have = {c for c, _ in out["groups"]}
    out["groups"] += [(c, t) for c, t in GROUPS_CONTRACT if c not in have]
    return out


# Views the sections share. `produced`: each acknowledged Produce batch's offset range and the time
# the broker's acknowledgement was seen, i.e. when those offsets became readable.
# `exchanges`: each request with its client's address, SASL mechanism and software;
# `partition_exchanges`: each topic-partition row (but Metadata's, the most numerous, which no section
# reads) with its request's client and times. Each is one join of the largest tables, made once and
# kept for every section, with only the columns sections read (every column is a copy per report).
DERIVED = {
    "exchanges": """
        SELECT r.capture, r.conn_id, r.correlation_id, r.api_key, r.client_id, r.ts_request, r.ts_response,
               r.latency_ms, c.client_ip, c.sasl_mechanism, c.sasl_principal, c.client_software_name,
               c.client_software_version
        FROM requests r LEFT JOIN connections c ON c.capture = r.capture AND c.conn_id = r.conn_id""",
    "partition_exchanges": """
        SELECT p.capture, p.conn_id, p.correlation_id, p.api_key, p.topic, p.partition, p.group_id,
               p.record_count, p.record_bytes, p.first_offset, p.last_offset, p.high_watermark,
               p.fetch_offset, p.committed_offset, p.error_code,
               r.client_id, r.client_ip, r.ts_request, r.ts_response, r.latency_ms
        FROM partitions p JOIN exchanges r
          ON r.capture = p.capture AND r.conn_id = p.conn_id AND r.correlation_id = p.correlation_id
        WHERE p.api_key <> 3""",
    "produced": """
        SELECT capture, topic, partition, first_offset, last_offset, ts_request, ts_response AS ts_ack
        FROM partition_exchanges
        WHERE api_key = 0 AND first_offset IS NOT NULL AND last_offset IS NOT NULL AND ts_response IS NOT NULL""",
    # Offsets' record timestamps (Fetch rows of the opt-in records table): lag's fallback.
    "record_times": """
        SELECT capture, topic, partition, "offset", MIN("timestamp") AS ts
        FROM records WHERE api_key = 1 AND "offset" IS NOT NULL AND "timestamp" IS NOT NULL
        GROUP BY 1, 2, 3, 4""",
    # Every moment a partition's high watermark is known: Fetch responses say it; a Produce
    # acknowledgement says the log reached at least last_offset + 1.
    "watermarks": """
        SELECT capture, topic, partition, ts_response AS ts, high_watermark AS hwm
        FROM partition_exchanges
        WHERE api_key = 1 AND high_watermark IS NOT NULL AND ts_response IS NOT NULL
        UNION ALL
        SELECT capture, topic, partition, ts_ack AS ts, last_offset + 1 AS hwm FROM produced""",
    # Committed offsets: OffsetCommit requests (what the group stores) and OffsetFetch responses
    # (what it read back), each with the client that sent it.
    "commits": """
        SELECT capture, group_id, topic, partition, committed_offset,
               CASE WHEN api_key = 8 THEN ts_request ELSE ts_response END AS ts, client_id, client_ip
        FROM partition_exchanges
        WHERE api_key IN (8, 9) AND committed_offset >= 0 AND group_id IS NOT NULL
          AND (error_code IS NULL OR error_code = 0)""",
    # Which client (id and address) is in which group: it committed for it or joined it.
    "group_clients": """
        SELECT DISTINCT capture, group_id, client_id, client_ip FROM commits
        UNION
        SELECT DISTINCT g.capture, g.group_id, r.client_id, r.client_ip
        FROM groups g JOIN exchanges r
          ON r.capture = g.capture AND r.conn_id = g.conn_id AND r.correlation_id = g.correlation_id""",
    # The last packet time of each capture: "now" for a stopped group.
    "capture_end": """
        SELECT capture, MAX(ts) AS ts_end FROM (
          SELECT capture, ts_last AS ts FROM connections
          UNION ALL SELECT capture, COALESCE(ts_response, ts_request) AS ts FROM requests) AS t
        GROUP BY capture""",
}
