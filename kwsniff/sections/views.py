"""The views every report section reads: the tables (each with every column of its schema, nulls
where an older table lacks one) and a few derived views shared by sections, in DuckDB SQL."""

from __future__ import annotations

from kwsniff.sections.sql import int64_minus, offset_bucket, offset_buckets

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
TABLES = ("requests", "connections", "errors", "partitions", "groups", "records", "captures", "capture_stats")


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


# The columns each exchange table repeats from its exchange's `requests` and `connections` rows
# (kwsniff.tables.schemas._CLIENT and _TIMES). Tables written before they existed get them by a join
# (engines: `fill`), each once per report; tables that have them need no join of two large tables.
FILLED = {
    "requests": ("client_ip",),
    "partitions": ("client_id", "client_ip", "ts_request", "ts_response", "latency_ms"),
    "groups": ("client_id", "client_ip"),
    "errors": ("client_id", "client_ip", "ts_request", "ts_response", "latency_ms"),
}


def fill(table: str, columns: list[tuple[str, str]], source: str) -> str:
    """SQL of ``table`` read from ``source`` (its rows as written), with its FILLED columns taken from
    the `connections` (client_ip of a request) or `requests` view where a row lacks them."""
    select = ", ".join(
        f'COALESCE(t."{c}", {"c" if table == "requests" else "r"}."{c}") AS "{c}"'
        if c in FILLED[table]
        else f't."{c}"'
        for c, _ in columns
    )
    if table == "requests":
        return (
            f"SELECT {select} FROM {source} t "
            "LEFT JOIN connections c ON c.capture = t.capture AND c.conn_id = t.conn_id"
        )
    return (
        f"SELECT {select} FROM {source} t LEFT JOIN requests r "
        "ON r.capture = t.capture AND r.conn_id = t.conn_id AND r.correlation_id = t.correlation_id"
    )


# Views the sections share, each with only the columns sections read. `partition_exchanges`: each
# topic-partition row but Metadata's (the most numerous, which no section reads) and but the Fetch rows
# of brokers (followers and the KRaft metadata log: `fetcher`, null in tables written before it, so
# lag, member lag, stopped, inventory and produce-to-consume see consumers only), with its exchange's
# client and times. `produced`: each acknowledged Produce batch's offset range and the time the
# broker's acknowledgement was seen, i.e. when those offsets became readable. The ones in MATERIALIZED
# are computed once per report and kept (several sections join them); the others are views.
MATERIALIZED = (
    "produced_buckets",
    "watermarks",
    "commits",
    "commits_dated",
    "group_clients",
    "capture_end",
)
DERIVED = {
    "partition_exchanges": """
        SELECT capture, conn_id, correlation_id, api_key, topic, topic_id, partition, group_id,
               record_count, record_bytes, first_offset, last_offset, high_watermark,
               fetch_offset, committed_offset, error_code,
               client_id, client_ip, ts_request, ts_response, latency_ms
        FROM partitions
        WHERE api_key <> 3 AND (fetcher IS NULL OR fetcher = 'consumer')""",
    # Per client (id and address): its SASL mechanism and principal and its software (KIP-511), from
    # its connections (a connection's client id is its first request's, the one its ApiVersions sent).
    "client_software": """
        SELECT client_id, client_ip, MAX(sasl_mechanism) AS sasl_mechanism, MAX(sasl_principal) AS sasl_principal,
               MAX(client_software_name) AS software_name, MAX(client_software_version) AS software_version
        FROM connections WHERE client_id IS NOT NULL
        GROUP BY client_id, client_ip""",
    # Each acknowledged batch once per offset bucket its range touches (sql.offset_buckets), joined
    # by bucket; kept once, and `produced` (one row per batch) is its rows of the batch's first bucket.
    "produced_buckets": f"""
        SELECT capture, topic, partition, first_offset, last_offset, ts_request, ts_response AS ts_ack,
               {offset_buckets("first_offset", "last_offset")} AS bucket
        FROM partition_exchanges
        WHERE api_key = 0 AND first_offset IS NOT NULL AND last_offset IS NOT NULL AND ts_response IS NOT NULL""",
    "produced": f"""
        SELECT capture, topic, partition, first_offset, last_offset, ts_request, ts_ack
        FROM produced_buckets WHERE bucket = {offset_bucket("first_offset")}""",
    # Offsets' record timestamps (Fetch rows of the opt-in records table): lag's fallback.
    "record_times": """
        SELECT capture, topic, partition, "offset", MIN("timestamp") AS ts
        FROM records WHERE api_key = 1 AND "offset" IS NOT NULL AND "timestamp" IS NOT NULL
        GROUP BY 1, 2, 3, 4""",
    # Every moment a partition's high watermark is known: Fetch responses say it; a Produce
    # acknowledgement says the log reached at least last_offset + 1.
    "watermarks": f"""
        SELECT capture, topic, partition, ts_response AS ts, high_watermark AS hwm
        FROM partition_exchanges
        WHERE api_key = 1 AND high_watermark IS NOT NULL AND ts_response IS NOT NULL
        UNION ALL
        SELECT capture, topic, partition, ts_ack AS ts, {int64_minus("last_offset", "-1")} AS hwm FROM produced""",
    # Committed offsets: OffsetCommit requests (what the group stores) and OffsetFetch responses
    # (what it read back), each with the client that sent it.
    "commits": """
        SELECT capture, group_id, topic, partition, committed_offset,
               CASE WHEN api_key = 8 THEN ts_request ELSE ts_response END AS ts, client_id, client_ip
        FROM partition_exchanges
        WHERE api_key IN (8, 9) AND committed_offset >= 0 AND group_id IS NOT NULL
          AND (error_code IS NULL OR error_code = 0)""",
    # Each committed offset with the time it was produced (acknowledged), or its record timestamp.
    "commits_dated": f"""
        SELECT c.capture, c.group_id, c.topic, c.partition, c.ts, MAX(c.committed_offset) AS committed_offset,
               MIN(pr.ts_ack) AS produced_at, MIN(rt.ts) AS record_ts
        FROM commits c
        LEFT JOIN produced_buckets pr ON pr.capture = c.capture AND pr.topic = c.topic
          AND pr.partition = c.partition AND pr.bucket = {offset_bucket("c.committed_offset")}
          AND c.committed_offset BETWEEN pr.first_offset AND pr.last_offset
        LEFT JOIN record_times rt ON rt.capture = c.capture AND rt.topic = c.topic AND rt.partition = c.partition
          AND rt."offset" = c.committed_offset
        GROUP BY 1, 2, 3, 4, 5""",
    # Which client (id and address) is in which group: it committed for it or joined it.
    "group_clients": """
        SELECT DISTINCT capture, group_id, client_id, client_ip FROM commits
        UNION
        SELECT DISTINCT capture, group_id, client_id, client_ip FROM groups""",
    # Where each capture ended as it knew it, "now" for a silent group: the time a live capture was
    # stopped (its last period's end, `capture_stats`), a file's last packet (`captures.ended`), and
    # never before the last packet of its tables (tables written before `ended` existed).
    "capture_end": """
        SELECT capture, MAX(ts) AS ts_end FROM (
          SELECT capture, ts_last AS ts FROM connections
          UNION ALL SELECT capture, COALESCE(ts_response, ts_request) AS ts FROM requests
          UNION ALL SELECT capture, ended AS ts FROM captures
          UNION ALL SELECT capture, period_end AS ts FROM capture_stats) AS t
        GROUP BY capture""",
}

