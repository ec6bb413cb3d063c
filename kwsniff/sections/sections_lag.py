"""Lag in seconds and in offsets, per group and partition, stopped groups and members behind.

A group's lag in seconds at time t is how old the first record it has not consumed was at t: t minus
the moment that offset became readable (the Produce acknowledgement carrying it), or, when that
Produce is not in the capture, minus the record's own timestamp (the `records` table), flagged
`record_timestamp`. A group at the high watermark has no lag.
"""

from __future__ import annotations

from kwsniff.sections.sql import bucket, int64_minus, latest, offset_bucket, seconds
from kwsniff.view.group_status import KEPT_COMMITS, STATUS_WINDOW, judge_sql


def _lag_seconds(at: str) -> str:
    return (
        f"CASE WHEN committed_offset IS NULL OR hwm IS NULL THEN NULL WHEN committed_offset >= hwm THEN 0.0 "
        f"ELSE {seconds(at, 'COALESCE(produced_at, record_ts)')} END"
    )


_SOURCE = """CASE WHEN committed_offset >= hwm THEN 'caught_up' WHEN produced_at IS NOT NULL THEN 'produce_ack'
  WHEN record_ts IS NOT NULL THEN 'record_timestamp' END"""


def lag_sql(since: str | None = None, until: str | None = None) -> str:
    """Over time: at every commit and every new high watermark of a partition a group committed on,
    the group's latest commit against the latest watermark; one row per second (its worst moment).

    In a window (``since``/``until``: SQL timestamps), the seconds from ``since`` to ``until``, and
    one moment more at ``since`` itself: the lag then of every partition a group had committed on
    before it, so that a group that stopped committing is in every window after."""
    start = (
        f"UNION ALL SELECT k, {since} AS ts, 2 AS kind, CAST(NULL AS BIGINT) AS hwm FROM followed"
        if since
        else ""
    )
    kept = [f"s.second >= {bucket('second', since)}"] if since else []
    kept += [f"s.second <= {until}"] if until else []
    return f"""
WITH
-- One integer per followed (capture, group, topic, partition): the window below sorts by it, not by
-- four columns of which three are strings (several times faster).
followed AS (
  SELECT capture, group_id, topic, partition, ROW_NUMBER() OVER (ORDER BY capture, group_id, topic, partition) AS k
  FROM (SELECT DISTINCT capture, group_id, topic, partition FROM commits_dated) AS d
),
dated AS (
  SELECT f.k, d.ts, d.committed_offset, d.produced_at, d.record_ts
  FROM commits_dated d JOIN followed f ON f.capture = d.capture AND f.group_id = d.group_id
    AND f.topic = d.topic AND f.partition = d.partition
),
events AS (
  SELECT k, ts, 0 AS kind, CAST(NULL AS BIGINT) AS hwm FROM dated
  UNION ALL
  SELECT f.k, w.ts, 1 AS kind, w.hwm
  FROM watermarks w JOIN followed f ON f.capture = w.capture AND f.topic = w.topic AND f.partition = w.partition
  {start}
),
carried AS (
  SELECT k, ts, MAX(CASE WHEN kind = 0 THEN ts END) OVER w AS commit_ts, MAX(hwm) OVER w AS hwm
  FROM events
  WINDOW w AS (PARTITION BY k ORDER BY ts, kind, hwm ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
),
per_second AS (
  SELECT e.k, {bucket("second", "e.ts")} AS second,
         MAX(d.committed_offset) AS committed_offset, MAX(e.hwm) AS high_watermark,
         MAX({int64_minus("e.hwm", "d.committed_offset")}) AS offset_lag, MAX({_lag_seconds("e.ts")}) AS lag_seconds,
         MAX({_SOURCE}) AS lag_source
  FROM carried e JOIN dated d ON d.k = e.k AND d.ts = e.commit_ts
  GROUP BY 1, 2
)
SELECT f.capture, f.group_id, f.topic, f.partition, s.second, s.committed_offset, s.high_watermark,
       s.offset_lag, s.lag_seconds, s.lag_source
FROM per_second s JOIN followed f ON f.k = s.k
{"WHERE " + " AND ".join(kept) if kept else ""}
ORDER BY capture, group_id, topic, partition, second
"""


LAG = lag_sql()

