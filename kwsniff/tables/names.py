"""The names of the kwsniff tables, without pyarrow: the command line names tables (usage, help,
summaries) long before it builds one, and `kwsniff --help` must stay light."""

# In the order the schemas are defined (tests/test_layers.py checks they agree).
TABLES = (
    "requests",
    "connections",
    "errors",
    "partitions",
    "records",
    "groups",
    "captures",
    "capture_stats",
)
# Tables written only when asked for; every other table is always written, empty or not.
# (`capture_stats` only by live capture; `captures`, one row per input file, by `read` and `spark`.)
OPT_IN_TABLES = frozenset({"records", "capture_stats"})
DEFAULT_TABLES = tuple(t for t in TABLES if t not in OPT_IN_TABLES)
# Per-capture summaries beside the tables, written with them by `read` and `spark` for `report`
# (kwsniff.sections.summaries, docs/report.md "Summaries"): in a dataset, handled like the tables.
SUMMARIES = (
    "summary_captures",
    "summary_inventory",
    "summary_stopped",
    "summary_produce_to_consume",
    "summary_upgrade",
    "summary_upgrade_zookeeper",
    "summary_lag",
    "summary_member_lag",
    "summary_rebalances",
    "summary_rebalance_members",
    "summary_reconciliation",
    "summary_storms",
    "summary_share_groups",
    "summary_share_deliveries",
    "summary_replication",
    "summary_misrouted",
)
