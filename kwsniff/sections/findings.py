"""The report's `findings` section: what is wrong, first, one sentence per finding with its numbers.

Each rule reads another section's answer (or a table, for the capture's own quality) and makes rows
of (rule, severity, finding, shown_in: the section showing its rows, subjects); rules are ranked by
harm in RULE_ORDER, and within a rule by their numbers (the worst first). Thresholds are THRESHOLDS, each overridable with
`report --finding-threshold NAME=VALUE` (docs/report.md "Findings"). Sentences are built in SQL, so
both engines write the same text: numbers are whole (rounded) and grouped by thousands here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kwsniff.sections.sections_brokers import BROKERS
from kwsniff.sections.sections_lag import STOPPED
from kwsniff.sections.sections_traffic import ERRORS, THROTTLED
from kwsniff.sections.sql import split_order
from kwsniff.sections.upgrade import UPGRADE_SUMMED


@dataclass(frozen=True)
class Threshold:
    default: float
    help: str


# {name: its default and what it decides}; docs/report.md "Findings" lists them.
THRESHOLDS: dict[str, Threshold] = {
    "stopped_records": Threshold(1, "records a stopped or left group must be behind on a topic"),
    "lag_growth_seconds": Threshold(
        30, "seconds a partition's lag must have grown, from its lowest to the end of the capture"
    ),
    "error_rate": Threshold(0.01, "failed responses per request of a client"),
    "broker_p99_factor": Threshold(
        3, "times the slowest other broker's p99 (same API) a broker's p99 must reach to stand out"
    ),
    "broker_p99_ms": Threshold(10, "milliseconds a broker's p99 must reach to stand out at all"),
    "broker_p99_requests": Threshold(10, "requests of the API a broker (and each peer) must have answered"),
    "throttle_ms": Threshold(1, "milliseconds a client must have been throttled in all"),
    "gap_bytes": Threshold(1, "bytes a capture must have missed in stream gaps"),
    "decode_errors": Threshold(
        1, "frames of a capture that did not decode (decode errors, undecodable frames)"
    ),
    "unnamed_topic_ids": Threshold(1, "topic ids of a capture's partition rows without a topic name"),
}


def placeholder(name: str) -> str:
    return f"__FINDING_{name.upper()}__"


def parse_threshold(text: str) -> tuple[str, float]:
    """``NAME=VALUE`` as (name, value): a known threshold and a number at least 0."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or name not in THRESHOLDS:
        raise ValueError(f"{text!r}: expected NAME=VALUE, NAME one of {', '.join(THRESHOLDS)}")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{text!r}: {value!r} is not a number") from None
    if not number >= 0 or number == float("inf"):
        raise ValueError(f"{text!r}: the value must be a finite number at least 0")
    return name, number


def bind(sql: str, given: dict[str, float] | None = None) -> str:
    """``sql`` with every threshold's placeholder replaced by its value (``given``, else its default)."""
    for name, t in THRESHOLDS.items():
        value = (given or {}).get(name, t.default)
        sql = sql.replace(placeholder(name), repr(float(value)))
    return sql


def number(expr: str) -> str:
    """``expr`` rounded to a whole number, as text grouped by thousands (`11,164`), on both engines:
    its digits padded to 18, a comma after every three, the leading zeros and commas trimmed."""
    v = f"CAST(ROUND({expr}) AS BIGINT)"
    padded = f"LPAD(CAST(ABS({v}) AS VARCHAR), 18, '0')"
    grouped = " || ',' || ".join(f"SUBSTRING({padded}, {i}, 3)" for i in range(1, 19, 3))
    return f"(CASE WHEN {v} < 0 THEN '-' ELSE '' END || COALESCE(NULLIF(LTRIM({grouped}, '0,'), ''), '0'))"


def _plural(expr: str, one: str, many: str) -> str:
    return f"CASE WHEN {expr} = 1 THEN '{one}' ELSE '{many}' END"


def _body(sql: str) -> str:
    return split_order(sql)[0]


# Columns every rule's rows have, in this order.
COLUMNS = "rule, severity, harm, finding, shown_in, capture, group_id, topic, client_id, broker"
_NO = "CAST(NULL AS VARCHAR)"


