"""Sections about groups: rebalances of every protocol, storms, share groups."""

from __future__ import annotations

from kwsniff.sections.sql import bucket, millis, pct

# Classic generations: from the first JoinGroup request of a generation (a member's
# MEMBER_ID_REQUIRED attempt, KIP-394, counts for the generation it then joins; a JoinGroup failing
# otherwise joins nothing and is in `errors`) to the last SyncGroup response of that generation.
_CLASSIC_JOINS = """
SELECT capture, group_id, member_id, ts_request, ts_response, error_code, protocol_name,
       FIRST_VALUE(CASE WHEN error_code = 0 THEN generation_id END IGNORE NULLS) OVER (
         PARTITION BY capture, group_id, member_id ORDER BY ts_request
         ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS generation
FROM groups WHERE api_key = 11 AND error_code IN (0, 79)
"""

REBALANCES = f"""
WITH joins AS ({_CLASSIC_JOINS}),
gens AS (
  SELECT capture, group_id, generation, MIN(ts_request) AS ts_start, COUNT(DISTINCT member_id) AS members,
         MAX(CASE WHEN error_code = 0 THEN protocol_name END) AS protocol_name
  FROM joins WHERE generation IS NOT NULL GROUP BY 1, 2, 3
),
syncs AS (
  SELECT capture, group_id, generation_id AS generation, MAX(ts_response) AS ts_end
  FROM groups WHERE api_key = 14 AND error_code = 0 GROUP BY 1, 2, 3
)
SELECT g.capture, g.group_id, g.generation, g.members, g.protocol_name, g.ts_start, s.ts_end,
       {millis("s.ts_end", "g.ts_start")} AS duration_ms
FROM gens g LEFT JOIN syncs s ON s.capture = g.capture AND s.group_id = g.group_id AND s.generation = g.generation
ORDER BY capture, group_id, generation
"""

# Per member of a classic generation: how long its JoinGroup waited for the other members
# (the broker answers once all rejoined or the rebalance timeout passed) and JoinGroup to SyncGroup.
REBALANCE_MEMBERS = f"""
WITH joins AS ({_CLASSIC_JOINS}),
member_join AS (
  SELECT capture, group_id, generation, member_id, MIN(ts_request) AS ts_join,
         MAX(CASE WHEN error_code = 0 THEN {millis("ts_response", "ts_request")} END) AS join_wait_ms
  FROM joins WHERE generation IS NOT NULL GROUP BY 1, 2, 3, 4
),
member_sync AS (
  SELECT capture, group_id, generation_id AS generation, member_id, MIN(ts_response) AS ts_sync
  FROM groups WHERE api_key = 14 AND error_code = 0 GROUP BY 1, 2, 3, 4
)
SELECT j.capture, j.group_id, j.generation, j.member_id, j.ts_join, s.ts_sync, j.join_wait_ms,
       {millis("s.ts_sync", "j.ts_join")} AS join_to_sync_ms
FROM member_join j LEFT JOIN member_sync s ON s.capture = j.capture AND s.group_id = j.group_id
  AND s.generation = j.generation AND s.member_id = j.member_id
ORDER BY capture, group_id, generation, member_id
"""

# KIP-848 (and streams/share) members: from a response giving a new assignment epoch to the first
# heartbeat that owns exactly that assignment (reconciliation), and from a member's join to its
# first assignment (time without partitions).
RECONCILIATION = f"""
WITH hb AS (SELECT * FROM groups WHERE protocol IN ('consumer', 'streams', 'share')),
assigned AS (
  SELECT capture, group_id, member_id, protocol, member_epoch_response AS epoch, assignment,
         ts_response AS ts_assigned
  FROM hb WHERE ts_response IS NOT NULL
    -- A join's response may already carry the member's first assignment (KIP-848).
    AND (event = 'assignment' OR (event = 'join' AND assignment IS NOT NULL))
),
joined AS (SELECT capture, group_id, member_id, ts_request AS ts_join FROM hb WHERE event = 'join'),
matched AS (
  SELECT a.capture, a.group_id, a.member_id, a.protocol, a.epoch, a.assignment, a.ts_assigned,
         MIN(o.ts_request) AS ts_owned, MAX(j.ts_join) AS ts_join
  FROM assigned a
  LEFT JOIN hb o ON o.capture = a.capture AND o.group_id = a.group_id AND o.member_id = a.member_id
    AND o.owned_partitions = a.assignment AND o.ts_request > a.ts_assigned
  LEFT JOIN joined j ON j.capture = a.capture AND j.group_id = a.group_id AND j.member_id = a.member_id
    AND j.ts_join <= a.ts_assigned
  GROUP BY 1, 2, 3, 4, 5, 6, 7
)
SELECT capture, group_id, member_id, protocol, epoch, assignment, ts_assigned, ts_owned,
       {millis("ts_owned", "ts_assigned")} AS reconciliation_ms,
       CASE WHEN ROW_NUMBER() OVER (PARTITION BY capture, group_id, member_id, ts_join ORDER BY ts_assigned) = 1
            THEN {millis("ts_assigned", "ts_join")} END AS unassigned_ms
FROM matched
ORDER BY capture, group_id, member_id, ts_assigned
"""