# The session timeout of a group whose JoinGroup (which carries the member's own) is not in the
# capture: `report --session-timeout-ms`, Kafka's consumer default (45 s since 3.0, KIP-735) unless given.
SESSION_TIMEOUT = "__SESSION_TIMEOUT_MS__"

# The groups events of a member leaving (docs/groups.md "Events"): a LeaveGroup, or a KIP-848
# heartbeat with member epoch -1 (leave) or -2 (a static member leaving for now).
_LEAVES = "('leave', 'static_leave')"


def stopped_rows(ends: str = "capture_end") -> str:
    """Per capture and partition a group committed on (`summary_stopped`): its last commit, the latest
    watermark, the group's last fetch, heartbeat, leave and commit, and its session timeout where a
    JoinGroup gave it; and per partition fetched by a group that never committed, one row without
    a commit. The section judges them against --session-timeout-ms at the capture's end (``ends``:
    a query of (capture, ts_end))."""
    return f"""
WITH dated AS (SELECT * FROM commits_dated),
last_commit AS (
  SELECT capture, group_id, topic, partition, MAX(ts) AS ts_commit FROM dated GROUP BY 1, 2, 3, 4
),
hwms AS (SELECT capture, topic, partition, MAX(hwm) AS hwm FROM watermarks GROUP BY 1, 2, 3),
commits_any AS (SELECT capture, group_id, MAX(ts) AS ts_commit FROM commits GROUP BY 1, 2),
committed AS (
  SELECT d.capture, d.group_id, d.topic, d.partition, d.ts, d.committed_offset, d.produced_at, d.record_ts
  FROM dated d JOIN last_commit l ON l.capture = d.capture AND l.group_id = d.group_id
    AND l.topic = d.topic AND l.partition = d.partition AND l.ts_commit = d.ts
),
-- The figures of the group's status (kwsniff.view.group_status.RULE) at the end: its commits of the
-- last STATUS_WINDOW (of its last KEPT_COMMITS), each with its lag in records when it was made (the
-- latest watermark then: the largest before the window, or of the window up to the commit).
numbered AS (
  SELECT d.capture, d.group_id, d.topic, d.partition, d.ts, d.committed_offset, EPOCH_US(e.ts_end) AS end_us,
         ROW_NUMBER() OVER (PARTITION BY d.capture, d.group_id, d.topic, d.partition ORDER BY d.ts DESC) AS nth
  FROM dated d JOIN {ends} e ON e.capture = d.capture
  WHERE d.ts <= e.ts_end
),
recent AS (
  SELECT * FROM numbered WHERE nth <= {KEPT_COMMITS} AND end_us - EPOCH_US(ts) <= {STATUS_WINDOW}
),
before_window AS (
  SELECT w.capture, w.topic, w.partition, MAX(w.hwm) AS hwm
  FROM watermarks w JOIN {ends} e ON e.capture = w.capture
  WHERE EPOCH_US(w.ts) < EPOCH_US(e.ts_end) - {STATUS_WINDOW}
  GROUP BY 1, 2, 3
),
recent_lags AS (
  SELECT r.capture, r.group_id, r.topic, r.partition, r.ts, r.committed_offset,
         {int64_minus("GREATEST(MAX(b.hwm), MAX(w.hwm))", "r.committed_offset")} AS lag
  FROM recent r
  LEFT JOIN before_window b ON b.capture = r.capture AND b.topic = r.topic AND b.partition = r.partition
  LEFT JOIN watermarks w ON w.capture = r.capture AND w.topic = r.topic AND w.partition = r.partition
    AND w.ts <= r.ts AND EPOCH_US(w.ts) >= r.end_us - {STATUS_WINDOW}
  GROUP BY 1, 2, 3, 4, 5, 6
),
figures AS (
  SELECT capture, group_id, topic, partition, COUNT(*) AS recent_commits,
         COUNT(DISTINCT committed_offset) AS recent_offsets,
         CASE WHEN COUNT(lag) = COUNT(*)
               AND SUM(CASE WHEN lag > previous_lag THEN 1 ELSE 0 END) = COUNT(*) - 1 THEN 1 ELSE 0 END AS lag_rising
  FROM (
    SELECT *, LAG(lag) OVER (PARTITION BY capture, group_id, topic, partition ORDER BY ts) AS previous_lag
    FROM recent_lags
  ) AS l
  GROUP BY 1, 2, 3, 4
),
-- Groups that never committed: the partitions their clients fetched.
uncommitted AS (
  SELECT DISTINCT gc.capture, gc.group_id, p.topic, p.partition,
         CAST(NULL AS TIMESTAMPTZ) AS ts, CAST(NULL AS BIGINT) AS committed_offset,
         CAST(NULL AS TIMESTAMPTZ) AS produced_at, CAST(NULL AS TIMESTAMPTZ) AS record_ts
  FROM group_clients gc
  JOIN partition_exchanges p ON p.capture = gc.capture AND p.client_id = gc.client_id
    AND p.client_ip = gc.client_ip AND p.api_key = 1
  LEFT JOIN commits_any c ON c.capture = gc.capture AND c.group_id = gc.group_id
  WHERE c.ts_commit IS NULL
),
latest AS (SELECT * FROM committed UNION ALL SELECT * FROM uncommitted),
fetches AS (
  SELECT gc.capture, gc.group_id, MAX(r.ts_request) AS ts_fetch
  FROM group_clients gc JOIN requests r ON r.capture = gc.capture AND r.client_id = gc.client_id
    AND r.client_ip = gc.client_ip AND r.api_key IN (1, 78)
  GROUP BY 1, 2
),
beats AS (
  SELECT capture, group_id,
         MAX(CASE WHEN event IS NULL OR event NOT IN {_LEAVES} THEN ts_request END) AS ts_heartbeat,
         MAX(CASE WHEN event IN {_LEAVES} THEN ts_request END) AS ts_leave,
         MAX(session_timeout_ms) AS session_timeout_ms
  FROM groups GROUP BY 1, 2
)
SELECT l.capture, l.group_id, l.topic, l.partition, l.ts, l.committed_offset, l.produced_at, l.record_ts,
       w.hwm, e.ts_end, f.ts_fetch, b.ts_heartbeat, b.ts_leave, b.session_timeout_ms AS group_session_timeout_ms,
       -- GREATEST skips nulls (DuckDB and Spark): the latest of what the group was seen doing.
       GREATEST(f.ts_fetch, b.ts_heartbeat, c.ts_commit) AS ts_active,
       COALESCE(s.recent_commits, 0) AS recent_commits, COALESCE(s.recent_offsets, 0) AS recent_offsets,
       COALESCE(s.lag_rising, 0) AS lag_rising
FROM latest l
LEFT JOIN hwms w ON w.capture = l.capture AND w.topic = l.topic AND w.partition = l.partition
JOIN {ends} e ON e.capture = l.capture
LEFT JOIN fetches f ON f.capture = l.capture AND f.group_id = l.group_id
LEFT JOIN beats b ON b.capture = l.capture AND b.group_id = l.group_id
LEFT JOIN commits_any c ON c.capture = l.capture AND c.group_id = l.group_id
LEFT JOIN figures s ON s.capture = l.capture AND s.group_id = l.group_id AND s.topic = l.topic
  AND s.partition = l.partition
"""


