"""The broker's-eye view (docs/report.md "Brokers and replication"): what each broker answered, and
how far each follower broker is behind the leader it replicates from.

A broker is the server end (ip and port) of the connections it answered, from the `connections`
table joined on (capture, conn_id) (tables written before the exchange tables carried `broker_ip`
have it there only), with its node id (`broker_id`, docs/tables.md "Which broker answered"; null when
the run never learned it).
"""

from __future__ import annotations

from kwsniff.sections.sections_traffic import EXPECTED
from kwsniff.sections.sql import int64_minus, latest, offset_bucket, pct, seconds

# Fetches of brokers (docs/tables.md "Who is fetching"): followers replicating a partition, and the
# KRaft metadata log. Null in tables written before `fetcher` existed: neither counted nor a share.
REPLICATION_FETCHERS = "('follower', 'metadata')"

# One row per broker and API: a broker's requests are per API anyway (a Produce and a Fetch
# latency mean different things), and the broker-wide figures (connections, the replication share
# of its fetches) sit on the rows they are about (connections per API; the share on Fetch).
# `errors` are failures as the `errors` section counts them: the codes a healthy client meets in its
# handshakes (sections_traffic.EXPECTED, e.g. MEMBER_ID_REQUIRED on a first JoinGroup) are apart, in
# `expected_errors`.
BROKERS = f"""
WITH expected AS (
  SELECT e.capture, e.conn_id, e.correlation_id, COUNT(*) AS n
  FROM errors e WHERE {EXPECTED} GROUP BY 1, 2, 3
),
exchanges AS (
  SELECT c.broker_ip, c.broker_port, r.broker_id, r.capture, r.conn_id, r.api_name, r.latency_ms, r.error_count,
         x.n AS expected_count, r.request_bytes, r.response_bytes, r.fetcher
  FROM requests r LEFT JOIN connections c ON c.capture = r.capture AND c.conn_id = r.conn_id
  LEFT JOIN expected x ON x.capture = r.capture AND x.conn_id = r.conn_id AND x.correlation_id = r.correlation_id
)
SELECT broker_ip, broker_port, MAX(broker_id) AS broker_id, api_name, COUNT(*) AS requests,
       {pct(0.5, "latency_ms")} AS p50_ms, {pct(0.99, "latency_ms")} AS p99_ms, MAX(latency_ms) AS max_ms,
       COALESCE(SUM(error_count), 0) - COALESCE(SUM(expected_count), 0) AS errors,
       COALESCE(SUM(expected_count), 0) AS expected_errors,
       COALESCE(SUM(request_bytes), 0) AS bytes_in, COALESCE(SUM(response_bytes), 0) AS bytes_out,
       COUNT(DISTINCT capture || '/' || CAST(conn_id AS VARCHAR)) AS connections,
       SUM(CASE WHEN fetcher IN {REPLICATION_FETCHERS} THEN 1 ELSE 0 END) / NULLIF(COUNT(fetcher), 0) AS replication_share
FROM exchanges
GROUP BY broker_ip, broker_port, api_name
ORDER BY broker_ip, broker_port, api_name
"""

