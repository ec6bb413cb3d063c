"""Every section of `kwsniff report`: its name (the JSON key, `--section`), title and one SQL query.

A new section is one line in SECTIONS, e.g. ``Section("upgrade", "...", UPGRADE_SQL, ("removed_in",))``
(its worst-first keys last), its SQL written in
DuckDB's dialect over the views of kwsniff.sections.views (the tables by name); `--section`, JSON, CSV,
text, HTML and the both-engines test pick it up from there. docs/report.md says
what each answers.

Most sections never look past one capture. Their work per capture is a query of its own, a part
(PARTS, `summary_<name>`), kept with the tables by `read` and `spark` (kwsniff.sections.summaries);
the section is a small query over it. A section whose every row is of one capture is its own part
(:func:`per_capture`); others add their parts up over the captures (`inventory`, `upgrade`...).
"""

from __future__ import annotations

from dataclasses import dataclass

from kwsniff.sections import sections_brokers as b
from kwsniff.sections import sections_groups as g
from kwsniff.sections import sections_identity as identity
from kwsniff.sections import sections_kraft as kraft
from kwsniff.sections import sections_lag as lag
from kwsniff.sections import sections_traffic as t
from kwsniff.sections.findings import FINDINGS
from kwsniff.sections.sql import split_order
from kwsniff.sections.upgrade import UPGRADE_ROWS, UPGRADE_SUMMED, ZOOKEEPER_ROWS, ZOOKEEPER_SUMMED


@dataclass(frozen=True)
class Section:
    """``worst``: the keys ("column" or "column DESC", nulls last) that put the section's worst row
    first, what the HTML page shows first (kwsniff.sections.output.worst_first; docs/report.md
    "The HTML page"). The SQL's own ORDER BY stays the text, JSON and CSV order."""

    name: str
    title: str
    sql: str
    worst: tuple[str, ...] = ()


# {part: its query per capture}, every one with a `capture` column, in the order they are written.
PARTS: dict[str, str] = {
    "summary_inventory": t.INVENTORY_ROWS,
    "summary_stopped": lag.STOPPED_ROWS,
    "summary_produce_to_consume": t.PRODUCE_TO_CONSUME_ROWS,
    "summary_upgrade": UPGRADE_ROWS,
    "summary_upgrade_zookeeper": ZOOKEEPER_ROWS,
}


def per_capture(name: str, title: str, sql: str, worst: tuple[str, ...] = ()) -> Section:
    """A section each of whose rows is of one capture: its answer without the ORDER BY is its part,
    and the section is that part's rows in the section's order."""
    body, order = split_order(sql)
    PARTS[f"summary_{name}"] = body
    return Section(name, title, f"SELECT * FROM summary_{name} ORDER BY {order}", worst)


LAG = ("lag_seconds DESC", "offset_lag DESC")  # seconds first: a quiet topic's offsets mislead
P99 = ("p99_ms DESC", "max_ms DESC")

SECTIONS = [
    # First: what is wrong, ranked (kwsniff.sections.findings), from the other sections' answers.
    Section("findings", "Findings: what is wrong, the worst first", FINDINGS, ("rank",)),
    Section(
        "inventory",
        "Clients: who produces, consumes or administers which topic",
        t.INVENTORY,
        ("bytes DESC", "records DESC", "requests DESC"),
    ),
    per_capture("lag", "Lag per group, topic and partition over time (seconds and offsets)", lag.LAG, LAG),
    Section(
        "stopped",
        "Groups at the end of the capture: stopped or active, and how far behind",
        lag.STOPPED,
        ("state DESC", *LAG),  # stopped, never_committed, left, then active
    ),
    per_capture(
        "member_lag",
        "Lag per member, from its last Fetch position (not its group's commit)",
        lag.MEMBER_LAG,
        LAG,
    ),
    per_capture("rebalances", "Rebalances", g.REBALANCES, ("duration_ms DESC",)),
    per_capture(
        "rebalance_members", "Rebalances per member (classic)", g.REBALANCE_MEMBERS, ("join_wait_ms DESC",)
    ),
    per_capture(
        "reconciliation",
        "Reconciliation (KIP-848 consumer, streams, share)",
        g.RECONCILIATION,
        ("reconciliation_ms DESC", "unassigned_ms DESC"),
    ),
    per_capture("storms", "Rebalance storms", g.STORMS, ("rebalances DESC",)),
    per_capture(
        "share_groups",
        "Share groups (KIP-932): redelivery, release and reject rates, locks",
        g.SHARE_GROUPS,
        ("lock_timeouts DESC", "redelivery_rate DESC", "reject_rate DESC"),
    ),
    per_capture(
        "share_deliveries",
        "Share deliveries per member and partition: acquire to acknowledge, lock timeouts",
        g.SHARE_DELIVERIES,
        ("lock_timeouts DESC", "redelivered DESC", "rejected DESC"),
    ),
    Section("latency", "Latency percentiles (ms), long polls apart", t.LATENCY, P99),
    Section(
        "long_polls",
        "Long polls against their wait (Fetch, ShareFetch, JoinGroup)",
        t.LONG_POLLS,
        ("over_wait DESC", "max_ms DESC"),
    ),
    Section("produce_latency", "Produce latency per topic (ms)", t.PRODUCE_LATENCY, P99),
    Section("produce_to_consume", "Produce to consume per topic (ms)", t.PRODUCE_TO_CONSUME, P99),
    Section(
        "errors",
        "Errors: expected handshake codes apart from failures",
        t.ERRORS,
        ("kind DESC", "errors DESC"),  # failures before expected codes
    ),
    Section("throttled", "Throttled clients", t.THROTTLED, ("throttle_ms_total DESC",)),
    Section(
        "throughput",
        "Records and bytes produced per topic per minute",
        t.THROUGHPUT,
        ("records DESC", "bytes DESC"),
    ),
    Section("churn", "Connection churn per minute", t.CHURN, ("short_lived DESC", "opened DESC")),
    Section(
        "brokers",
        "Brokers: requests, latency, errors and bytes per broker and API",
        b.BROKERS,
        ("errors DESC", *P99),
    ),
    per_capture(
        "replication",
        "Replication: each follower's position and lag per partition",
        b.REPLICATION,
        ("lag_seconds DESC", "lag_records DESC"),
    ),
    Section(
        "upgrade",
        "Before upgrading to Kafka 4: clients using what a release refuses",
        UPGRADE_SUMMED,
        ("removed_in", "requests DESC"),  # the soonest release that refuses first
    ),
    Section(
        "upgrade_zookeeper",
        "Brokers sending ZooKeeper-era inter-broker requests (removed in Kafka 4.0, KIP-833)",
        ZOOKEEPER_SUMMED,
        ("requests DESC",),
    ),
    Section(
        "isr_changes",
        "ISR changes: AlterPartition requests and the controller's answers",
        kraft.ISR_CHANGES,
        ("error_name DESC", "latency_ms DESC"),  # rows with an error first (nulls last)
    ),
    Section(
        "controller",
        "KRaft quorum: votes, leaders and epochs, metadata-log fetch lag, broker registrations and heartbeats",
        kraft.CONTROLLER,
        ("unanswered DESC", "max_lag DESC"),
    ),
    per_capture(
        "misrouted",
        "Clients that reached another cluster or node than they intended (ApiVersions v5, KIP-1242)",
        identity.MISROUTED,
        ("ts",),  # every row is wrong: the earliest first
    ),
]
BY_NAME = {s.name: s for s in SECTIONS}
