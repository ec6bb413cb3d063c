"""Share-group deliveries (KIP-932) on the `partitions` rows and `requests.max_wait_ms`: ShareFetch v1
and ShareAcknowledge v1 exchanges encoded by kio (independent of kwsniff's decoder), timed by the
test. The Java 3.9.1 share consumer speaks only the early-access v0, which kio cannot encode, so no
real client drives these (test_groups_java_consumer.py covers its heartbeats).

The story (group `sg`, topic `orders`, lock timeout 1 s): member m1 acquires orders:0 offsets 0-9 and
orders:1 offsets 0-4 at 1.0001 s; at 1.2 s it accepts 0-5 and, one type per offset, accepts 6,
releases 7, rejects 8 and marks 9 a gap; it never acknowledges orders:1. Member m2, on another
connection, is given orders:0 offset 7 and orders:1 0-4 again at 2.5001 s (DeliveryCount 2: the release
and the lock that ran out) and accepts them with its next ShareFetch at 2.8 s, whose answer acquires
orders:0 10-12; those are never acknowledged and their lock runs out before the capture ends at 5 s.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from kafkawire import CLIENT, Flow, write_pcap
from test_groups_wire import ORDERS, Exchanges

from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink

START = 1_700_000_000_000_000  # kafkawire.Flow's first timestamp (µs)
T0 = dt.datetime.fromtimestamp(START / 1e6, dt.UTC)
LOCK = dt.timedelta(milliseconds=1000)
WAIT = dt.timedelta(milliseconds=500)
ACCEPT, RELEASE, REJECT, GAP = 1, 2, 3, 0


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


class Timed(Exchanges):
    """Exchanges whose request is sent at a chosen time (its response follows 100 µs later)."""

    def __init__(self, client: tuple[bytes, int] = CLIENT) -> None:
        super().__init__()
        self.flow = Flow(client=client).handshake()

    def at(
        self, seconds: float, api: str, version: int, request: dict[str, Any], response: dict[str, Any]
    ) -> None:
        self.flow.ts = START + round(seconds * 1e6) - 100
        self.add(api, version, request, response)


def fetch(member: str, acks: dict[int, list[tuple[int, int, list[int]]]] | None = None) -> dict[str, Any]:
    batches = acks or {}
    topics = [
        {
            "topic_id": ORDERS,
            "partitions": [
                {
                    "partition_index": p,
                    "acknowledgement_batches": [
                        {"first_offset": lo, "last_offset": hi, "acknowledge_types": types}
                        for lo, hi, types in batches[p]
                    ],
                }
                for p in sorted(batches)
            ],
        }
    ]
    return {"group_id": "sg", "member_id": member, "max_wait": WAIT, "topics": topics if batches else []}


def acquired(parts: dict[int, list[tuple[int, int, int]]]) -> dict[str, Any]:
    return {
        "acquisition_lock_timeout": LOCK,
        "responses": [
            {
                "topic_id": ORDERS,
                "partitions": [
                    {
                        "partition_index": p,
                        "records": b"",
                        "acquired_records": [
                            {"first_offset": lo, "last_offset": hi, "delivery_count": n}
                            for lo, hi, n in ranges
                        ],
                    }
                    for p, ranges in sorted(parts.items())
                ],
            }
        ],
    }


def share_capture(path: Path) -> Path:
    """The story above as a pcap at ``path``."""
    a, b = Timed(), Timed((CLIENT[0], CLIENT[1] + 1))
    a.at(0.5, "metadata", 12, {"topics": None}, {"topics": [{"name": "orders", "topic_id": ORDERS}]})
    a.at(1.0, "share_fetch", 1, fetch("m1"), acquired({0: [(0, 9, 1)], 1: [(0, 4, 1)]}))
    acks = {0: [(0, 5, [ACCEPT]), (6, 9, [ACCEPT, RELEASE, REJECT, GAP])]}
    a.at(
        1.2,
        "share_acknowledge",
        1,
        {"group_id": "sg", "member_id": "m1", "topics": fetch("m1", acks)["topics"]},
        {},
    )
    b.at(2.5, "share_fetch", 1, fetch("m2"), acquired({0: [(7, 7, 2)], 1: [(0, 4, 2)]}))
    b.at(
        2.8,
        "share_fetch",
        1,
        fetch("m2", {0: [(7, 7, [ACCEPT])], 1: [(0, 4, [ACCEPT])]}),
        acquired({0: [(10, 12, 1)], 1: []}),
    )
    a.at(5.0, "metadata", 12, {"topics": None}, {"topics": [{"name": "orders", "topic_id": ORDERS}]})
    a.flow.close()
    b.flow.close()
    packets = sorted(a.flow.packets + b.flow.packets, key=lambda p: p[0])
    return write_pcap(path, packets)


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    sink = ListSink()
    run_capture(share_capture(tmp_path_factory.mktemp("share") / "share.pcap"), sink, SessionOptions())
    return dict(sink.tables)


SHARE_COLUMNS = (
    "api_name",
    "topic",
    "partition",
    "acquired_records",
    "redelivered_records",
    "max_delivery_count",
    "acquired_first_offset",
    "acquired_last_offset",
    "acquisition_lock_timeout_ms",
    "accepted_records",
    "released_records",
    "rejected_records",
    "acknowledged_first_offset",
    "acknowledged_last_offset",
)


def test_share_partitions_carry_acquired_and_acknowledged_offsets(tables: dict[str, Any]) -> None:
    rows = [r for r in tables["partitions"] if r["api_key"] in (78, 79)]
    got = [tuple(r.get(c) for c in SHARE_COLUMNS) for r in rows]
    assert got == [
        # m1's first ShareFetch: nothing to acknowledge yet, 15 offsets acquired, all first deliveries.
        ("ShareFetch", "orders", 0, 10, 0, 1, 0, 9, 1000, None, None, None, None, None),
        ("ShareFetch", "orders", 1, 5, 0, 1, 0, 4, 1000, None, None, None, None, None),
        # m1 acknowledges orders:0: 0-5 accepted as one batch type; 6 accepted, 7 released,
        # 8 rejected, 9 a gap (counted in no column, but inside the range).
        ("ShareAcknowledge", "orders", 0, None, None, None, None, None, None, 7, 1, 1, 0, 9),
        # m2 is given the released offset and the offsets whose lock ran out: second deliveries.
        ("ShareFetch", "orders", 0, 1, 1, 2, 7, 7, 1000, None, None, None, None, None),
        ("ShareFetch", "orders", 1, 5, 5, 2, 0, 4, 1000, None, None, None, None, None),
        # m2's next ShareFetch accepts them and acquires 10-12 (orders:1 had nothing new).
        ("ShareFetch", "orders", 0, 3, 0, 1, 10, 12, 1000, 1, 0, 0, 7, 7),
        ("ShareFetch", "orders", 1, 0, 0, None, None, None, 1000, 5, 0, 0, 0, 4),
    ]


def test_fetch_and_share_fetch_requests_carry_max_wait_ms(tables: dict[str, Any]) -> None:
    assert [(r["api_name"], r["max_wait_ms"]) for r in tables["requests"]] == [
        ("Metadata", None),
        ("ShareFetch", 500),
        ("ShareAcknowledge", None),
        ("ShareFetch", 500),
        ("ShareFetch", 500),
        ("Metadata", None),
    ]
