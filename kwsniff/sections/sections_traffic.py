"""Sections about clients and their requests: who talks to which topic, how fast, which failures."""

from __future__ import annotations

from kwsniff.protocol import EXPECTED_ERRORS
from kwsniff.sections.sql import bucket, millis, offset_bucket, offset_buckets, pct, ranked

# APIs by the role they show a client in (Metadata, FindCoordinator, ApiVersions... show none).
PRODUCER_APIS = "0, 22, 24, 26, 28"  # Produce, InitProducerId, AddPartitionsToTxn, EndTxn, TxnOffsetCommit
CONSUMER_APIS = (
    "1, 2, 8, 9, 23, 78, 79"  # Fetch, ListOffsets, OffsetCommit/Fetch, OffsetForLeaderEpoch, Share*
)
# Topics, configs, ACLs, groups, partitions and transactions administered or described.
ADMIN_APIS = "15, 16, 19, 20, 21, 29, 30, 31, 32, 33, 37, 42, 43, 44, 47, 48, 49, 50, 51, 60, 65, 66, 67, 69, 77, 89, 90, 91, 92"

# Per capture (`summary_inventory`, kwsniff.sections.summaries): each client's requests, records and
# bytes per role, topic and group; the section adds the captures up. Rows of a topic id no row of the
# dataset names (views.NAMED) are the client's under a null topic, and `unnamed_rows` on every row of
# that client and role in that capture says its records per topic cannot be known.
INVENTORY_ROWS = f"""
WITH rows AS (
  SELECT p.client_id, p.client_ip,
         CASE WHEN p.api_key IN ({PRODUCER_APIS}) THEN 'producer'
              WHEN p.api_key IN ({CONSUMER_APIS}) THEN 'consumer' ELSE 'admin' END AS role,
         p.topic, p.group_id, p.record_count, p.record_bytes, p.ts_request, p.capture, p.conn_id, p.correlation_id,
         CASE WHEN p.topic IS NULL THEN 1 ELSE 0 END AS unnamed
  FROM partition_exchanges p
  WHERE p.api_key IN ({PRODUCER_APIS}, {CONSUMER_APIS}, {ADMIN_APIS})
    AND (p.topic IS NOT NULL OR p.topic_id IS NOT NULL)
  UNION ALL
  -- Admin requests without a topic-partition row (CreateTopics, DescribeConfigs, ListGroups...).
  SELECT r.client_id, r.client_ip, 'admin' AS role, CAST(NULL AS VARCHAR) AS topic, CAST(NULL AS VARCHAR) AS group_id,
         CAST(NULL AS BIGINT) AS record_count, CAST(NULL AS BIGINT) AS record_bytes, r.ts_request, r.capture,
         r.conn_id, r.correlation_id, 0 AS unnamed
  FROM requests r LEFT JOIN partition_exchanges p
    ON r.capture = p.capture AND r.conn_id = p.conn_id AND r.correlation_id = p.correlation_id
    AND p.api_key IN ({ADMIN_APIS})
  WHERE r.api_key IN ({ADMIN_APIS}) AND p.conn_id IS NULL
),
-- One row per request and topic: a request carrying several partitions of a topic is one request.
per_request AS (
  SELECT capture, client_id, client_ip, role, topic, group_id, SUM(record_count) AS record_count,
         SUM(record_bytes) AS record_bytes, MIN(ts_request) AS ts_request, SUM(unnamed) AS unnamed
  FROM rows GROUP BY capture, client_id, client_ip, role, topic, group_id, conn_id, correlation_id
),
-- Summed per capture first: the joins below then meet thousands of rows, not millions (and `rows`,
-- read once, is never kept).
counted AS (
  SELECT capture, client_id, client_ip, role, topic, group_id, SUM(record_count) AS record_count,
         SUM(record_bytes) AS record_bytes, COUNT(*) AS requests, MIN(ts_request) AS first_seen,
         MAX(ts_request) AS last_seen, SUM(unnamed) AS unnamed
  FROM per_request GROUP BY capture, client_id, client_ip, role, topic, group_id
),
unnamed AS (
  SELECT capture, client_id, client_ip, role, SUM(unnamed) AS unnamed_rows
  FROM counted GROUP BY capture, client_id, client_ip, role HAVING SUM(unnamed) > 0
),
-- A consumer's Fetch carries no group: it is the group the same client commits for on that topic.
client_group AS (
  SELECT capture, client_id, client_ip, topic, MIN(group_id) AS group_id
  FROM counted WHERE role = 'consumer' AND group_id IS NOT NULL GROUP BY capture, client_id, client_ip, topic
)
SELECT r.capture, r.client_id, r.client_ip, r.role, r.topic,
       CASE WHEN r.role = 'consumer' THEN COALESCE(r.group_id, g.group_id) ELSE r.group_id END AS group_id,
       CAST(SUM(r.record_count) AS BIGINT) AS record_count, CAST(SUM(r.record_bytes) AS BIGINT) AS record_bytes,
       CAST(SUM(r.requests) AS BIGINT) AS requests, MIN(r.first_seen) AS first_seen, MAX(r.last_seen) AS last_seen,
       CAST(COALESCE(MAX(u.unnamed_rows), 0) AS BIGINT) AS unnamed_rows
FROM counted r
LEFT JOIN client_group g ON g.capture = r.capture AND g.client_id = r.client_id
  AND g.client_ip = r.client_ip AND g.topic = r.topic
LEFT JOIN unnamed u ON u.capture = r.capture AND u.client_id IS NOT DISTINCT FROM r.client_id
  AND u.client_ip IS NOT DISTINCT FROM r.client_ip AND u.role = r.role
GROUP BY 1, 2, 3, 4, 5, 6
"""
INVENTORY = """
SELECT r.client_id, r.client_ip, s.sasl_mechanism, s.sasl_principal, s.software_name, s.software_version, r.role, r.topic,
       r.group_id,
       -- Unknown (null, never 0) when some of the client's rows in that role are of a topic id no row names.
       CASE WHEN SUM(r.unnamed_rows) > 0 THEN NULL ELSE COALESCE(SUM(r.record_count), 0) END AS records,
       CASE WHEN SUM(r.unnamed_rows) > 0 THEN NULL ELSE COALESCE(SUM(r.record_bytes), 0) END AS bytes,
       SUM(r.requests) AS requests, MIN(r.first_seen) AS first_seen, MAX(r.last_seen) AS last_seen
FROM summary_inventory r
LEFT JOIN client_software s ON s.client_id = r.client_id AND s.client_ip = r.client_ip
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9
ORDER BY client_id, client_ip, role, topic, group_id
"""

