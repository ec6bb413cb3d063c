"""Sections about the cluster's own control plane (docs/report.md "KRaft"): the ISR changes partition
leaders ask the controller for, and the KRaft quorum as its exchanges show it."""

from __future__ import annotations

from kwsniff.sections.sql import pct

FETCH, ALTER_PARTITION = 1, 56
# Vote, BeginQuorumEpoch, EndQuorumEpoch (KIP-595), BrokerRegistration, BrokerHeartbeat (KIP-631);
# metadata-log fetches are Fetch rows whose `fetcher` is 'metadata'.
QUORUM_APIS = "52, 53, 54, 62, 63"


def _members(isr: str) -> str:
    """How many broker ids a comma-separated ISR lists (0 for an empty one)."""
    return f"(CASE WHEN {isr} = '' THEN 0 ELSE LENGTH({isr}) - LENGTH(REPLACE({isr}, ',', '')) + 1 END)"


# One row per partition of each AlterPartition exchange (what the partition leader, node_id, asked
# for and what the controller committed) and per partition state the metadata log's records set
# (kwsniff/rows/metadata_log.py; each record once, at the first Fetch response carrying it: every
# node fetches the same log). `previous_isr` is the ISR the partition's previous row of the same
# source in the capture committed, and `change` compares the ISR asked for (the log's: set) with it.
ISR_CHANGES = f"""
WITH asked AS (
  SELECT 'AlterPartition' AS source, p.capture, p.ts_request, p.conn_id, p.correlation_id, p.node_id,
         p.client_ip, p.api_version, p.topic, p.topic_id, p.partition, p.leader_id, p.leader_epoch,
         p.partition_epoch, p.new_isr, p.isr, COALESCE(p.error_name, r.error_name) AS error_name,
         p.latency_ms, CAST(NULL AS BIGINT) AS log_offset
  FROM partitions p
  LEFT JOIN requests r ON r.capture = p.capture AND r.conn_id = p.conn_id
    AND r.correlation_id = p.correlation_id AND r.api_key = {ALTER_PARTITION}
  WHERE p.api_key = {ALTER_PARTITION}
  UNION ALL
  SELECT 'metadata log' AS source, capture, MIN(ts_response) AS ts_request, CAST(NULL AS BIGINT) AS conn_id,
         CAST(NULL AS INTEGER) AS correlation_id, CAST(NULL AS INTEGER) AS node_id,
         CAST(NULL AS VARCHAR) AS client_ip, CAST(NULL AS SMALLINT) AS api_version, topic, topic_id,
         partition, MAX(leader_id) AS leader_id, MAX(leader_epoch) AS leader_epoch,
         MAX(partition_epoch) AS partition_epoch, CAST(NULL AS VARCHAR) AS new_isr, MAX(isr) AS isr,
         CAST(NULL AS VARCHAR) AS error_name, CAST(NULL AS DOUBLE) AS latency_ms, "offset" AS log_offset
  FROM partitions
  WHERE api_key = {FETCH} AND fetcher = 'metadata' AND isr IS NOT NULL
  GROUP BY capture, topic, topic_id, partition, "offset"
),
changes AS (
  SELECT p.*, COALESCE(p.new_isr, p.isr) AS wanted,
         LAG(p.isr) OVER (PARTITION BY p.capture, p.source, COALESCE(p.topic_id, p.topic), p.partition
                          ORDER BY p.ts_request, p.log_offset, p.conn_id, p.correlation_id) AS previous_isr
  FROM asked p
)
SELECT source, ts_request, node_id, client_ip, api_version, topic, topic_id, partition, leader_id,
       leader_epoch, partition_epoch, new_isr, isr, previous_isr,
       CASE WHEN previous_isr IS NULL OR wanted IS NULL THEN NULL
            WHEN {_members("wanted")} < {_members("previous_isr")} THEN 'shrink'
            WHEN {_members("wanted")} > {_members("previous_isr")} THEN 'expand'
            ELSE 'same' END AS change,
       error_name, latency_ms, log_offset
FROM changes
ORDER BY ts_request, source, topic_id, topic, partition, log_offset
"""

# One row per API, sending node (its address), leader and epoch answered, fenced state and error:
# read by first_seen, the leader and epoch over time; metadata fetches' lag (the leader's high
# watermark minus the fetcher's offset) at most and at its last fetch; heartbeats' fenced state.
CONTROLLER = f"""
WITH parts AS (
  SELECT capture, conn_id, correlation_id, MAX(leader_id) AS leader_id, MAX(leader_epoch) AS leader_epoch,
         MAX(CASE WHEN vote_granted THEN 1 ELSE 0 END) AS granted, MAX(lag) AS lag
  FROM partitions
  WHERE api_key IN ({QUORUM_APIS}) OR fetcher = 'metadata'
  GROUP BY capture, conn_id, correlation_id
),
events AS (
  SELECT r.api_key, r.api_name, COALESCE(r.node_id, r.replica_id) AS node_id, r.client_ip,
         p.leader_id, p.leader_epoch, r.fenced, r.first_error_name AS error_name, r.status, r.ts_request,
         r.correlation_id, r.latency_ms, r.broker_epoch, p.granted, p.lag
  FROM requests r
  LEFT JOIN parts p ON p.capture = r.capture AND p.conn_id = r.conn_id AND p.correlation_id = r.correlation_id
  WHERE r.api_key IN ({QUORUM_APIS}) OR r.fetcher = 'metadata'
)
SELECT api_name, node_id, client_ip, leader_id, leader_epoch, fenced, error_name, COUNT(*) AS requests,
       SUM(CASE WHEN status = 'ok' THEN 0 ELSE 1 END) AS unanswered,
       MIN(ts_request) AS first_seen, MAX(ts_request) AS last_seen,
       {pct(0.5, "latency_ms")} AS p50_ms, MAX(latency_ms) AS max_ms,
       CASE WHEN MIN(api_key) = 52 THEN SUM(granted) END AS votes_granted,
       MAX(broker_epoch) AS broker_epoch, MAX(lag) AS max_lag,
       ARG_MAX(lag, CASE WHEN lag IS NULL THEN -1
                         ELSE CAST(EPOCH_US(ts_request) AS DECIMAL(38, 0)) * 4294967296 + correlation_id END)
         AS last_lag
FROM events
GROUP BY api_name, node_id, client_ip, leader_id, leader_epoch, fenced, error_name
ORDER BY first_seen, api_name, node_id, leader_epoch, error_name
"""