# A storm: more than STORM_REBALANCES rebalances of one group within one STORM_WINDOW.
STORM_REBALANCES = 3
STORM_WINDOW = "minute"

STORMS = f"""
WITH starts AS (
  SELECT capture, group_id, 'classic' AS protocol, ts_start AS ts FROM ({REBALANCES}) AS r
  UNION ALL
  SELECT capture, group_id, protocol, MIN(ts_response) AS ts
  FROM groups WHERE protocol IN ('consumer', 'streams', 'share') AND event = 'assignment'
  GROUP BY capture, group_id, protocol, member_epoch_response
)
SELECT capture, group_id, protocol, {bucket(STORM_WINDOW, "ts")} AS window_start, COUNT(*) AS rebalances
FROM starts
GROUP BY 1, 2, 3, 4 HAVING COUNT(*) > {STORM_REBALANCES}
ORDER BY rebalances DESC, capture, group_id, window_start
"""

# Share groups (KIP-932). Every ShareFetch (78) and ShareAcknowledge (79) partition row with its
# member (from the exchange's `groups` row) and times: a ShareFetch response acquires offsets for the
# member, a request (ShareFetch or ShareAcknowledge) gives them back (kwsniff/rows/share.py).
_SHARE_PARTS = """
SELECT p.capture, p.group_id, g.member_id, p.topic, p.partition, p.api_key,
       p.acquired_records, p.redelivered_records, p.max_delivery_count,
       p.acquired_first_offset, p.acquired_last_offset, p.acquisition_lock_timeout_ms,
       p.accepted_records, p.released_records, p.rejected_records,
       p.acknowledged_first_offset, p.acknowledged_last_offset, p.ts_request, p.ts_response
FROM partitions p
LEFT JOIN groups g ON g.capture = p.capture AND g.conn_id = p.conn_id AND g.correlation_id = p.correlation_id
WHERE p.api_key IN (78, 79) AND p.group_id IS NOT NULL
"""
# The lock a v0 response does not state: the broker default, group.share.record.lock.duration.ms.
SHARE_LOCK_DEFAULT_MS = 30_000

# Per acquisition (a ShareFetch response's acquired range on one partition): the member's first
# later request acknowledging an offset of that range (acquire -> acknowledge), the first later
# acquisition of one of its offsets by any member (a redelivery), and the lock deadline. An
# acquisition times out when no acknowledgement came before its deadline and the capture runs past
# it; it is then either delivered again or never acknowledged. Ranges are compared by their first
# and last offsets (the columns keep the span of a partition's ranges, not each range).
_SHARE_ACQUISITIONS = f"""
WITH sp AS ({_SHARE_PARTS}),
acq AS (
  SELECT capture, group_id, member_id, topic, partition, acquired_first_offset AS lo, acquired_last_offset AS hi,
         ts_response, EPOCH_US(ts_response)
           + 1000 * COALESCE(acquisition_lock_timeout_ms, {SHARE_LOCK_DEFAULT_MS}) AS deadline_us
  FROM sp WHERE acquired_first_offset IS NOT NULL AND ts_response IS NOT NULL
),
matched AS (
  SELECT a.capture, a.group_id, a.member_id, a.topic, a.partition, a.lo, a.hi, a.ts_response, a.deadline_us,
         MIN(k.ts_request) AS ts_ack
  FROM acq a LEFT JOIN sp k ON k.capture = a.capture AND k.group_id = a.group_id
    AND k.member_id = a.member_id AND k.topic = a.topic AND k.partition = a.partition
    AND k.acknowledged_first_offset <= a.hi AND k.acknowledged_last_offset >= a.lo
    AND k.ts_request > a.ts_response
  GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9
),
again AS (
  SELECT m.capture, m.group_id, m.member_id, m.topic, m.partition, m.lo, m.ts_response, m.deadline_us,
         m.ts_ack, MIN(b.ts_response) AS ts_redelivered
  FROM matched m LEFT JOIN acq b ON b.capture = m.capture AND b.group_id = m.group_id
    AND b.topic = m.topic AND b.partition = m.partition AND b.lo <= m.hi AND b.hi >= m.lo
    AND b.ts_response > m.ts_response
  GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9
)
SELECT x.*,
       CASE WHEN EPOCH_US(x.ts_ack) <= x.deadline_us THEN {millis("x.ts_ack", "x.ts_response")} END AS ack_ms,
       CASE WHEN (x.ts_ack IS NULL OR EPOCH_US(x.ts_ack) > x.deadline_us) AND x.deadline_us <= EPOCH_US(e.ts_end)
            THEN 1 ELSE 0 END AS lock_timeout
FROM again x JOIN capture_end e ON e.capture = x.capture
"""

