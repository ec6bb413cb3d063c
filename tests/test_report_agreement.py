"""The report says one thing once (issue 48, goal 8): `brokers` counts as errors what the `errors`
section calls failures, docs/report.md says of the quick start's groups what the report says, and a
`--group` (`--topic`, `--client`) the tables do not hold is one line naming the ones they do hold,
not an empty answer. Over the bundled quick start capture, decoded once."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "sample_pcaps/quickstart.pcap"


def kwsniff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kwsniff", *args], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("quickstart") / "kafka-tables"
    done = kwsniff("read", str(QUICKSTART), "--out", str(out), "--overwrite")
    assert done.returncode == 0, done.stderr
    return out


def report(tables: Path, *args: str) -> dict[str, list[dict[str, Any]]]:
    done = kwsniff("report", str(tables), "--format", "json", *args)
    assert done.returncode == 0, done.stderr
    answer: dict[str, list[dict[str, Any]]] = json.loads(done.stdout)
    return answer


def test_brokers_count_as_errors_only_what_the_errors_section_calls_failures(tables: Path) -> None:
    answer = report(tables, "--section", "brokers", "--section", "errors")
    by_kind = {"expected": 0, "failure": 0}
    for row in answer["errors"]:
        by_kind[row["kind"]] += row["errors"]
    # The quick start's two consumers each met MEMBER_ID_REQUIRED on their first JoinGroup (KIP-394).
    assert by_kind == {"expected": 2, "failure": 0}
    joins = [r for r in answer["brokers"] if r["api_name"] == "JoinGroup"]
    assert [(r["requests"], r["errors"], r["expected_errors"]) for r in joins] == [(4, 0, 2)]
    assert sum(r["errors"] for r in answer["brokers"]) == by_kind["failure"]
    assert sum(r["expected_errors"] for r in answer["brokers"]) == by_kind["expected"]
    # Together they are every error code of every response, as the requests table counts them.
    counted = pq.read_table(tables / "requests", columns=["error_count"]).column("error_count").to_pylist()
    assert sum(r["errors"] + r["expected_errors"] for r in answer["brokers"]) == sum(c or 0 for c in counted)


def test_the_quick_start_audit_group_is_in_docs_as_the_report_states_it(tables: Path) -> None:
    """docs/report.md names `quickstart-audit` as the example of `never_committed`: true under the
    `--until` it gives, before the group left; at the capture's end it has left."""
    doc = (ROOT / "docs/report.md").read_text()
    (line,) = [x for x in doc.splitlines() if x.startswith("| `never_committed` |")]
    until = re.search(
        r"`quickstart-audit` under `--until ([0-9T:-]+)`; at the capture's end it has left, so `left`", line
    )
    assert until is not None, line

    def states(*args: str) -> set[tuple[int, str]]:
        rows = report(tables, "--section", "stopped", "--group", "quickstart-audit", *args)["stopped"]
        return {(r["partition"], r["state"]) for r in rows}

    assert states() == {(0, "left"), (1, "left")}
    assert states("--until", until[1]) == {(0, "never_committed"), (1, "never_committed")}


@pytest.mark.parametrize(
    ("option", "value", "held"),
    [
        ("--group", "billing", "group; they hold 2: quickstart-audit, quickstart-group"),
        ("--topic", "payments", "topic; they hold 2: events, orders"),
        (
            "--client",
            "billing-app",
            "client; they hold 6: kwsniff-admin, qs-consumer-confluent, qs-consumer-kafka-python,"
            " qs-producer-gzip, qs-producer-none, qs-producer-zstd",
        ),
    ],
)
def test_a_name_the_tables_do_not_hold_is_one_line_naming_those_they_do(
    tables: Path, option: str, value: str, held: str
) -> None:
    done = kwsniff("report", str(tables), option, value, "--format", "json")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"kwsniff: error: {option} {value}: the tables hold no such {held}\n"


@pytest.mark.parametrize(
    ("option", "value", "held"),
    [
        # A letter missing: the group it was meant to be first, then the other one held.
        (
            "--group",
            "quickstart-grup",
            "group; they hold 2, the nearest first: quickstart-group, quickstart-audit",
        ),
        # Another case is no match (names are exact) but the nearest.
        ("--topic", "Orders", "topic; they hold 2, the nearest first: orders, events"),
        # A prefix: the three producers it begins, then the rest in order.
        (
            "--client",
            "qs-producer",
            "client; they hold 6, the nearest first: qs-producer-gzip, qs-producer-none, qs-producer-zstd,"
            " kwsniff-admin, qs-consumer-confluent, qs-consumer-kafka-python",
        ),
    ],
)
def test_a_name_the_tables_do_not_hold_lists_the_nearest_they_do_first_in_both_doors(
    tables: Path, option: str, value: str, held: str
) -> None:
    import kwsniff as api

    done = kwsniff("report", str(tables), option, value)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"kwsniff: error: {option} {value}: the tables hold no such {held}\n"
    keyword = option.removeprefix("--")
    with pytest.raises(api.ReportError) as raised:
        api.report(tables, **{keyword: value})
    assert str(raised.value) == f"report: {keyword}={value!r}: the tables hold no such {held}"


def test_a_hint_lists_at_most_eight_names_the_nearest_kept() -> None:
    from kwsniff.sections.run import held_names

    names = [f"group-{i:02d}" for i in range(20)] + ["billing-v2"]
    assert held_names("billing", sorted(names)) == (
        "they hold 21, the nearest first: billing-v2, group-00, group-01, group-02, group-03, group-04,"
        " group-05, group-06 and 13 more"
    )
    assert held_names("x", []) == "they hold none"


def test_a_group_silent_in_the_window_is_an_empty_answer_not_an_error(tables: Path) -> None:
    # quickstart-group's last exchange is at 17:39:35; the window after it holds none of its rows.
    answer = report(
        tables, "--section", "rebalances", "--group", "quickstart-group", "--since", "2026-11-22T17:39:36"
    )
    assert answer == {"rebalances": []}