def _stopped() -> str:
    lagged = "stopped_answer AS s"
    records = number("offset_lag")
    secs = number("lag_seconds")
    return f"""
SELECT 'stopped_group' AS rule, 'critical' AS severity, CAST(offset_lag AS DOUBLE) AS harm,
  'group `' || group_id || '` ' || state || ' ' || {number("silent_seconds")} || ' s ago'
  || CASE WHEN state = 'stopped' THEN ' (session timeout ' || {number("session_timeout_ms / 1000.0")} || ' s)' ELSE '' END
  || ', ' || {records} || ' ' || {_plural("offset_lag", "record", "records")}
  || CASE WHEN lag_seconds IS NULL THEN '' ELSE ' and ' || {secs} || ' s' END
  || ' behind on topic `' || topic || '` (' || CAST(partitions AS VARCHAR) || ' '
  || {_plural("partitions", "partition", "partitions")} || ')' AS finding,
  'stopped' AS shown_in, capture, group_id, topic, {_NO} AS client_id, {_NO} AS broker
FROM (
  SELECT capture, group_id, topic, state, SUM(offset_lag) AS offset_lag, MAX(lag_seconds) AS lag_seconds,
         MIN(silent_seconds) AS silent_seconds, MAX(session_timeout_ms) AS session_timeout_ms,
         COUNT(*) AS partitions
  FROM {lagged}
  WHERE state IN ('stopped', 'left') AND offset_lag > 0
  GROUP BY capture, group_id, topic, state
) AS g
WHERE offset_lag >= {placeholder("stopped_records")}"""


def _lag_growing() -> str:
    """Groups still at work (`stopped`'s `active`) whose lag in seconds at the end of the capture is
    above the lowest the `lag` section saw on the partition by at least the threshold."""
    return f"""
SELECT 'lag_growing' AS rule, 'warning' AS severity, growth AS harm,
  'group `' || group_id || '` falls behind on topic `' || topic || '`: its lag grew by ' || {number("growth")}
  || ' s to ' || {number("end_lag")} || ' s at the end (' || CAST(partitions AS VARCHAR) || ' '
  || {_plural("partitions", "partition", "partitions")} || ')' AS finding,
  'lag' AS shown_in, capture, group_id, topic, {_NO} AS client_id, {_NO} AS broker
FROM (
  SELECT s.capture, s.group_id, s.topic, MAX(s.lag_seconds - l.lowest) AS growth, MAX(s.lag_seconds) AS end_lag,
         COUNT(*) AS partitions
  FROM stopped_answer AS s
  JOIN (
    SELECT capture, group_id, topic, partition, MIN(lag_seconds) AS lowest
    FROM lag_answer AS l GROUP BY capture, group_id, topic, partition
  ) AS l ON l.capture = s.capture AND l.group_id = s.group_id AND l.topic = s.topic AND l.partition = s.partition
  WHERE s.state = 'active' AND s.lag_seconds - l.lowest >= {placeholder("lag_growth_seconds")}
  GROUP BY s.capture, s.group_id, s.topic
) AS g"""


def _errors() -> str:
    return f"""
SELECT 'client_errors' AS rule, 'warning' AS severity, failures / client_requests AS harm,
  'client `' || client_id || '` got ' || {number("failures")} || ' failed '
  || {_plural("failures", "response", "responses")} || ' in ' || {number("client_requests")} || ' requests ('
  || {number("100.0 * failures / client_requests")} || '%), most ' || top_error || ' on ' || top_api AS finding,
  'errors' AS shown_in, {_NO} AS capture, {_NO} AS group_id, {_NO} AS topic, client_id, {_NO} AS broker
FROM (
  SELECT client_id, SUM(errors) AS failures, MAX(client_requests) AS client_requests,
         MAX(CASE WHEN n = 1 THEN error_name END) AS top_error, MAX(CASE WHEN n = 1 THEN api_name END) AS top_api
  FROM (
    SELECT client_id, error_name, api_name, errors, client_requests,
           ROW_NUMBER() OVER (PARTITION BY client_id ORDER BY errors DESC, error_name, api_name) AS n
    FROM (
      SELECT client_id, error_name, api_name, SUM(errors) AS errors, MAX(client_requests) AS client_requests
      FROM ({_body(ERRORS)}) AS e
      WHERE kind = 'failure' AND client_id IS NOT NULL
      GROUP BY client_id, error_name, api_name
    ) AS per_name
  ) AS ranked
  GROUP BY client_id
) AS c
WHERE client_requests > 0 AND failures / client_requests >= {placeholder("error_rate")}"""


