"""Mutation check of the report: does a wrong query in any section make an independent test fail?

    python tools/mutate_report.py                          # every mutation below
    python tools/mutate_report.py throughput errors        # the mutations of these sections
    python tools/mutate_report.py --report tools/report-mutation-report.md
    python tools/mutate_report.py --ci                     # what .ci/run runs (tools/mutation_sample.py)

Each mutation replaces one piece of one section's SQL (kwsniff/sections/sections_*.py, upgrade.py) by a
plausible mistake: SUM(record_count) -> COUNT(*), a MIN for a MAX, a code on the wrong API. It is made
in a copy of the kwsniff package (the source tree is never touched), which the tests then import:
pytest runs with that copy's folder as its working directory (first on sys.path), and the CLI
processes the tests start get it through PYTHONPATH. The mutation must change the SQL (a mutation
whose text is not found exactly once fails the run).

Only tests that compare the report with something else may catch a mutation: the pandas oracles of
tests/test_report_oracles.py, the real clients' record (tests/test_report_live.py), and the values built
into the inputs of tests/test_report_sections.py (named in INDEPENDENT). DuckDB against Spark, and
summaries against rows, run the same SQL and are left out: they would pass with any mutation. A run
without mutation goes first: a test failing there would catch everything.

`--ci` makes a sample of CI_SAMPLE drawn with the commit's hash (tools/mutation_sample.py), three
times as many, the changed section files' own first, when the report's SQL (kwsniff/sections/) or this
list changed since HEAD~1, without
the run without mutation (.ci/run has just run every test). The run exits 1 when a mutation is not
caught.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from mutation_sample import ci_choice

REPO = Path(__file__).resolve().parent.parent
ORACLES = "tests/test_report_oracles.py"
SECTIONS_TESTS = "tests/test_report_sections.py"
# The tests of test_report_sections.py that check values built into its inputs, not one engine
# against the other.
INDEPENDENT = [
    f"{SECTIONS_TESTS}::test_kip848_reconciliation_and_time_without_assignment",
    f"{SECTIONS_TESTS}::test_a_group_rebalancing_more_than_three_times_a_minute_is_a_storm",
    f"{SECTIONS_TESTS}::test_share_group_redelivery_release_reject_rates_and_lock_timeouts",
    f"{SECTIONS_TESTS}::test_inventory_names_each_quickstart_client_with_its_role_topic_and_group",
    f"{SECTIONS_TESTS}::test_member_id_required_on_a_first_join_is_expected_not_a_failure",
    f"{SECTIONS_TESTS}::test_long_polls_judge_each_fetch_against_the_max_wait_ms_it_sent",
]
LIVE = "tests/test_report_live.py"
# brokers, replication: kio-encoded broker-host traffic timed by dpkt (DuckDB; Spark runs the same SQL).
BROKER_HOST = (
    "tests/test_replication.py::test_brokers_are_the_requests_latencies_errors_bytes_and_replication_share_sent[duckdb]",
    "tests/test_replication.py::test_replication_is_each_followers_last_fetch_against_the_leaders_log[duckdb]",
)
# The KRaft exchanges kio encoded (tests/test_kraft.py), on DuckDB and through the CLI.
KRAFT = (
    "tests/test_kraft.py::test_report_sections_are_what_was_encoded[duckdb]",
    "tests/test_kraft.py::test_report_command_prints_both_sections",
)
# Topic ids named from the whole dataset: the quick start split as two workers (DuckDB).
NAMES_LATE = (
    "tests/test_topic_names_late.py::test_rows_written_before_the_name_take_it_from_any_metadata_of_the_dataset[duckdb]",
    "tests/test_topic_names_late.py::test_records_of_a_topic_no_row_names_are_unknown_not_zero",
    "tests/test_topic_names_late.py::test_batches_consumed_in_a_capture_with_unnamed_fetches_are_unknown_not_a_short_count[duckdb]",
)
# stopped's status: stories of one group each, the report against the live tracker (DuckDB).
STATUS_RULE = (
    "tests/test_group_status_rule.py::test_the_report_and_the_live_metric_give_each_group_the_same_status[duckdb]",
)
# brokers' errors against the errors section's failures, on the quick start.
AGREEMENT = (
    "tests/test_report_agreement.py::test_brokers_count_as_errors_only_what_the_errors_section_calls_failures",
)
# misrouted: ApiVersions v5 intents the test encoded against what its server reported (DuckDB).
MISROUTED = (
    "tests/test_misrouted.py::test_misrouted_lists_each_connection_whose_intent_differs_from_what_its_broker_reported[duckdb]",
)


# CI's sample: 4 mutations, about two minutes on a busy 2-core machine (10-55 s each: one pytest
# run of the tests that catch it; docs/test-oracles.md has the figures).
CI_SAMPLE = 4
# A change here or in this list triples CI's sample.
WATCHED = ("kwsniff/sections", "tools/mutate_report.py")


@dataclass(frozen=True)
class Mutation:
    section: str
    file: str  # under kwsniff/sections/
    old: str
    new: str
    tests: tuple[str, ...] = (ORACLES, *INDEPENDENT)

    @property
    def label(self) -> str:
        return f"`{_squash(self.old)}` -> `{_squash(self.new)}`"


def _squash(sql: str) -> str:
    return re.sub(r"\s+", " ", sql).strip()


T, G, U, L = "sections_traffic.py", "sections_groups.py", "upgrade.py", "sections_lag.py"
B = "sections_brokers.py"
K = "sections_kraft.py"
ID = "sections_identity.py"
V = "views.py"
MUTATIONS = [
    Mutation("throughput", T, "SUM(record_count) AS records,\n       SUM(record_bytes)", "COUNT(*) AS records,\n       SUM(record_bytes)"),
    Mutation("churn", T, "< 1000 THEN 1", "< 10 THEN 1"),
    Mutation("latency", T, "FROM requests WHERE api_key NOT IN ({LONG_POLL_APIS})", "FROM requests WHERE api_key NOT IN (1, 78)"),
    Mutation("throttled", T, "MAX(throttle_time_ms) AS throttle_ms_max", "MIN(throttle_time_ms) AS throttle_ms_max"),
    Mutation("produce_latency", T, "GROUP BY capture, conn_id, correlation_id, topic", "GROUP BY capture, conn_id, correlation_id, topic, partition"),
    Mutation("produce_to_consume", T, "MIN(pr.ts_request) AS ts_produce", "MIN(pr.ts_ack) AS ts_produce"),
    Mutation("produce_to_consume", T, "MIN(f.ts_response) AS ts_consume", "MAX(f.ts_response) AS ts_consume"),
    Mutation("produce_to_consume", T, "CASE WHEN MAX(unnamed) > 0 THEN NULL ELSE COUNT(e2e_ms) END AS batches", "COUNT(e2e_ms) AS batches", NAMES_LATE[2:]),
    Mutation("errors", T, "(e.error_code = 79 AND e.api_key = 11)", "(e.error_code = 79 AND e.api_key = 12)"),
    Mutation("errors", T, "COUNT(DISTINCT e.partition) AS partitions", "COUNT(e.partition) AS partitions"),
    Mutation("long_polls", T, "SUM(CASE WHEN record_count = 0 THEN 1 ELSE 0 END) AS empty", "SUM(CASE WHEN record_count >= 0 THEN 1 ELSE 0 END) AS empty"),
    Mutation("long_polls", T, "latency_ms > wait_ms * 1.1 + 100", "latency_ms > wait_ms * 1.1 - 100"),
    Mutation("inventory", T, "COALESCE(SUM(r.record_count), 0) END AS records", "COALESCE(SUM(r.requests), 0) END AS records"),
    Mutation("inventory", T, "FROM per_request GROUP BY", "FROM rows GROUP BY"),
    Mutation("inventory", T, "AND (p.topic IS NOT NULL OR p.topic_id IS NOT NULL)", "AND p.topic IS NOT NULL", NAMES_LATE),
    Mutation("inventory", V, "HAVING COUNT(DISTINCT topic) = 1", "HAVING COUNT(DISTINCT topic) = 2", NAMES_LATE),
    Mutation("rebalances", G, "MIN(ts_request) AS ts_start", "MAX(ts_request) AS ts_start"),
    Mutation("rebalances", G, "FROM groups WHERE api_key = 11 AND error_code IN (0, 79)", "FROM groups WHERE api_key = 11"),
    Mutation("rebalance_members", G, "MIN(ts_request) AS ts_join", "MAX(ts_request) AS ts_join"),
    Mutation("reconciliation", G, "AND o.owned_partitions = a.assignment AND o.ts_request", "AND o.ts_request"),
    Mutation("storms", G, "HAVING COUNT(*) > {STORM_REBALANCES}", "HAVING COUNT(*) > {STORM_REBALANCES} + 2"),
    Mutation("share_groups", G, "SUM(redelivered_records) AS redelivered", "SUM(acquired_records) AS redelivered"),
    Mutation("share_deliveries", G, "COUNT(acquired_first_offset) AS acquisitions", "COUNT(*) AS acquisitions"),
    Mutation("upgrade", U, "    sum(requests) AS requests,\n", "    count(*) AS requests,\n"),
    Mutation("upgrade_zookeeper", U, "sum(requests) AS requests, min(first_seen)", "count(*) AS requests, min(first_seen)"),
    # lag, stopped, member_lag: the real clients' record (slow: real clients against tansu).
    Mutation("lag", L, "MAX({_lag_seconds(\"e.ts\")}) AS lag_seconds", "MIN({_lag_seconds(\"e.ts\")}) AS lag_seconds", (LIVE,)),
    Mutation("stopped", L, "WHEN {silent} * 1000 > session_timeout_ms THEN 'stopped'", "WHEN {silent} * 1000 < session_timeout_ms THEN 'stopped'", (LIVE,)),
    Mutation("stopped", L, "WHEN lag > previous_lag THEN 1", "WHEN lag >= previous_lag THEN 1", STATUS_RULE),
    Mutation("stopped", L, "COUNT(DISTINCT committed_offset) AS recent_offsets", "COUNT(committed_offset) AS recent_offsets", STATUS_RULE),
    Mutation("member_lag", L, "f.fetch_offset AS position", "f.fetch_offset + 1 AS position", (LIVE,)),
    Mutation("brokers", B, "COALESCE(SUM(error_count), 0) - COALESCE(SUM(expected_count), 0) AS errors", "COALESCE(SUM(error_count), 0) AS errors", AGREEMENT),
    Mutation("brokers", B, "COALESCE(SUM(request_bytes), 0) AS bytes_in", "COALESCE(SUM(response_bytes), 0) AS bytes_in", BROKER_HOST),
    Mutation("brokers", B, "COUNT(DISTINCT capture || '/' || CAST(conn_id AS VARCHAR)) AS connections", "COUNT(DISTINCT capture) AS connections", BROKER_HOST),
    Mutation("brokers", B, "WHEN fetcher IN {REPLICATION_FETCHERS} THEN 1", "WHEN fetcher = 'follower' THEN 1", BROKER_HOST),
    Mutation("brokers", B, "/ NULLIF(COUNT(fetcher), 0) AS replication_share", "/ COUNT(*) AS replication_share", BROKER_HOST),
    Mutation("brokers", B, "{pct(0.5, \"latency_ms\")} AS p50_ms, {pct(0.99, \"latency_ms\")} AS p99_ms, MAX(latency_ms) AS max_ms,\n       COALESCE", "{pct(0.5, \"latency_ms\")} AS p50_ms, {pct(0.5, \"latency_ms\")} AS p99_ms, MAX(latency_ms) AS max_ms,\n       COALESCE", BROKER_HOST),
    Mutation("replication", B, "MAX(CASE WHEN w.above_at > w.first_at THEN w.above_at END)", "MAX(w.above_at)", BROKER_HOST),
    Mutation("replication", B, "LEAST(MIN(pr.ts_request),", "LEAST(MIN(pr.ts_ack),", BROKER_HOST),
    Mutation("replication", B, "WHEN fetch_offset >= high_watermark THEN 0.0", "WHEN fetch_offset > high_watermark THEN 0.0", BROKER_HOST),
    Mutation("replication", B, "MAX(lag_seconds) AS max_lag_seconds", "MIN(lag_seconds) AS max_lag_seconds", BROKER_HOST),
    Mutation("replication", B, "p.api_key = 1 AND p.fetcher = 'follower'", "p.api_key = 1 AND p.fetcher <> 'consumer'", BROKER_HOST),
    Mutation("replication", B, "ORDER BY at_offset DESC, kind\n", "ORDER BY at_offset, kind\n", BROKER_HOST),
    Mutation("isr_changes", K, "LAG(p.isr) OVER", "LAG(p.new_isr) OVER", KRAFT),
    Mutation("isr_changes", K, "< {_members(\"previous_isr\")} THEN 'shrink'", "<= {_members(\"previous_isr\")} THEN 'shrink'", KRAFT),
    Mutation("isr_changes", K, "COALESCE(p.error_name, r.error_name) AS error_name", "p.error_name AS error_name", KRAFT),
    Mutation("isr_changes", K, "GROUP BY capture, topic, topic_id, partition, \"offset\"", "GROUP BY capture, conn_id, topic, topic_id, partition, \"offset\"", KRAFT),
    Mutation("isr_changes", K, "AND fetcher = 'metadata' AND isr IS NOT NULL", "AND fetcher = 'metadata'", KRAFT),
    Mutation("controller", K, "COALESCE(r.node_id, r.replica_id) AS node_id", "r.node_id AS node_id", KRAFT),
    Mutation("controller", K, "r.first_error_name AS error_name", "r.error_name AS error_name", KRAFT),
    Mutation("controller", K, "MAX(CASE WHEN vote_granted THEN 1 ELSE 0 END)", "MAX(CASE WHEN vote_granted IS NOT NULL THEN 1 ELSE 0 END)", KRAFT),
    Mutation("controller", K, "MAX(lag) AS max_lag", "MIN(lag) AS max_lag", KRAFT),
    Mutation("controller", K, "ARG_MAX(lag,", "ARG_MIN(lag,", KRAFT),
    Mutation("controller", K, "WHEN status = 'ok' THEN 0 ELSE 1 END", "WHEN latency_ms IS NULL THEN 0 ELSE 1 END", KRAFT),
    Mutation("misrouted", ID, "COALESCE(i.intended_node_id <> i.broker_id, FALSE)", "COALESCE(i.intended_node_id = i.broker_id, FALSE)", MISROUTED),
    Mutation("misrouted", ID, "(intended_cluster_id IS NOT NULL OR intended_node_id IS NOT NULL)", "intended_cluster_id IS NOT NULL", MISROUTED),
    Mutation("misrouted", ID, "COALESCE(c.cluster_id, b.cluster_id), FALSE) AS cluster_wrong", "COALESCE(c.cluster_id, b.cluster_id), TRUE) AS cluster_wrong", MISROUTED),
    # The cluster a leader connection without Metadata reached: the same address's, on another connection.
    Mutation("misrouted", ID, "COALESCE(c.cluster_id, b.cluster_id) AS reported_cluster_id,\n           COALESCE(i.intended_cluster_id <> COALESCE(c.cluster_id, b.cluster_id), FALSE)", "c.cluster_id AS reported_cluster_id,\n           COALESCE(i.intended_cluster_id <> c.cluster_id, FALSE)", MISROUTED),
    Mutation("misrouted", ID, "ON b.capture = i.capture AND b.broker_ip = i.broker_ip AND", "ON b.capture = i.capture AND", MISROUTED),
]  # fmt: skip


def staged(mutation: Mutation | None, into: Path) -> Path:
    """A copy of the kwsniff package under ``into`` with ``mutation`` made (compiled modules too)."""
    if into.exists():
        shutil.rmtree(into)
    shutil.copytree(REPO / "kwsniff", into / "kwsniff", ignore=shutil.ignore_patterns("__pycache__"))
    if mutation is not None:
        path = into / "kwsniff/sections" / mutation.file
        text = path.read_text()
        if text.count(mutation.old) != 1:
            found = text.count(mutation.old)
            raise SystemExit(
                f"mutate_report: {mutation.section}: {mutation.old!r} is {found} times in {mutation.file}"
            )
        path.write_text(text.replace(mutation.old, mutation.new))
    return into


def run_tests(root: Path, tests: tuple[str, ...], budget_s: float) -> tuple[str | None, float]:
    """The first failing test (node id) of ``tests`` run against the package under ``root``, or None."""
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    command = [
        sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider",
        "--rootdir", str(REPO), "-c", str(REPO / "pyproject.toml"),
        *(str(REPO / t) for t in tests),
    ]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=budget_s)
    took = time.monotonic() - started
    failed = re.search(r"^FAILED (\S+)", done.stdout, re.MULTILINE)
    if failed:
        # The node id as pytest printed it, relative to the copy (a repository under /tmp shows as
        # ../../repo/tests/...): from its tests/ folder on.
        path, sep, name = failed.group(1).partition("::")
        return path[path.rfind("tests/") :] + sep + name, took
    if done.returncode not in (0, 5):
        return f"(pytest exit {done.returncode}: {done.stdout[-300:]}{done.stderr[-300:]})", took
    return None, took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sections", nargs="*", help="only the mutations of these sections")
    parser.add_argument("--report", type=Path, help="write the table of results as Markdown here")
    parser.add_argument("--budget", type=float, default=900.0, help="seconds per pytest run")
    parser.add_argument(
        "--ci", action="store_true", help="a sample, three times as large if the report's SQL changed"
    )
    parser.add_argument("--sample", type=int, default=CI_SAMPLE, help="the sample's size (with --ci)")
    args = parser.parse_args()
    chosen = [m for m in MUTATIONS if not args.sections or m.section in args.sections]
    if args.ci:
        chosen = ci_choice(
            chosen,
            args.sample,
            WATCHED,
            "mutate_report",
            touches=lambda m, files: f"kwsniff/sections/{m.file}" in files,
        )
    with tempfile.TemporaryDirectory(prefix="mutate-report-") as tmp:
        root = Path(tmp) / "pkg"
        tests = tuple(dict.fromkeys(t for m in chosen for t in m.tests))
        caught, took = (None, 0.0) if args.ci else run_tests(staged(None, root), tests, args.budget)
        if not args.ci:
            print(f"no mutation: {caught or 'all pass'} ({took:.0f} s)", flush=True)
        if caught:
            print("mutate_report: a test fails without any mutation; fix it first", file=sys.stderr)
            return 1
        lines = ["| section | mutation | caught by |", "|---|---|---|"]
        missed = 0
        for m in chosen:
            caught, took = run_tests(staged(m, root), m.tests, args.budget)
            missed += caught is None
            print(f"{m.section}: {m.label}: {caught or 'NOT CAUGHT'} ({took:.0f} s)", flush=True)
            cell = m.label.replace("|", "\\|")  # a pipe in SQL would end the Markdown cell
            lines.append(f"| `{m.section}` | {cell} | {caught or '**not caught**'} |")
    if args.report:
        verdict = "every mutation caught" if not missed else f"{missed} not caught"
        title = f"# `python3 tools/mutate_report.py`: its last run ({verdict})\n\n"
        args.report.write_text(title + "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