# Per group: membership from ShareGroupHeartbeat (76) rows; deliveries from ShareFetch/ShareAcknowledge.
# Rates: redelivered of acquired offsets; released and rejected of acknowledged (accepted + released +
# rejected) offsets.
SHARE_GROUPS = f"""
WITH members AS (
  SELECT capture, group_id, COUNT(DISTINCT member_id) AS members,
         SUM(CASE WHEN api_key = 76 THEN 1 ELSE 0 END) AS heartbeats,
         SUM(CASE WHEN api_key = 76 AND error_code <> 0 THEN 1 ELSE 0 END) AS heartbeat_errors,
         MAX(CASE WHEN api_key = 76 THEN member_epoch_response END) AS max_epoch,
         SUM(CASE WHEN api_key = 78 THEN 1 ELSE 0 END) AS share_fetches,
         SUM(CASE WHEN api_key = 79 THEN 1 ELSE 0 END) AS share_acknowledges
  FROM groups WHERE protocol = 'share' GROUP BY 1, 2
),
delivered AS (
  SELECT capture, group_id, SUM(acquired_records) AS acquired, SUM(redelivered_records) AS redelivered,
         MAX(max_delivery_count) AS max_delivery_count, SUM(accepted_records) AS accepted,
         SUM(released_records) AS released, SUM(rejected_records) AS rejected
  FROM ({_SHARE_PARTS}) AS sp GROUP BY 1, 2
),
locks AS (
  SELECT capture, group_id, {pct(0.5, "ack_ms")} AS ack_p50_ms, MAX(ack_ms) AS ack_max_ms,
         SUM(lock_timeout) AS lock_timeouts
  FROM ({_SHARE_ACQUISITIONS}) AS a GROUP BY 1, 2
)
SELECT m.capture, m.group_id, m.members, m.heartbeats, m.heartbeat_errors, m.max_epoch, m.share_fetches,
       m.share_acknowledges, d.acquired, d.redelivered, d.redelivered / NULLIF(d.acquired, 0) AS redelivery_rate,
       d.max_delivery_count, d.accepted, d.released, d.rejected,
       d.released / NULLIF(d.accepted + d.released + d.rejected, 0) AS release_rate,
       d.rejected / NULLIF(d.accepted + d.released + d.rejected, 0) AS reject_rate,
       l.ack_p50_ms, l.ack_max_ms, l.lock_timeouts
FROM members m
LEFT JOIN delivered d ON d.capture = m.capture AND d.group_id = m.group_id
LEFT JOIN locks l ON l.capture = m.capture AND l.group_id = m.group_id
ORDER BY capture, group_id
"""

# Per member and partition of a share group: what it was lent, what it gave back and how fast, and
# the locks that ran out on it (then delivered again, or never acknowledged by the capture's end).
SHARE_DELIVERIES = f"""
WITH sums AS (
  SELECT capture, group_id, member_id, topic, partition, COUNT(acquired_first_offset) AS acquisitions,
         COALESCE(SUM(acquired_records), 0) AS acquired, COALESCE(SUM(redelivered_records), 0) AS redelivered,
         MAX(max_delivery_count) AS max_delivery_count, COALESCE(SUM(accepted_records), 0) AS accepted,
         COALESCE(SUM(released_records), 0) AS released, COALESCE(SUM(rejected_records), 0) AS rejected
  FROM ({_SHARE_PARTS}) AS sp GROUP BY 1, 2, 3, 4, 5
),
locks AS (
  SELECT capture, group_id, member_id, topic, partition, {pct(0.5, "ack_ms")} AS ack_p50_ms,
         MAX(ack_ms) AS ack_max_ms, SUM(lock_timeout) AS lock_timeouts,
         SUM(CASE WHEN lock_timeout = 1 AND ts_redelivered IS NOT NULL THEN 1 ELSE 0 END) AS timed_out_redelivered,
         SUM(CASE WHEN lock_timeout = 1 AND ts_redelivered IS NULL THEN 1 ELSE 0 END) AS timed_out_unacknowledged
  FROM ({_SHARE_ACQUISITIONS}) AS a GROUP BY 1, 2, 3, 4, 5
)
SELECT s.*, l.ack_p50_ms, l.ack_max_ms, COALESCE(l.lock_timeouts, 0) AS lock_timeouts,
       COALESCE(l.timed_out_redelivered, 0) AS timed_out_redelivered,
       COALESCE(l.timed_out_unacknowledged, 0) AS timed_out_unacknowledged
FROM sums s LEFT JOIN locks l ON l.capture = s.capture AND l.group_id = s.group_id
  AND l.member_id IS NOT DISTINCT FROM s.member_id AND l.topic IS NOT DISTINCT FROM s.topic
  AND l.partition = s.partition
ORDER BY capture, group_id, member_id, topic, partition
"""