def tenths(expr: str) -> str:
    """``expr`` (at least 0) rounded to one decimal, as text (`1,234.5`), on both engines."""
    v = f"CAST(ROUND(({expr}) * 10) AS BIGINT)"
    return f"({number(f'FLOOR({v} / 10)')} || '.' || CAST({v} % 10 AS VARCHAR))"


def _broker_p99() -> str:
    """Brokers whose p99 for an API (long polls apart: their latency is a wait) is at least the
    factor above every other broker's p99 for it."""
    polls = "('Fetch', 'ShareFetch', 'JoinGroup')"
    busy = f"requests >= {placeholder('broker_p99_requests')} AND api_name NOT IN {polls}"
    broker = "broker_ip || ':' || CAST(broker_port AS VARCHAR)"
    return f"""
SELECT 'broker_p99' AS rule, 'warning' AS severity, p99_ms / NULLIF(peers_p99, 0) AS harm,
  'broker ' || broker || ' answers ' || api_name || ' in ' || {tenths("p99_ms")} || ' ms at p99 ('
  || {number("requests")} || ' ' || {_plural("requests", "request", "requests")} || '), against at most ' || {tenths("peers_p99")} || ' ms on '
  || CAST(peers AS VARCHAR) || ' other ' || {_plural("peers", "broker", "brokers")} AS finding,
  'brokers' AS shown_in, {_NO} AS capture, {_NO} AS group_id, {_NO} AS topic, {_NO} AS client_id, broker
FROM (
  SELECT {broker.replace("broker_", "b.broker_")} AS broker, b.api_name, b.requests, b.p99_ms,
         MAX(o.p99_ms) AS peers_p99, COUNT(*) AS peers
  FROM brokers_answer AS b
  JOIN brokers_answer AS o ON o.api_name = b.api_name
    AND (o.broker_ip <> b.broker_ip OR o.broker_port <> b.broker_port)
  WHERE b.{busy.replace(" AND api_name", " AND b.api_name")} AND o.{busy.replace(" AND api_name", " AND o.api_name")}
  GROUP BY b.broker_ip, b.broker_port, b.api_name, b.requests, b.p99_ms
) AS p
WHERE p99_ms >= {placeholder("broker_p99_factor")} * peers_p99 AND p99_ms >= {placeholder("broker_p99_ms")}"""


def _throttled() -> str:
    return f"""
SELECT 'throttled' AS rule, 'warning' AS severity, CAST(throttle_ms_total AS DOUBLE) AS harm,
  'client `' || client_id || '` was throttled on ' || {number("throttled_requests")} || ' '
  || {_plural("throttled_requests", "request", "requests")} || ', ' || {number("throttle_ms_total")}
  || ' ms in all (at most ' || {number("throttle_ms_max")} || ' ms)' AS finding,
  'throttled' AS shown_in, {_NO} AS capture, {_NO} AS group_id, {_NO} AS topic, client_id, {_NO} AS broker
FROM ({_body(THROTTLED)}) AS t
WHERE client_id IS NOT NULL AND throttle_ms_total >= {placeholder("throttle_ms")}"""


def _which(cluster: str, node: str) -> str:
    """The cluster, the node or both a misrouted row's `mismatch` names (CONCAT_WS is not used: sqlglot
    makes Spark's keep its nulls as empty strings)."""
    c = f"'cluster `' || {cluster} || '`'"
    n = f"'node ' || CAST({node} AS VARCHAR)"
    return f"CASE mismatch WHEN 'cluster' THEN {c} WHEN 'node' THEN {n} ELSE {c} || ' and ' || {n} END"


def _misrouted() -> str:
    broker = "broker_ip || ':' || CAST(broker_port AS VARCHAR)"
    return f"""
SELECT 'misrouted' AS rule, 'warning' AS severity, CAST(connections AS DOUBLE) AS harm,
  'client `' || COALESCE(client_id, '') || '` at ' || client_ip || ' meant '
  || {_which("intended_cluster_id", "intended_node_id")} || ' but reached '
  || {_which("reported_cluster_id", "reported_node_id")}
  || ' at ' || broker || ' (' || CAST(connections AS VARCHAR) || ' '
  || {_plural("connections", "connection", "connections")} || ')' AS finding,
  'misrouted' AS shown_in, capture, {_NO} AS group_id, {_NO} AS topic, client_id, broker
FROM (
  SELECT capture, client_id, client_ip, {broker} AS broker, mismatch, intended_cluster_id, reported_cluster_id,
         intended_node_id, reported_node_id, COUNT(*) AS connections
  FROM summary_misrouted
  GROUP BY capture, client_id, client_ip, broker_ip, broker_port, mismatch, intended_cluster_id,
           reported_cluster_id, intended_node_id, reported_node_id
) AS m"""


