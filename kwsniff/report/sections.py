"""Every section of `kwsniff report`: its name (the JSON key, `--section`), title and one SQL query.

A new section is one line in SECTIONS, e.g. ``Section("upgrade", "...", UPGRADE_SQL)``, its SQL written in
DuckDB's dialect over the views of kwsniff.report.views (the tables by name); `--section`, JSON, CSV,
text, HTML and the both-engines test pick it up from there. docs/report.md says
what each answers.
"""

from __future__ import annotations

from dataclasses import dataclass

from kwsniff.report import sections_groups as g
from kwsniff.report import sections_lag as lag
from kwsniff.report import sections_traffic as t
from kwsniff.report.upgrade import UPGRADE_SQL, ZOOKEEPER_SQL


@dataclass(frozen=True)
class Section:
    name: str
    title: str
    sql: str


SECTIONS = [
    Section("inventory", "Clients: who produces, consumes or administers which topic", t.INVENTORY),
    Section("lag", "Lag per group, topic and partition over time (seconds and offsets)", lag.LAG),
    Section(
        "stopped", "Groups at the end of the capture: stopped or active, and how far behind", lag.STOPPED
    ),
    Section("member_lag", "Lag per member (its last Fetch)", lag.MEMBER_LAG),
    Section("rebalances", "Rebalances", g.REBALANCES),
    Section("rebalance_members", "Rebalances per member (classic)", g.REBALANCE_MEMBERS),
    Section("reconciliation", "Reconciliation (KIP-848 consumer, streams, share)", g.RECONCILIATION),
    Section("storms", "Rebalance storms", g.STORMS),
    Section(
        "share_groups", "Share groups (KIP-932): redelivery, release and reject rates, locks", g.SHARE_GROUPS
    ),
    Section(
        "share_deliveries",
        "Share deliveries per member and partition: acquire to acknowledge, lock timeouts",
        g.SHARE_DELIVERIES,
    ),
    Section("latency", "Latency percentiles (ms), long polls apart", t.LATENCY),
    Section("long_polls", "Long polls against their wait (Fetch, ShareFetch, JoinGroup)", t.LONG_POLLS),
    Section("produce_latency", "Produce latency per topic (ms)", t.PRODUCE_LATENCY),
    Section("produce_to_consume", "Produce to consume per topic (ms)", t.PRODUCE_TO_CONSUME),
    Section("errors", "Errors: expected handshake codes apart from failures", t.ERRORS),
    Section("throttled", "Throttled clients", t.THROTTLED),
    Section("throughput", "Records and bytes produced per topic per minute", t.THROUGHPUT),
    Section("churn", "Connection churn per minute", t.CHURN),
    Section("upgrade", "Before upgrading to Kafka 4: clients using what a release refuses", UPGRADE_SQL),
    Section(
        "upgrade_zookeeper",
        "Brokers sending ZooKeeper-era inter-broker requests (removed in Kafka 4.0, KIP-833)",
        ZOOKEEPER_SQL,
    ),
]
BY_NAME = {s.name: s for s in SECTIONS}
