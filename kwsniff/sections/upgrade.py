"""The report's `upgrade` section: which clients still speak what a Kafka 4 broker refuses.

Plain SQL over views named after the tables (`requests`, `connections`, `partitions`), written in
the dialect DuckDB and Spark SQL share, so either report engine runs it as it is (docs/upgrade.md).
`requests.removed_in` (the request version) and `partitions.removed_in` (produced message formats v0
and v1, KIP-724) come from the decoder's release table, never from a broker's ApiVersions.
"""

from __future__ import annotations

# One row per client (client id, address, software) and API version that some Apache Kafka release
# refuses, oldest removal first. A Produce request is flagged by its version or by the record format
# of any of its partitions. NULLS LAST is spelled out: Spark sorts nulls first by default.
_FLAGGED = """
WITH formats AS (
    SELECT capture, conn_id, correlation_id, api_key, api_version, min(removed_in) AS removed_in
    FROM partitions
    WHERE removed_in IS NOT NULL
    GROUP BY capture, conn_id, correlation_id, api_key, api_version
),
flagged AS (
    SELECT
        r.capture AS capture,
        r.client_id AS client_id,
        c.client_ip AS client_ip,
        CASE
            WHEN c.client_software_name IS NULL THEN NULL
            ELSE concat_ws(' ', c.client_software_name, c.client_software_version)
        END AS client_software,
        r.api_key AS api_key,
        r.api_name AS api_name,
        r.api_version AS api_version,
        r.ts_request AS ts_request,
        coalesce(r.removed_in, f.removed_in) AS removed_in
    FROM requests AS r
    LEFT JOIN formats AS f
        ON f.capture = r.capture AND f.conn_id = r.conn_id AND f.correlation_id = r.correlation_id
        AND f.api_key = r.api_key AND f.api_version = r.api_version
    LEFT JOIN connections AS c ON c.capture = r.capture AND c.conn_id = r.conn_id
    WHERE coalesce(r.removed_in, f.removed_in) IS NOT NULL
)"""
_KEYS = "client_id, client_ip, client_software, api_key, api_name, api_version"
_ORDER = """
ORDER BY removed_in, client_id NULLS LAST, client_ip NULLS LAST, client_software NULLS LAST,
    api_key, api_version
"""
UPGRADE_SQL = f"""{_FLAGGED}
SELECT
    {_KEYS},
    count(*) AS requests,
    min(ts_request) AS first_seen,
    max(ts_request) AS last_seen,
    min(removed_in) AS removed_in
FROM flagged
GROUP BY {_KEYS}{_ORDER}"""

# The same answer in two steps, as the report runs it: per capture (kwsniff.sections.summaries'
# `summary_upgrade`), then added up over the captures.
UPGRADE_ROWS = f"""{_FLAGGED}
SELECT
    capture, {_KEYS},
    count(*) AS requests,
    min(ts_request) AS first_seen,
    max(ts_request) AS last_seen,
    min(removed_in) AS removed_in
FROM flagged
GROUP BY capture, {_KEYS}
"""
UPGRADE_SUMMED = f"""
SELECT
    {_KEYS},
    sum(requests) AS requests,
    min(first_seen) AS first_seen,
    max(last_seen) AS last_seen,
    min(removed_in) AS removed_in
FROM summary_upgrade
GROUP BY {_KEYS}{_ORDER}"""

# Brokers seen sending the ZooKeeper-era inter-broker requests Kafka 4.0 removed with ZooKeeper mode
# (KIP-833): LeaderAndIsr, StopReplica, UpdateMetadata (controller to broker) and ControlledShutdown
# (broker to controller). The sender is the connection's client side.
_ZOOKEEPER_KEYS = """c.client_ip AS sender_ip,
    r.client_id AS client_id,
    c.broker_ip AS receiver_ip,
    c.broker_port AS receiver_port,
    r.api_key AS api_key,
    r.api_name AS api_name,
    r.api_version AS api_version"""
_ZOOKEEPER_FROM = """
FROM requests AS r
LEFT JOIN connections AS c ON c.capture = r.capture AND c.conn_id = r.conn_id
WHERE r.api_key IN (4, 5, 6, 7)
GROUP BY"""
_ZOOKEEPER_GROUP = (
    "c.client_ip, r.client_id, c.broker_ip, c.broker_port, r.api_key, r.api_name, r.api_version"
)
_ZOOKEEPER_ORDER = """
ORDER BY sender_ip NULLS LAST, client_id NULLS LAST, receiver_ip NULLS LAST, receiver_port NULLS LAST,
    api_key, api_version
"""
_ZOOKEEPER_COUNTS = """count(*) AS requests,
    min(r.ts_request) AS first_seen,
    max(r.ts_request) AS last_seen,
    min(r.removed_in) AS removed_in"""
ZOOKEEPER_SQL = f"""
SELECT
    {_ZOOKEEPER_KEYS},
    {_ZOOKEEPER_COUNTS}{_ZOOKEEPER_FROM} {_ZOOKEEPER_GROUP}{_ZOOKEEPER_ORDER}"""
# In two steps, as UPGRADE_ROWS and UPGRADE_SUMMED (`summary_upgrade_zookeeper`).
ZOOKEEPER_ROWS = f"""
SELECT
    r.capture AS capture, {_ZOOKEEPER_KEYS},
    {_ZOOKEEPER_COUNTS}{_ZOOKEEPER_FROM} r.capture, {_ZOOKEEPER_GROUP}
"""
ZOOKEEPER_SUMMED = f"""
SELECT
    sender_ip, client_id, receiver_ip, receiver_port, api_key, api_name, api_version,
    sum(requests) AS requests, min(first_seen) AS first_seen, max(last_seen) AS last_seen,
    min(removed_in) AS removed_in
FROM summary_upgrade_zookeeper
GROUP BY sender_ip, client_id, receiver_ip, receiver_port, api_key, api_name, api_version{_ZOOKEEPER_ORDER}"""

# The JSON keys of one `upgrade` row, in order.
UPGRADE_COLUMNS = (
    "client_id",
    "client_ip",
    "client_software",
    "api_key",
    "api_name",
    "api_version",
    "requests",
    "first_seen",
    "last_seen",
    "removed_in",
)
