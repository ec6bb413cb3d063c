"""Classic consumer groups on the wire: two confluent-kafka consumers against tansu join, sync,
rebalance when the second joins and when it leaves. The decoded `groups` rows are held against what
the clients report through their assignment callbacks and their configuration."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from group_clients import Member, poll_until
from realparts import create_topics, free_port, start_broker, tcpdump_capture

from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink

TOPIC, PARTITIONS, GROUP = "payments", 4, "classic-group"
SESSION_TIMEOUT_MS, MAX_POLL_MS = 6000, 20000
DEADLINE_S = 40.0


def _join(bootstrap: str, member: Member) -> None:
    member.subscribe(
        bootstrap,
        GROUP,
        {
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "max.poll.interval.ms": MAX_POLL_MS,
            "heartbeat.interval.ms": 500,
            "partition.assignment.strategy": "range",
        },
    )


@dataclass
class Run:
    rows: list[dict[str, Any]]
    members: dict[str, Member]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tmp = tmp_path_factory.mktemp("classic")
    pcap = Path(tmp / "classic.pcap")
    a, b = Member("classic-a", TOPIC), Member("classic-b", TOPIC)
    with start_broker(free_port(), log_dir=str(tmp)) as broker, tcpdump_capture(pcap, broker.port):
        create_topics(broker.bootstrap, {TOPIC: PARTITIONS})
        _join(broker.bootstrap, a)
        poll_until([a], lambda: a.owned == {0, 1, 2, 3}, DEADLINE_S)
        _join(broker.bootstrap, b)
        poll_until(
            [a, b], lambda: len(a.assigned) == 2 and len(b.assigned) == 1 and a.owned and b.owned, DEADLINE_S
        )
        b.consumer.close()  # LeaveGroup
        poll_until([a], lambda: len(a.assigned) == 3 and a.owned == {0, 1, 2, 3}, DEADLINE_S)
        a.consumer.close()
    sink = ListSink()
    run_capture(pcap, sink, SessionOptions())
    yield Run([r for r in sink.tables["groups"] if r["group_id"] == GROUP], {"classic-a": a, "classic-b": b})


def _member_rows(run: Run, name: str) -> list[dict[str, Any]]:
    member_id = next(
        r["member_id"]
        for r in run.rows
        if r["api_name"] == "JoinGroup" and r["error_name"] == "NONE" and r["member_id"].startswith(name)
    )
    return [r for r in run.rows if r["member_id"] == member_id]


def test_each_members_sync_assignments_are_its_on_assign_callbacks(run: Run) -> None:
    for name, member in run.members.items():
        syncs = [
            r["assignment"] for r in _member_rows(run, name) if r["event"] == "sync" and r["error_code"] == 0
        ]
        assert syncs == member.assigned


def test_generations_rise_with_each_rebalance_and_the_second_member_leaves(run: Run) -> None:
    a = _member_rows(run, "classic-a")
    b = _member_rows(run, "classic-b")
    joined = [
        (r["event"], r["generation_id"]) for r in a if r["event"] in ("join", "sync") and r["error_code"] == 0
    ]
    generations = [g for _, g in joined]
    # Three generations for A: alone, with B, alone again; each join answered before its sync.
    assert [e for e, _ in joined] == ["join", "sync"] * 3
    assert generations == sorted(generations) and len(set(generations)) == 3
    assert [r["event"] for r in b][-1] == "leave"
    assert [r["event"] for r in a][-1] == "leave"
    assert {r["protocol"] for r in run.rows} == {"classic"}


def test_join_requests_carry_the_clients_configuration_and_subscription(run: Run) -> None:
    joins = [r for r in run.rows if r["event"] == "join"]
    assert {(r["session_timeout_ms"], r["rebalance_timeout_ms"], r["subscribed_topics"]) for r in joins} == {
        (SESSION_TIMEOUT_MS, MAX_POLL_MS, TOPIC)
    }
    # Heartbeats and syncs carry no epochs of the new protocols.
    assert {r["member_epoch"] for r in run.rows} == {None}
