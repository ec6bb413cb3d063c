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