# Long polls: Fetch/ShareFetch wait on the broker up to max_wait_ms for data, JoinGroup for the group:
# their latency is a wait, never service time (they are in `long_polls`, not here).
LONG_POLL_APIS = "1, 78, 11"

LATENCY = f"""
SELECT api_name, api_version, client_id, COUNT(*) AS requests,
       {pct(0.5, "latency_ms")} AS p50_ms, {pct(0.99, "latency_ms")} AS p99_ms, MAX(latency_ms) AS max_ms
FROM ({ranked(f"SELECT * FROM requests WHERE api_key NOT IN ({LONG_POLL_APIS})", "api_name, api_version, client_id", "latency_ms")}) AS t
GROUP BY api_name, api_version, client_id
ORDER BY api_name, api_version, client_id
"""

# One Produce request per topic is one count and one latency, however many partitions of the topic
# it carries (each partition is a row of `partition_exchanges`, every one with the request's latency).
_PRODUCE_PER_TOPIC = """
SELECT topic, MAX(latency_ms) AS latency_ms, SUM(record_count) AS record_count
FROM partition_exchanges WHERE api_key = 0
GROUP BY capture, conn_id, correlation_id, topic"""

PRODUCE_LATENCY = f"""
SELECT topic, COUNT(*) AS requests, SUM(record_count) AS records,
       {pct(0.5, "latency_ms")} AS p50_ms, {pct(0.99, "latency_ms")} AS p99_ms, MAX(latency_ms) AS max_ms
FROM ({ranked(_PRODUCE_PER_TOPIC, "topic", "latency_ms")}) AS t
GROUP BY topic ORDER BY topic
"""

