"""Sections about groups: rebalances of every protocol, storms, share groups."""

from __future__ import annotations

from kwsniff.report.sql import millis, pct, ranked

# Classic generations: from the first JoinGroup request of a generation (a member's
# MEMBER_ID_REQUIRED attempt, KIP-394, counts for the generation it then joins) to the last
# SyncGroup response of that generation.
_CLASSIC_JOINS = """
SELECT capture, group_id, member_id, ts_request, ts_response, error_code, protocol_name,
       FIRST_VALUE(CASE WHEN error_code = 0 THEN generation_id END IGNORE NULLS) OVER (
         PARTITION BY capture, group_id, member_id ORDER BY ts_request
         ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS generation
FROM groups WHERE api_key = 11
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
SELECT capture, group_id, protocol, DATE_TRUNC('{STORM_WINDOW}', ts) AS window_start, COUNT(*) AS rebalances
FROM starts
GROUP BY 1, 2, 3, 4 HAVING COUNT(*) > {STORM_REBALANCES}
ORDER BY rebalances DESC, capture, group_id, window_start
"""

# Share groups (KIP-932): membership from ShareGroupHeartbeat rows, traffic from ShareFetch (78) and
# ShareAcknowledge (79) requests.
SHARE_GROUPS = f"""
WITH members AS (
  SELECT capture, group_id, COUNT(DISTINCT member_id) AS members, COUNT(*) AS heartbeats,
         SUM(CASE WHEN error_code <> 0 THEN 1 ELSE 0 END) AS heartbeat_errors,
         MAX(member_epoch_response) AS max_epoch
  FROM groups WHERE protocol = 'share' GROUP BY 1, 2
),
traffic AS (
  SELECT r.capture, r.api_name, COUNT(*) AS requests, SUM(r.record_count) AS records,
         {pct(0.5, "r.latency_ms")} AS p50_ms, MAX(r.latency_ms) AS max_ms
  FROM ({ranked("SELECT * FROM requests WHERE api_key IN (78, 79)", "capture, api_name", "latency_ms")}) AS r
  GROUP BY 1, 2
)
SELECT m.capture, m.group_id, m.members, m.heartbeats, m.heartbeat_errors, m.max_epoch,
       t.api_name, t.requests, t.records, t.p50_ms, t.max_ms
FROM members m LEFT JOIN traffic t ON t.capture = m.capture
ORDER BY capture, group_id, api_name
"""