# Every view a section may read by name: the tables and the shared views.
NAMES = (*TABLES, *DERIVED)
KNOWN = "known_"


def known(sql: str) -> str:
    """``sql`` reading the ``known_`` twin of every table and shared view it names: the same rows
    without --since (a window limits what is reported, not what is known before it; engines)."""
    import re

    names = "|".join(sorted(NAMES, key=len, reverse=True))
    return re.sub(rf"\b(FROM|JOIN)(\s+)({names})\b", rf"\1\2{KNOWN}\3", sql, flags=re.IGNORECASE)


# Topic ids named at report time (docs/report.md "Topic names learned late"). A row written before
# its topic id's name was learned (a live capture's period written before the Metadata naming it; a
# capture attached mid-stream whose naming Metadata is in another capture of the dataset) takes the
# name the dataset's other rows give that id, Metadata's above all. An id given two names names
# nothing: a topic id is one topic's for ever (KIP-516), so two names are a damaged or hostile row.
NAMED = ("partitions", "records")
TOPIC_NAMES = "_topic_names"
TOPIC_NAMES_SQL = """
SELECT topic_id, MIN(topic) AS topic FROM _partitions_read
WHERE topic_id IS NOT NULL AND topic IS NOT NULL
GROUP BY topic_id HAVING COUNT(DISTINCT topic) = 1"""
# Whether any row lacks its topic's name: most datasets have none, and the names are not gathered.
ANY_UNNAMED_SQL = (
    "SELECT 1 AS unnamed FROM _partitions_read WHERE topic IS NULL AND topic_id IS NOT NULL LIMIT 1"
)
# Rows the names above name: none, and the tables are read as written (no join).
UNNAMED_SQL = f"""
SELECT COUNT(*) AS n FROM _partitions_read r JOIN {TOPIC_NAMES} n ON n.topic_id = r.topic_id
WHERE r.topic IS NULL"""


def raw(table: str) -> str:
    """The view of ``table``'s rows as written: `_<table>_read` for a NAMED table (its `_<table>_all`
    is :func:`named` over it), else `_<table>_all` itself."""
    return f"_{table}_read" if table in NAMED else f"_{table}_all"


def named(columns: list[tuple[str, str]], source: str) -> str:
    """SQL of ``source``'s rows (``columns``) with a null topic named from TOPIC_NAMES by its id."""
    select = ", ".join(
        "COALESCE(t.topic, n.topic) AS topic" if c == "topic" else f't."{c}"' for c, _ in columns
    )
    return (
        f"SELECT {select} FROM {source} t "
        f"LEFT JOIN {TOPIC_NAMES} n ON t.topic IS NULL AND n.topic_id = t.topic_id"
    )