STOPPED_ROWS = stopped_rows()

# The group's status (docs/report.md "Group status"): the rule the live metric judges, over the
# figures stopped_rows measured at the end.
STATUS = judge_sql(
    {
        "left": "CASE WHEN ts_leave IS NOT NULL AND ts_leave >= ts_active THEN 1 ELSE 0 END",
        "committed": "CASE WHEN committed_offset IS NULL THEN 0 ELSE 1 END",
        "offset_lag": int64_minus("hwm", "committed_offset"),
        "commit_age": "EPOCH_US(ts_end) - EPOCH_US(ts)",
        "recent_commits": "recent_commits",
        "recent_offsets": "recent_offsets",
        "lag_rising": "lag_rising",
    }
)


def stopped_sql(rows: str = "summary_stopped") -> str:
    """The `stopped` section over ``rows`` (a query of STOPPED_ROWS' columns). A group's state at the
    capture's end: `left` when the last thing it did was leave; `stopped` when silent past its session
    timeout without leaving; `never_committed` when it fetches but never committed; else `active`."""
    silent = seconds("ts_end", "ts_active")
    return f"""
SELECT capture, group_id, topic, partition,
       CASE WHEN ts_leave IS NOT NULL AND ts_leave >= ts_active THEN 'left'
            WHEN {silent} * 1000 > session_timeout_ms THEN 'stopped'
            WHEN committed_offset IS NULL THEN 'never_committed'
            ELSE 'active' END AS state,
       {STATUS} AS status,
       committed_offset, hwm AS high_watermark, {int64_minus("hwm", "committed_offset")} AS offset_lag,
       {_lag_seconds("ts_end")} AS lag_seconds, {_SOURCE} AS lag_source,
       ts AS last_commit, ts_fetch AS last_fetch, ts_heartbeat AS last_heartbeat, ts_leave AS last_leave,
       {silent} AS silent_seconds, session_timeout_ms, ts_end AS capture_end
FROM (
  SELECT *, COALESCE(group_session_timeout_ms, {SESSION_TIMEOUT}) AS session_timeout_ms FROM {rows}
) AS judged
ORDER BY state DESC, lag_seconds DESC, capture, group_id, topic, partition
"""