# Per Produce batch, the first Fetch response carrying its first offset (a range join on offsets,
# by offset bucket: sql.offset_buckets); per capture (`summary_produce_to_consume`).
PRODUCE_TO_CONSUME_ROWS = f"""
WITH fetched AS (
  SELECT capture, topic, partition, first_offset, last_offset, ts_response,
         {offset_buckets("first_offset", "last_offset")} AS bucket
  FROM partition_exchanges WHERE api_key = 1 AND first_offset IS NOT NULL AND ts_response IS NOT NULL
),
batches AS (
  SELECT pr.capture, pr.topic, pr.partition, pr.first_offset, MIN(pr.ts_request) AS ts_produce,
         MIN(f.ts_response) AS ts_consume
  FROM produced pr JOIN fetched f ON f.capture = pr.capture AND f.topic = pr.topic
    AND f.partition = pr.partition AND f.bucket = {offset_bucket("pr.first_offset")}
    AND pr.first_offset BETWEEN f.first_offset AND f.last_offset
  GROUP BY 1, 2, 3, 4
),
-- A capture whose Fetch responses carried records of a topic id no row names (views.NAMED): how
-- many of its batches were consumed cannot be known. One row of each topic it produced says so.
unnamed AS (
  SELECT DISTINCT capture, topic FROM produced
  WHERE capture IN (
    SELECT capture FROM partition_exchanges
    WHERE api_key = 1 AND topic IS NULL AND topic_id IS NOT NULL AND first_offset IS NOT NULL
  )
)
SELECT capture, topic, {millis("ts_consume", "ts_produce")} AS e2e_ms, 0 AS unnamed FROM batches
UNION ALL
SELECT capture, topic, CAST(NULL AS DOUBLE) AS e2e_ms, 1 AS unnamed FROM unnamed
"""
# `batches` is null (unknown, never a count short of the truth) for a topic produced in a capture
# with unnamed Fetch records; its times are those of the batches seen consumed.
PRODUCE_TO_CONSUME = f"""
SELECT topic, CASE WHEN MAX(unnamed) > 0 THEN NULL ELSE COUNT(e2e_ms) END AS batches,
       {pct(0.5, "e2e_ms")} AS p50_ms, {pct(0.99, "e2e_ms")} AS p99_ms, MAX(e2e_ms) AS max_ms
FROM (SELECT topic, e2e_ms, unnamed FROM summary_produce_to_consume WHERE e2e_ms IS NOT NULL OR unnamed = 1) AS t
GROUP BY topic ORDER BY topic
"""

THROUGHPUT = f"""
SELECT topic, {bucket("minute", "ts_request")} AS minute, SUM(record_count) AS records,
       SUM(record_bytes) AS bytes
FROM partition_exchanges WHERE api_key = 0
GROUP BY 1, 2 ORDER BY topic, minute
"""

THROTTLED = """
SELECT client_id, COUNT(*) AS throttled_requests, SUM(throttle_time_ms) AS throttle_ms_total,
       MAX(throttle_time_ms) AS throttle_ms_max
FROM requests WHERE throttle_time_ms > 0
GROUP BY client_id ORDER BY throttle_ms_total DESC, client_id
"""


def _expected_sql() -> str:
    """EXPECTED_ERRORS (kwsniff.protocol.error_codes, where each code's reason is told) as a
    condition on an `errors` row ``e``."""
    anywhere = [code for code, apis in EXPECTED_ERRORS.items() if apis is None]
    on_apis = [
        f"(e.error_code = {code} AND e.api_key IN ({', '.join(map(str, sorted(apis)))}))"
        for code, apis in EXPECTED_ERRORS.items()
        if apis is not None
    ]
    return " OR ".join([*on_apis, f"e.error_code IN ({', '.join(map(str, anywhere))})"])


# Codes a healthy client meets in its normal handshakes, apart from real failures.
EXPECTED = _expected_sql()

