"""KIP-848 consumer groups on the wire: librdkafka (confluent-kafka, `group.protocol=consumer`)
against the kio-encoded test coordinator (tests/group_coordinator.py) in front of tansu.

The decoded `groups` rows are held against two independent witnesses: what the coordinator says it
sent (its own log, encoded by kio), and what the clients report through their assignment callbacks.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from group_clients import CONSUMER_PROTOCOL, Member, coordinated_broker, describe, poll_until
from realparts import create_topics, tcpdump_capture

from kwsniff.cli import main
from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink
from kwsniff.view.group_members import HeartbeatMembers

TOPIC, PARTITIONS, GROUP = "orders", 4, "kip848-group"
ALL = f"{TOPIC}:0,1,2,3"
DEADLINE_S = 30.0


@dataclass
class Run:
    rows: list[dict[str, Any]]
    sent: list[dict[str, Any]]  # the coordinator's log
    members: dict[str, Member]
    member_ids: dict[str, str]
    tables: Path  # the capture read by `kwsniff read`


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tmp = tmp_path_factory.mktemp("kip848")
    pcap = tmp / "kip848.pcap"
    a, b = Member("consumer-a", TOPIC), Member("consumer-b", TOPIC)
    with coordinated_broker(tmp, TOPIC, PARTITIONS) as broker, tcpdump_capture(pcap, broker.port):
        create_topics(broker.bootstrap, {TOPIC: PARTITIONS})
        describe(broker.bootstrap, TOPIC)  # the coordinator learns the topic id from this Metadata answer
        a.subscribe(broker.bootstrap, GROUP, CONSUMER_PROTOCOL)
        poll_until([a], lambda: a.owned == {0, 1, 2, 3}, DEADLINE_S)
        b.subscribe(broker.bootstrap, GROUP, CONSUMER_PROTOCOL)
        poll_until([a, b], lambda: a.owned == {0, 1} and b.owned == {2, 3}, DEADLINE_S)
        member_ids = {"consumer-a": a.consumer.memberid(), "consumer-b": b.consumer.memberid()}
        b.consumer.close()  # leaves: epoch -1
        poll_until([a], lambda: a.owned == {0, 1, 2, 3}, DEADLINE_S)
        # One more heartbeat interval so A acknowledges its last assignment.
        poll_until(
            [a],
            lambda: any(
                json.loads(x)["owned"] == [0, 1, 2, 3] and json.loads(x)["epoch_sent"] == 3
                for x in broker.log.read_text().splitlines()
            ),
            DEADLINE_S,
        )
        a.consumer.close()
    sink = ListSink()
    run_capture(pcap, sink, SessionOptions())
    rows = [r for r in sink.tables["groups"] if r["api_key"] == 68]
    sent = [json.loads(line) for line in broker.log.read_text().splitlines()]
    tables = tmp / "tables"
    args = ["read", str(pcap), "--out", str(tables), "--broker-port", str(broker.port), "--quiet"]
    done = CliRunner().invoke(main, args)
    assert done.exit_code == 0, done.output
    yield Run(rows, sent, {"consumer-a": a, "consumer-b": b}, member_ids, tables)


def test_every_heartbeat_decodes_to_what_the_coordinator_sent(run: Run) -> None:
    """Member, epochs sent and returned, error and assignment of each ConsumerGroupHeartbeat, in
    order, against the kio-encoded coordinator's own log."""
    decoded = [
        (r["member_id"], r["member_epoch"], r["member_epoch_response"], r["error_code"], r["assignment"])
        for r in run.rows
    ]
    sent = [
        (
            s["member_id"],
            s["epoch_sent"],
            s["epoch"],
            s["error_code"],
            None if s["assigned"] is None else f"{TOPIC}:{','.join(map(str, s['assigned']))}",
        )
        for s in run.sent
    ]
    assert decoded == sent
    # The coordinator answered each between the request's last packet and the response's first.
    for row, answer in zip(run.rows, run.sent, strict=True):
        assert row["ts_request"] <= round(answer["ts"] * 1e6) <= row["ts_response"]
    assert {r["protocol"] for r in run.rows} == {"consumer"}
    assert {r["group_id"] for r in run.rows} == {GROUP}
    assert {r["heartbeat_interval_ms"] for r in run.rows} == {300}


def test_epochs_and_events_of_join_rebalance_and_leave(run: Run) -> None:
    """A joins alone (epoch 1, all partitions); B joins (group epoch 2: B gets 2,3 and A keeps 0,1);
    B leaves (-1); A gets everything back at epoch 3, then leaves."""
    a, b = run.member_ids["consumer-a"], run.member_ids["consumer-b"]
    changes = [
        (r["member_id"], r["event"], r["member_epoch"], r["member_epoch_response"], r["assignment"])
        for r in run.rows
        if r["event"] != "heartbeat"
    ]
    assert changes == [
        (a, "join", 0, 1, ALL),
        (b, "join", 0, 2, f"{TOPIC}:2,3"),
        (a, "assignment", 1, 2, f"{TOPIC}:0,1"),
        (b, "leave", -1, -1, None),
        (a, "assignment", 2, 3, ALL),
        (a, "leave", -1, -1, None),
    ]
    joins = [r for r in run.rows if r["event"] == "join"]
    # The first heartbeat carries the full subscription (later ones send null: unchanged).
    assert [(r["subscribed_topics"], r["owned_partitions"]) for r in joins] == [(TOPIC, ""), (TOPIC, "")]