def _upgrade() -> str:
    return f"""
SELECT 'kafka4_refuses' AS rule, 'warning' AS severity, CAST(requests AS DOUBLE) AS harm,
  'client `' || COALESCE(client_id, '') || '`'
  || CASE WHEN client_software IS NULL THEN '' ELSE ' (' || client_software || ')' END
  || ' sends ' || api_name || ' v' || CAST(api_version AS VARCHAR) || ', which Kafka ' || removed_in
  || ' refuses (' || {number("requests")} || ' ' || {_plural("requests", "request", "requests")} || ')' AS finding,
  'upgrade' AS shown_in, {_NO} AS capture, {_NO} AS group_id, {_NO} AS topic, client_id, {_NO} AS broker
FROM ({_body(UPGRADE_SUMMED)}) AS u
WHERE removed_in LIKE '4.%'"""


def _storms() -> str:
    return f"""
SELECT 'rebalance_storm' AS rule, 'warning' AS severity, CAST(most AS DOUBLE) AS harm,
  'group `' || group_id || '` rebalanced ' || CAST(most AS VARCHAR) || ' times in one minute ('
  || CAST(minutes AS VARCHAR) || ' ' || {_plural("minutes", "such minute", "such minutes")} || ')' AS finding,
  'storms' AS shown_in, capture, group_id, {_NO} AS topic, {_NO} AS client_id, {_NO} AS broker
FROM (
  SELECT capture, group_id, MAX(rebalances) AS most, COUNT(*) AS minutes FROM summary_storms GROUP BY capture, group_id
) AS s"""


def _capture_quality() -> str:
    return f"""
SELECT 'stream_gaps' AS rule, 'info' AS severity, CAST(gap_bytes AS DOUBLE) AS harm,
  'capture `' || capture || '` missed ' || {number("gap_bytes")} || ' bytes in ' || {number("gaps")} || ' stream '
  || {_plural("gaps", "gap", "gaps")} || ' on ' || CAST(conns AS VARCHAR) || ' '
  || {_plural("conns", "connection", "connections")} || ': their rows are incomplete' AS finding,
  'connections' AS shown_in, capture, {_NO} AS group_id, {_NO} AS topic, {_NO} AS client_id, {_NO} AS broker
FROM (
  SELECT capture, SUM(gaps) AS gaps, SUM(gap_bytes) AS gap_bytes, COUNT(*) AS conns
  FROM connections WHERE gap_bytes > 0 GROUP BY capture
) AS g
WHERE gap_bytes >= {placeholder("gap_bytes")}
UNION ALL
SELECT 'decode_errors' AS rule, 'info' AS severity, CAST(bad AS DOUBLE) AS harm,
  'capture `' || capture || '` has ' || {number("bad")} || ' ' || {_plural("bad", "frame", "frames")}
  || ' that did not decode on ' || CAST(conns AS VARCHAR) || ' '
  || {_plural("conns", "connection", "connections")} AS finding,
  'connections' AS shown_in, capture, {_NO} AS group_id, {_NO} AS topic, {_NO} AS client_id, {_NO} AS broker
FROM (
  SELECT capture, SUM(COALESCE(decode_errors, 0) + COALESCE(undecodable_frames, 0)) AS bad, COUNT(*) AS conns
  FROM connections WHERE COALESCE(decode_errors, 0) + COALESCE(undecodable_frames, 0) > 0 GROUP BY capture
) AS d
WHERE bad >= {placeholder("decode_errors")}
UNION ALL
SELECT 'damaged_capture' AS rule, 'info' AS severity, 0.0 AS harm,
  'capture `' || capture || '` is ' || status || COALESCE(': ' || reason, '') AS finding,
  'captures' AS shown_in, capture, {_NO} AS group_id, {_NO} AS topic, {_NO} AS client_id, {_NO} AS broker
FROM captures WHERE status IS NOT NULL AND status <> 'ok'
UNION ALL
SELECT 'dropped_packets' AS rule, 'info' AS severity, CAST(dropped AS DOUBLE) AS harm,
  'capture `' || capture || '` dropped ' || {number("dropped")} || ' ' || {_plural("dropped", "packet", "packets")}
  || ' (kernel ' || {number("kernel")} || ', interface ' || {number("iface")} || ', queue ' || {number("queue")}
  || ')' AS finding,
  'capture_stats' AS shown_in, capture, {_NO} AS group_id, {_NO} AS topic, {_NO} AS client_id, {_NO} AS broker
FROM (
  SELECT capture, SUM(COALESCE(kernel_drops, 0)) AS kernel, SUM(COALESCE(if_drops, 0)) AS iface,
         SUM(COALESCE(queue_drops, 0)) AS queue,
         SUM(COALESCE(kernel_drops, 0) + COALESCE(if_drops, 0) + COALESCE(queue_drops, 0)) AS dropped
  FROM capture_stats GROUP BY capture
) AS s
WHERE dropped > 0
UNION ALL
SELECT 'unnamed_topic_ids' AS rule, 'info' AS severity, CAST(ids AS DOUBLE) AS harm,
  'capture `' || capture || '` has ' || {number("row_count")} || ' partition '
  || {_plural("row_count", "row", "rows")} || ' of ' || CAST(ids AS VARCHAR) || ' topic '
  || {_plural("ids", "id", "ids")} || ' without a topic name (no Metadata naming them was captured)' AS finding,
  'partitions' AS shown_in, capture, {_NO} AS group_id, {_NO} AS topic, {_NO} AS client_id, {_NO} AS broker
FROM (
  SELECT capture, COUNT(DISTINCT topic_id) AS ids, COUNT(*) AS row_count
  FROM partitions WHERE topic IS NULL AND topic_id IS NOT NULL GROUP BY capture
) AS u
WHERE ids >= {placeholder("unnamed_topic_ids")}"""