ERRORS = f"""
WITH per_client AS (SELECT client_id, COUNT(*) AS client_requests FROM requests GROUP BY client_id)
SELECT CASE WHEN {EXPECTED} THEN 'expected' ELSE 'failure' END AS kind,
       e.error_name, e.api_name, e.topic, e.client_id, COUNT(*) AS errors,
       COUNT(DISTINCT e.partition) AS partitions, MAX(c.client_requests) AS client_requests,
       COUNT(*) / MAX(c.client_requests) AS errors_per_request
FROM errors e
LEFT JOIN per_client c ON c.client_id IS NOT DISTINCT FROM e.client_id
GROUP BY 1, 2, 3, 4, 5
ORDER BY kind DESC, errors DESC, error_name, api_name, topic, client_id
"""

# The wait a long poll may take: a Fetch's or ShareFetch's max_wait_ms and JoinGroup's rebalance
# timeout, both from the request. Tables written before `requests.max_wait_ms` existed have it null:
# then the wait is guessed from the polls that came back empty, which waited it out (their median
# latency), and `wait_source` says `empty polls (guess)`. One row per API, client and wait: a client
# polling with two waits (a consumer's max_wait_ms changed, two consumers under one client id) has
# each judged against its own.
LONG_POLLS = f"""
WITH polls AS (
  SELECT r.api_name, r.client_id, r.latency_ms, r.record_count, r.max_wait_ms,
         g.rebalance_timeout_ms
  FROM requests r LEFT JOIN groups g
    ON g.capture = r.capture AND g.conn_id = r.conn_id AND g.correlation_id = r.correlation_id
  WHERE r.api_key IN ({LONG_POLL_APIS}) AND r.latency_ms IS NOT NULL AND (r.fetcher IS NULL OR r.fetcher = 'consumer')
),
empty_wait AS (
  SELECT api_name, client_id, {pct(0.5, "latency_ms")} AS empty_ms
  FROM ({ranked("SELECT * FROM polls WHERE record_count = 0 AND max_wait_ms IS NULL", "api_name, client_id", "latency_ms")}) AS t
  GROUP BY api_name, client_id
),
judged AS (
  SELECT p.*,
         CASE WHEN p.rebalance_timeout_ms IS NOT NULL THEN CAST(p.rebalance_timeout_ms AS DOUBLE)
              WHEN p.max_wait_ms IS NOT NULL THEN CAST(p.max_wait_ms AS DOUBLE)
              ELSE w.empty_ms END AS wait_ms,
         CASE WHEN p.rebalance_timeout_ms IS NOT NULL THEN 'rebalance_timeout_ms'
              WHEN p.max_wait_ms IS NOT NULL THEN 'max_wait_ms'
              WHEN w.empty_ms IS NOT NULL THEN 'empty polls (guess)' END AS wait_source
  FROM polls p LEFT JOIN empty_wait w ON w.api_name = p.api_name AND w.client_id IS NOT DISTINCT FROM p.client_id
)
SELECT api_name, client_id, COUNT(*) AS polls, SUM(CASE WHEN record_count = 0 THEN 1 ELSE 0 END) AS empty,
       wait_ms, wait_source,
       {pct(0.5, "latency_ms")} AS p50_ms, MAX(latency_ms) AS max_ms,
       SUM(CASE WHEN latency_ms > wait_ms * 1.1 + 100 THEN 1 ELSE 0 END) AS over_wait
FROM ({ranked("SELECT * FROM judged", "api_name, client_id", "latency_ms")}) AS t
GROUP BY api_name, client_id, wait_ms, wait_source
ORDER BY api_name, client_id NULLS LAST, wait_ms NULLS LAST, wait_source NULLS LAST
"""

CHURN = f"""
WITH opened AS (
  SELECT {bucket("minute", "ts_first")} AS minute, COUNT(*) AS opened,
         SUM(CASE WHEN (fin_seen OR rst_seen) AND {millis("ts_last", "ts_first")} < 1000 THEN 1 ELSE 0 END) AS short_lived
  FROM connections GROUP BY 1
),
closed AS (
  SELECT {bucket("minute", "ts_last")} AS minute, COUNT(*) AS closed
  FROM connections WHERE fin_seen OR rst_seen GROUP BY 1
)
SELECT COALESCE(o.minute, c.minute) AS minute, COALESCE(o.opened, 0) AS opened,
       COALESCE(c.closed, 0) AS closed, COALESCE(o.short_lived, 0) AS short_lived
FROM opened o FULL OUTER JOIN closed c ON c.minute = o.minute
ORDER BY minute
"""