# Replication lag per follower fetch. The leader's log reached offset F (the first record the
# follower lacks, its fetch offset) at the earliest of: the request of an acknowledged Produce batch
# holding F (the leader appends a batch as it receives it; the response's base offset says where),
# and the response of a Fetch, any fetcher's, whose high watermark was above F (the high watermark
# never passes the log's end). A partition's first watermark in the capture dates nothing: the log
# may have held those offsets long before the capture began. The window finds, per fetch, the
# earliest watermark above its offset by sorting watermarks (as hwm - 1) and fetch offsets together,
# largest first: no join of every fetch with every watermark of its partition.
REPLICATION = f"""
WITH follower AS (
  SELECT p.capture, p.conn_id, p.correlation_id, p.replica_id, p.client_id, p.topic, p.partition,
         p.fetch_offset, p.high_watermark, p.ts_request, p.latency_ms, c.broker_ip, c.broker_port, p.broker_id
  FROM partitions p LEFT JOIN connections c ON c.capture = p.capture AND c.conn_id = p.conn_id
  WHERE p.api_key = 1 AND p.fetcher = 'follower' AND p.topic IS NOT NULL AND p.partition IS NOT NULL
    AND p.fetch_offset IS NOT NULL AND p.ts_request IS NOT NULL
),
followed AS (SELECT DISTINCT capture, topic, partition FROM follower),
stream AS (
  SELECT p.capture, p.topic, p.partition, p.high_watermark - 1 AS at_offset, 0 AS kind,
         p.ts_response AS ts, CAST(NULL AS BIGINT) AS conn_id, CAST(NULL AS INTEGER) AS correlation_id
  FROM partitions p JOIN followed f ON f.capture = p.capture AND f.topic = p.topic AND f.partition = p.partition
  WHERE p.api_key = 1 AND p.high_watermark >= 0 AND p.ts_response IS NOT NULL
    AND (p.error_code IS NULL OR p.error_code = 0)
  UNION ALL
  SELECT capture, topic, partition, fetch_offset AS at_offset, 1 AS kind, ts_request AS ts, conn_id, correlation_id
  FROM follower
),
watermarked AS (
  SELECT capture, topic, partition, conn_id, correlation_id, kind,
         MIN(CASE WHEN kind = 0 THEN ts END) OVER (
           PARTITION BY capture, topic, partition ORDER BY at_offset DESC, kind
           ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS above_at,
         MIN(CASE WHEN kind = 0 THEN ts END) OVER (PARTITION BY capture, topic, partition) AS first_at
  FROM stream
),
dated AS (
  SELECT f.capture, f.conn_id, f.correlation_id, f.replica_id, f.client_id, f.topic, f.partition,
         f.fetch_offset, f.high_watermark, f.ts_request, f.latency_ms, f.broker_ip, f.broker_port, f.broker_id,
         -- LEAST skips nulls (DuckDB and Spark): the earlier of the two.
         LEAST(MIN(pr.ts_request), MAX(CASE WHEN w.above_at > w.first_at THEN w.above_at END)) AS reached_at
  FROM follower f
  JOIN watermarked w ON w.kind = 1 AND w.capture = f.capture AND w.conn_id = f.conn_id
    AND w.correlation_id = f.correlation_id AND w.topic = f.topic AND w.partition = f.partition
  LEFT JOIN produced_buckets pr ON pr.capture = f.capture AND pr.topic = f.topic AND pr.partition = f.partition
    AND pr.bucket = {offset_bucket("f.fetch_offset")} AND f.fetch_offset BETWEEN pr.first_offset AND pr.last_offset
  GROUP BY f.capture, f.conn_id, f.correlation_id, f.replica_id, f.client_id, f.topic, f.partition,
           f.fetch_offset, f.high_watermark, f.ts_request, f.latency_ms, f.broker_ip, f.broker_port, f.broker_id
),
lagged AS (
  SELECT *,
         CASE WHEN reached_at <= ts_request THEN {seconds("ts_request", "reached_at")}
              WHEN fetch_offset >= high_watermark THEN 0.0 END AS lag_seconds
  FROM dated
),
per_follower AS (
  SELECT capture, broker_ip, broker_port, replica_id, client_id, topic, partition, COUNT(*) AS fetches,
         {pct(0.5, "latency_ms")} AS p50_ms, {pct(0.99, "latency_ms")} AS p99_ms, MAX(latency_ms) AS max_ms,
         MAX(lag_seconds) AS max_lag_seconds, MAX(broker_id) AS broker_id,
         {latest("conn_id", "ts_request", "correlation_id")} AS last_conn,
         {latest("correlation_id", "ts_request", "correlation_id")} AS last_correlation
  FROM lagged
  GROUP BY capture, broker_ip, broker_port, replica_id, client_id, topic, partition
)
SELECT a.capture, a.broker_ip, a.broker_port, a.broker_id, a.replica_id, a.client_id, a.topic, a.partition,
       l.fetch_offset, l.high_watermark, {int64_minus("l.high_watermark", "l.fetch_offset")} AS lag_records,
       l.lag_seconds, a.max_lag_seconds, a.fetches, a.p50_ms, a.p99_ms, a.max_ms, l.ts_request AS last_fetch
FROM per_follower a JOIN lagged l ON l.capture = a.capture AND l.conn_id = a.last_conn
  AND l.correlation_id = a.last_correlation AND l.topic = a.topic AND l.partition = a.partition
ORDER BY lag_seconds DESC NULLS LAST, lag_records DESC, capture, broker_ip, broker_port, replica_id, topic, partition
"""