def test_assignments_are_what_the_clients_callbacks_reported(run: Run) -> None:
    """Each member's owned partitions after each callback are exactly the assignments decoded for it,
    in order, and each callback ran between the assignment's response and the first heartbeat that
    owns it: the reconciliation the wire shows."""
    for name, member in run.members.items():
        member_id = run.member_ids[name]
        rows = [r for r in run.rows if r["member_id"] == member_id]
        assigned = [(i, r) for i, r in enumerate(rows) if r["assignment"] is not None]
        # librdkafka revokes before it assigns; the state after the last callback of a change counts.
        settled = [
            owned
            for n, (_, owned) in enumerate(member.changes)
            if n + 1 == len(member.changes) or member.changes[n + 1][0] - member.changes[n][0] > 1000
        ]
        assert settled[: len(assigned)] == [r["assignment"] for _, r in assigned]
        for index, row in assigned:
            owning = next(r for r in rows[index + 1 :] if r["owned_partitions"] == row["assignment"])
            callback = next(
                t for t, owned in member.changes if owned == row["assignment"] and t >= row["ts_response"]
            )
            assert row["ts_response"] <= callback <= owning["ts_request"]


def _iso(us: int) -> str:
    t = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=us)
    return t.isoformat().replace("+00:00", "Z")


def test_report_reconciliation_times_are_the_decoded_heartbeats(run: Run) -> None:
    """`kwsniff report --section reconciliation` on the same capture: per response carrying a new
    assignment (the join's included), the time to the first later heartbeat owning exactly it, and
    from the member's join to its first assignment; computed here from the decoded rows, whose
    bracketing of the client's own callback the test above checks."""
    expected = []
    for name in ("consumer-a", "consumer-b"):
        member_id = run.member_ids[name]
        rows = [r for r in run.rows if r["member_id"] == member_id]
        ts_join = next(r["ts_request"] for r in rows if r["event"] == "join")
        first = True
        for index, row in enumerate(rows):
            if row["assignment"] is None:
                continue
            owning = next(
                (
                    r
                    for r in rows[index + 1 :]
                    if r["owned_partitions"] == row["assignment"] and r["ts_request"] > row["ts_response"]
                ),
                None,
            )
            # The client's callback ran between the assignment and the owning heartbeat.
            callbacks = [t for t, owned in run.members[name].changes if owned == row["assignment"]]
            assert owning is None or any(row["ts_response"] <= t <= owning["ts_request"] for t in callbacks)
            expected.append(
                {
                    "member_id": member_id,
                    "protocol": "consumer",
                    "epoch": row["member_epoch_response"],
                    "assignment": row["assignment"],
                    "ts_assigned": _iso(row["ts_response"]),
                    "ts_owned": None if owning is None else _iso(owning["ts_request"]),
                    "reconciliation_ms": None
                    if owning is None
                    else (owning["ts_request"] - row["ts_response"]) / 1e3,
                    "unassigned_ms": (row["ts_response"] - ts_join) / 1e3 if first else None,
                }
            )
            first = False
    expected.sort(key=lambda r: (r["member_id"], r["ts_assigned"]))
    done = CliRunner().invoke(
        main, ["report", str(run.tables), "--format", "json", "--section", "reconciliation"]
    )
    assert done.exit_code == 0, done.output
    got = json.loads(done.output)["reconciliation"]
    assert [{k: v for k, v in r.items() if k not in ("capture", "group_id")} for r in got] == expected
    assert {r["group_id"] for r in got} == {GROUP}
    # A's three assignments (join, epoch 2, epoch 3) and B's one, each owned by a later heartbeat.
    assert [(r["epoch"], r["assignment"]) for r in got if r["member_id"] == run.member_ids["consumer-a"]] == [
        (1, ALL),
        (2, f"{TOPIC}:0,1"),
        (3, ALL),
    ]
    assert all(r["reconciliation_ms"] is not None for r in got)


def test_report_says_the_group_left_at_its_last_members_leave_heartbeat(run: Run) -> None:
    """Both members closed: their last heartbeats sent member epoch -1 (KIP-848 leave). `stopped`
    says `left`, at the time of the last leave the coordinator logged, for every partition fetched."""
    args = ["report", str(run.tables), "--format", "json", "--section", "stopped"]
    done = CliRunner().invoke(main, args)
    assert done.exit_code == 0, done.output
    rows = json.loads(done.stdout)["stopped"]
    assert rows and {(r["group_id"], r["state"]) for r in rows} == {(GROUP, "left")}
    leave = max(s["ts"] for s in run.sent if s["epoch_sent"] == -1)
    for row in rows:
        at = dt.datetime.fromisoformat(row["last_leave"].replace("Z", "+00:00")).timestamp()
        assert at <= leave < at + 0.5  # the request, then the coordinator's answer to it


def test_live_member_count_follows_the_members_joins_and_leaves(run: Run) -> None:
    """kwsniff_consumer_group_members of a KIP-848 group (kwsniff.view.group_members) from the same
    heartbeats: A joins, B joins, B leaves, A leaves, as the clients did."""
    members = HeartbeatMembers()
    counts = []
    for row in sorted(run.rows, key=lambda r: r["ts_request"]):
        members.row(row)
        counts += [(group, n) for group, n, _ts in members.take_changed(row["ts_request"])]
    assert counts == [(GROUP, 1), (GROUP, 2), (GROUP, 1), (GROUP, 0)]
