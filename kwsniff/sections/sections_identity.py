"""Report sections on the identity of the cluster and broker a client reached (docs/report.md).

`misrouted` (KIP-1242): an ApiVersions v5 request names the ClusterId and NodeId the client means to
reach; a connection is listed when either differs from what the broker reported: the cluster id of
a Metadata or DescribeCluster response (on the same connection, else from the same broker address
in the same capture) and the node id kwsniff learned for the broker (`broker_id`, docs/tables.md
"Which broker answered"). Where the broker's side is unknown the connection is not listed: a
mismatch is never guessed.
"""

from __future__ import annotations

API_VERSIONS, METADATA, DESCRIBE_CLUSTER = 18, 3, 60

MISROUTED = f"""
WITH intended AS (
    SELECT capture, conn_id, client_id, client_ip, broker_ip, broker_port, broker_id,
           intended_cluster_id, intended_node_id, ts_request
    FROM requests
    WHERE api_key = {API_VERSIONS} AND (intended_cluster_id IS NOT NULL OR intended_node_id IS NOT NULL)
),
reports AS (
    SELECT capture, conn_id, broker_ip, broker_port, cluster_id
    FROM requests WHERE api_key IN ({METADATA}, {DESCRIBE_CLUSTER}) AND cluster_id IS NOT NULL
),
by_connection AS (
    SELECT capture, conn_id, MAX(cluster_id) AS cluster_id FROM reports GROUP BY capture, conn_id
),
by_broker AS (
    SELECT capture, broker_ip, broker_port, MAX(cluster_id) AS cluster_id
    FROM reports GROUP BY capture, broker_ip, broker_port
),
checked AS (
    SELECT i.*, COALESCE(c.cluster_id, b.cluster_id) AS reported_cluster_id,
           COALESCE(i.intended_cluster_id <> COALESCE(c.cluster_id, b.cluster_id), FALSE) AS cluster_wrong,
           COALESCE(i.intended_node_id <> i.broker_id, FALSE) AS node_wrong
    FROM intended i
    LEFT JOIN by_connection c ON c.capture = i.capture AND c.conn_id = i.conn_id
    LEFT JOIN by_broker b
        ON b.capture = i.capture AND b.broker_ip = i.broker_ip AND b.broker_port = i.broker_port
)
SELECT k.capture, k.conn_id, k.client_id, k.client_ip, n.client_port,
       n.client_software_name AS software_name, n.client_software_version AS software_version,
       k.broker_ip, k.broker_port,
       CASE WHEN k.cluster_wrong AND k.node_wrong THEN 'cluster and node'
            WHEN k.cluster_wrong THEN 'cluster' ELSE 'node' END AS mismatch,
       k.intended_cluster_id, k.reported_cluster_id,
       k.intended_node_id, k.broker_id AS reported_node_id,
       k.ts_request AS ts
FROM checked k
LEFT JOIN connections n ON n.capture = k.capture AND n.conn_id = k.conn_id
WHERE k.cluster_wrong OR k.node_wrong
ORDER BY capture, ts, conn_id
"""