STOPPED = stopped_sql()

# Which member is behind: each member's clients' last Fetch per partition (its position against
# the high watermark that Fetch returned), named by the member id and instance its group rows give.
# `measured_from` says so on every row ('last_fetch'): a client that prefetches (librdkafka) fetches
# ahead of what its application processed and committed, so its position can be at the high
# watermark while its group's commit, which `lag` and `stopped` measure from, is far behind.
MEMBER_LAG = f"""
WITH members AS (
  SELECT capture, group_id, client_id, client_ip,
         MAX(member_id) AS member_id, MAX(group_instance_id) AS group_instance_id
  FROM groups
  WHERE member_id IS NOT NULL AND member_id <> ''
  GROUP BY 1, 2, 3, 4
),
fetched AS (
  SELECT capture, client_id, client_ip, topic, partition, MAX(ts_response) AS ts_response,
         {latest("fetch_offset", "ts_response", "correlation_id")} AS fetch_offset,
         {latest("high_watermark", "ts_response", "correlation_id")} AS high_watermark
  FROM partition_exchanges
  WHERE api_key = 1 AND fetch_offset IS NOT NULL AND high_watermark IS NOT NULL AND ts_response IS NOT NULL
  GROUP BY capture, client_id, client_ip, topic, partition
)
SELECT m.capture, m.group_id, m.member_id, m.group_instance_id, f.client_id, f.client_ip, f.topic, f.partition,
       f.fetch_offset AS position, 'last_fetch' AS measured_from, f.high_watermark, {int64_minus("f.high_watermark", "f.fetch_offset")} AS offset_lag,
       CASE WHEN f.fetch_offset >= f.high_watermark THEN 0.0
            ELSE {seconds("f.ts_response", "MIN(pr.ts_ack)")} END AS lag_seconds,
       f.ts_response AS last_fetch
FROM fetched f JOIN members m ON m.capture = f.capture AND m.client_id = f.client_id AND m.client_ip = f.client_ip
LEFT JOIN produced_buckets pr ON pr.capture = f.capture AND pr.topic = f.topic AND pr.partition = f.partition
  AND pr.bucket = {offset_bucket("f.fetch_offset")} AND f.fetch_offset BETWEEN pr.first_offset AND pr.last_offset
GROUP BY m.capture, m.group_id, m.member_id, m.group_instance_id, f.client_id, f.client_ip, f.topic,
         f.partition, f.fetch_offset, f.high_watermark, f.ts_response
ORDER BY offset_lag DESC, capture, group_id, member_id, topic, partition
"""

# The sections that keep state: under --since/--until they read what the capture knew (views.known).
STATEFUL = ("lag", "stopped", "member_lag")


def windowed(name: str, since: str | None, until: str | None) -> str:
    """The SQL of a STATEFUL section for a window (``since``/``until``: SQL timestamps or None): over
    every row up to ``until``, whatever ``since`` cuts from the other sections. `lag`: its seconds in
    the window and the lag at ``since``; `stopped`: the state at the window's end (``until`` or the
    capture's end, the earlier); `member_lag`: each member's last Fetch up to ``until``."""
    from kwsniff.sections.views import known

    if name == "lag":
        return known(lag_sql(since, until))
    if name == "stopped":
        ends = (
            f"(SELECT capture, LEAST(ts_end, {until}) AS ts_end FROM capture_end)" if until else "capture_end"
        )
        return known(stopped_sql(f"({stopped_rows(ends)}) AS r"))
    return known(MEMBER_LAG)