# The rules by harm, the worst first: (name, its rows' SQL). docs/report.md "Findings" says each.
RULE_ORDER = (
    "stopped_group",
    "lag_growing",
    "client_errors",
    "throttled",
    "broker_p99",
    "misrouted",
    "kafka4_refuses",
    "rebalance_storm",
    "damaged_capture",
    "dropped_packets",
    "stream_gaps",
    "decode_errors",
    "unnamed_topic_ids",
)


def findings_sql(stopped: str = STOPPED, lag: str = "SELECT * FROM summary_lag ORDER BY 1") -> str:
    """The section over the answers of `stopped` and `lag` (``stopped``, ``lag``: their SQL, the
    windowed one under --since/--until) and of the other sections, ranked: rule by RULE_ORDER, then
    harm (the rule's number: records behind, seconds grown, failure rate...) largest first."""
    rules = [
        _stopped(),
        _lag_growing(),
        _errors(),
        _throttled(),
        _broker_p99(),
        _misrouted(),
        _upgrade(),
        _storms(),
        _capture_quality(),
    ]
    order = " ".join(f"WHEN '{r}' THEN {i}" for i, r in enumerate(RULE_ORDER))
    keys = (
        f"CASE rule {order} END, harm DESC NULLS LAST, capture NULLS LAST, group_id NULLS LAST,"
        " topic NULLS LAST, client_id NULLS LAST, broker NULLS LAST, finding"
    )
    union = "\nUNION ALL\n".join(f"SELECT {COLUMNS} FROM ({r}) AS r{i}" for i, r in enumerate(rules))
    # Each read once, as a CTE: sqlglot lifts the CTEs inside them to the top for Spark, where a name
    # may be defined once (lag's `dated` renamed: stopped's has the same name).
    lag = re.sub(r"\bdated\b", "lag_dated", _body(lag))
    return f"""
WITH stopped_answer AS ({_body(stopped)}),
lag_answer AS ({lag}),
brokers_answer AS ({_body(BROKERS)})
SELECT ROW_NUMBER() OVER (ORDER BY {keys}) AS rank, severity, finding, shown_in, rule,
       capture, group_id, topic, client_id, broker
FROM ({union}) AS f
ORDER BY rank
"""


FINDINGS = findings_sql()
