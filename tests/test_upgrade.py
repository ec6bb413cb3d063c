"""Kafka 4 upgrade readiness: `requests.removed_in`, `partitions.removed_in` and the `upgrade` SQL.

Oracles: Apache Kafka's own specs (read here with json, not through the generator), the versions
kafka-python sends when pinned to an old broker version (its documented api_version behaviour:
0.10.1 speaks Produce v2 in message format v1 and Fetch v3, 0.9 Produce v1 in format v0 and
ListOffsets v0), and frames the test assembles itself.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.dataset as ds
import pytest
import realparts
from click.testing import CliRunner
from kafkawire import Flow, cstring, i8, i16, i32, i64, request, response, string, uvarint, write_pcap

from kwsniff.cli import main
from kwsniff.protocol import api_names, magic_removed_in, removed_in
from kwsniff.sections.upgrade import UPGRADE_COLUMNS, UPGRADE_SQL, ZOOKEEPER_SQL

SPECS = Path(__file__).resolve().parent.parent / "tools"
PRODUCE = 0
TOPIC = "upgrade-t"
MODERN = "modern-producer"


# -- the release table against the specs ------------------------------------------------------------
def request_ranges(folder: str) -> dict[int, tuple[int, int] | None]:
    """api key -> (min, max) validVersions of each request spec, None for "none"."""
    out: dict[int, tuple[int, int] | None] = {}
    for path in (SPECS / folder).glob("*Request.json"):
        text = "\n".join(line for line in path.read_text().splitlines() if not line.strip().startswith("//"))
        spec = json.loads(text)
        if spec.get("type") != "request":
            continue
        valid = spec["validVersions"]
        if valid == "none":
            out[spec["apiKey"]] = None
        else:
            lo, _, hi = valid.partition("-")
            out[spec["apiKey"]] = (int(lo.rstrip("+")), int(hi or lo.rstrip("+")))
    return out


def test_every_version_below_the_newest_minimum_is_flagged_and_no_other() -> None:
    old, new = request_ranges("kafka-message-specs"), request_ranges("kafka-message-specs-latest")
    flagged, wrong = {}, []
    for key in sorted(old.keys() | new.keys()):
        newest = new.get(key)
        floor = newest[0] if newest else 1 << 16
        spoken = {v for rng in (old.get(key), newest) if rng for v in range(rng[0], rng[1] + 1)}
        for version in sorted(spoken):
            release = removed_in(key, version)
            if (release is not None) != (version < floor):
                wrong.append((key, version, release))
            if release is not None:
                flagged.setdefault(release, set()).add(api_names()[key])
        # One past the newest version any snapshot knows: a future version is never flagged.
        assert removed_in(key, max(spoken, default=0) + 1) is None
    assert wrong == []
    # KIP-896 and the ZooKeeper-era APIs in 4.0; the share-group early-access v0 in 4.1 (KAFKA-19057).
    assert flagged["4.1"] == {"ShareGroupHeartbeat", "ShareGroupDescribe", "ShareFetch", "ShareAcknowledge"}
    assert {"LeaderAndIsr", "StopReplica", "UpdateMetadata", "ControlledShutdown", "Produce", "Fetch"} <= (
        flagged["4.0"]
    )
    assert set(flagged) == {"4.0", "4.1"}


REMOVED_NOTE = re.compile(r"//\s*Versions? (\d+)(?:-(\d+))? (?:was|were) removed in Apache Kafka (\d+\.\d+)")


def test_the_specs_own_removal_notes_agree_with_the_release_table() -> None:
    notes = []
    for path in sorted((SPECS / "kafka-message-specs-latest").glob("*Request.json")):
        match = REMOVED_NOTE.search(path.read_text())
        if match:
            key = json.loads(
                "\n".join(line for line in path.read_text().splitlines() if not line.strip().startswith("//"))
            )["apiKey"]
            lo, hi, release = int(match[1]), int(match[2] or match[1]), match[3]
            notes.append(path.name)
            assert [removed_in(key, v) for v in range(lo, hi + 1)] == [release] * (hi - lo + 1), path.name
            assert removed_in(key, hi + 1) is None, path.name
    assert len(notes) >= 18  # Produce, Fetch, ListOffsets, OffsetCommit... each says so itself


def test_message_formats_v0_and_v1_are_refused_from_4_0_and_v2_never() -> None:
    assert [magic_removed_in(m) for m in (0, 1, 2, None)] == ["4.0", "4.0", None, None]


# -- real traffic: kafka-python pinned to old brokers, and librdkafka ------------------------------
def _legacy_producer(bootstrap: str, api_version: tuple[int, ...], client_id: str) -> str:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, api_version=api_version, client_id=client_id, retries=0, linger_ms=0
    )
    try:
        producer.send(TOPIC, key=b"k", value=b"legacy", partition=0).get(timeout=10)
        result = "ok"
    except Exception as exc:  # tansu refuses message formats v0/v1: what failed is noted, not raised
        result = type(exc).__name__
    finally:
        producer.close(timeout=5)
    return result


def _legacy_consumer(bootstrap: str, api_version: tuple[int, ...], client_id: str) -> int:
    """Read partition 0 from the start without a group until a record arrives (or 10 s)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        api_version=api_version,
        client_id=client_id,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    consumer.assign([TopicPartition(TOPIC, 0)])
    seen = 0
    deadline = time.monotonic() + 10
    try:
        while not seen and time.monotonic() < deadline:
            seen += sum(len(batch) for batch in consumer.poll(timeout_ms=500).values())
    except Exception:  # tansu's ListOffsets v0 answer is one kafka-python cannot read; the request is sent
        pass
    finally:
        consumer.close()
    return seen


@pytest.fixture(scope="module")
def traffic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    folder = tmp_path_factory.mktemp("upgrade")
    pcap = folder / "upgrade.pcap"
    outcome: dict[str, Any] = {}
    with realparts.start_broker() as broker, realparts.tcpdump_capture(pcap, broker.port):
        bootstrap = broker.bootstrap
        realparts.create_topics(bootstrap, {TOPIC: 1})
        outcome["modern"] = realparts.produce_with_confluent(bootstrap, TOPIC, 3, 100, client_id=MODERN)
        outcome["0.10.1 produce"] = _legacy_producer(bootstrap, (0, 10, 1), "legacy-0.10.1-producer")
        outcome["0.9 produce"] = _legacy_producer(bootstrap, (0, 9), "legacy-0.9-producer")
        outcome["0.10.1 consume"] = _legacy_consumer(bootstrap, (0, 10, 1), "legacy-0.10.1-consumer")
        outcome["0.9 consume"] = _legacy_consumer(bootstrap, (0, 9), "legacy-0.9-consumer")
    out = folder / "tables"
    args = ["read", str(pcap), "--out", str(out), "--broker-port", str(broker.port), "--quiet"]
    done = subprocess.run(
        [sys.executable, "-m", "kwsniff", *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    yield out, outcome


def read_assembled(pcap: Path) -> Path:
    """`kwsniff read` in this process (an assembled capture is small; a subprocess costs seconds)."""
    out = pcap.with_suffix(".tables")
    result = CliRunner().invoke(main, ["read", str(pcap), "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    return out


def table(out: Path, name: str) -> list[dict[str, Any]]:
    return ds.dataset(out / name).to_table().to_pylist()


def run_sql(out: Path, sql: str) -> list[dict[str, Any]]:
    con = duckdb.connect()
    for name in ("requests", "connections", "partitions"):
        con.register(name, ds.dataset(out / name))
    return con.sql(sql).to_arrow_table().to_pylist()


def test_the_clients_ran_as_pinned(traffic: tuple[Path, dict[str, Any]]) -> None:
    _, outcome = traffic
    # tansu refuses message formats v0/v1 (it drops the connection); the modern records land, and the
    # 0.10.1 consumer reads some (tansu serves the format it stored, as a Kafka 4 broker would).
    assert outcome["modern"] == 3
    assert outcome["0.10.1 produce"] != "ok" and outcome["0.9 produce"] != "ok"
    assert outcome["0.10.1 consume"] >= 1


# What Kafka 4.0 refuses of each pinned client, and nothing of librdkafka 2.16's.
FLAGGED = {
    ("legacy-0.10.1-producer", "Produce", 2, "4.0"),
    ("legacy-0.10.1-consumer", "Fetch", 3, "4.0"),
    ("legacy-0.9-producer", "Produce", 1, "4.0"),
    ("legacy-0.9-consumer", "ListOffsets", 0, "4.0"),
}


def test_requests_flag_exactly_the_versions_kafka_4_refuses(traffic: tuple[Path, dict[str, Any]]) -> None:
    out, _ = traffic
    rows = table(out, "requests")
    flagged = {
        (r["client_id"], r["api_name"], r["api_version"], r["removed_in"]) for r in rows if r["removed_in"]
    }
    assert flagged == FLAGGED
    # What the same clients send that Kafka 4 still accepts stays null: Metadata v0/v2, ApiVersions v0,
    # ListOffsets v1 of 0.10.1, and every request of the modern producer.
    kept = {(r["client_id"], r["api_name"], r["api_version"]) for r in rows if r["removed_in"] is None}
    assert {
        ("legacy-0.9-producer", "Metadata", 0),
        ("legacy-0.10.1-producer", "Metadata", 2),
        ("legacy-0.10.1-consumer", "ListOffsets", 1),
        (MODERN, "Produce", 10),
    } <= kept
    assert all(r["removed_in"] is None for r in rows if r["client_id"] == MODERN)


def test_produced_message_formats_v0_and_v1_are_flagged_on_their_partitions(
    traffic: tuple[Path, dict[str, Any]],
) -> None:
    out, _ = traffic
    produce = sorted(
        (r["api_version"], r["topic"], r["partition"], r["record_count"], r["removed_in"])
        for r in table(out, "partitions")
        if r["api_key"] == PRODUCE
    )
    # One record each: v1 carries magic 0, v2 magic 1 (KIP-724), v10 magic 2 (three requests).
    assert produce == [
        (1, TOPIC, 0, 1, "4.0"),
        (2, TOPIC, 0, 1, "4.0"),
        *[(10, TOPIC, 0, 1, None)] * 3,
    ]
    assert {r["removed_in"] for r in table(out, "partitions") if r["api_key"] != PRODUCE} == {None}


def test_upgrade_section_lists_each_client_and_version_kafka_4_refuses(
    traffic: tuple[Path, dict[str, Any]],
) -> None:
    out, _ = traffic
    got = run_sql(out, UPGRADE_SQL)
    assert [tuple(row) for row in got] == [UPGRADE_COLUMNS] * len(got)
    requests = table(out, "requests")

    def seen(client_id: str, key: int, version: int) -> tuple[int, Any, Any]:
        times = [
            r["ts_request"]
            for r in requests
            if (r["client_id"], r["api_key"], r["api_version"]) == (client_id, key, version)
        ]
        return len(times), min(times), max(times)

    expected = []
    # Ordered by release, then client id; kafka-python pinned below 0.10 sends no ApiVersions v3, so
    # no client software is known for it (KIP-511).
    for client_id, key, name, version in (
        ("legacy-0.10.1-consumer", 1, "Fetch", 3),
        ("legacy-0.10.1-producer", 0, "Produce", 2),
        ("legacy-0.9-consumer", 2, "ListOffsets", 0),
        ("legacy-0.9-producer", 0, "Produce", 1),
    ):
        count, first, last = seen(client_id, key, version)
        expected.append(
            {
                "client_id": client_id,
                "client_ip": "127.0.0.1",
                "client_software": None,
                "api_key": key,
                "api_name": name,
                "api_version": version,
                "requests": count,
                "first_seen": first,
                "last_seen": last,
                "removed_in": "4.0",
            }
        )
    assert got == expected
    assert expected[1]["requests"] == expected[3]["requests"] == 1  # retries=0: one Produce each
    # The same rows through `kwsniff report`, as JSON (UTC times, ISO 8601 with Z).
    done = CliRunner().invoke(main, ["report", str(out), "--format", "json", "--section", "upgrade"])
    assert done.exit_code == 0, done.output

    def iso(t: dt.datetime) -> str:
        return t.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")

    assert json.loads(done.output) == {
        "upgrade": [
            {**row, "first_seen": iso(row["first_seen"]), "last_seen": iso(row["last_seen"])}
            for row in expected
        ]
    }


# -- ZooKeeper-era inter-broker requests, assembled ------------------------------------------------
CONTROLLER = (bytes([10, 0, 0, 1]), 41000)
BROKER_2 = (bytes([10, 0, 0, 2]), 9092)
BROKER_2_CLIENT = (bytes([10, 0, 0, 2]), 42000)
CONTROLLER_LISTENER = (bytes([10, 0, 0, 1]), 9092)


def test_brokers_sending_zookeeper_era_requests_are_listed(tmp_path: Path) -> None:
    # The controller tells broker 2 to stop a replica (StopReplica v0: controller id, epoch, delete
    # flag, no partitions); broker 2 asks the controller to shut it down (ControlledShutdown v0, whose
    # header v0 has no client id, and v1). A client's ApiVersions on the same broker is not listed.
    stop = Flow(client=CONTROLLER, broker=BROKER_2).handshake()
    stop.send(0, request(5, 0, 1, i32(1) + i32(7) + i8(0) + i32(0), client_id="controller-1"))
    stop.send(1, response(1, i16(0) + i32(0)))
    stop.send(0, request(5, 0, 2, i32(1) + i32(7) + i8(1) + i32(0), client_id="controller-1"))
    stop.send(1, response(2, i16(0) + i32(0)))
    stop.close()
    shutdown = Flow(client=BROKER_2_CLIENT, broker=CONTROLLER_LISTENER).handshake()
    v0 = struct.pack(">hhi", 7, 0, 3) + i32(2)
    shutdown.send(0, struct.pack(">i", len(v0)) + v0)
    shutdown.send(1, response(3, i16(0) + i32(0)))
    shutdown.send(0, request(7, 1, 4, i32(2), client_id="broker-2"))
    shutdown.send(1, response(4, i16(0) + i32(0)))
    shutdown.close()
    client = Flow(client=(bytes([10, 0, 0, 9]), 43000), broker=BROKER_2).handshake()
    client.send(0, request(18, 0, 5))
    client.send(1, response(5, i16(0) + i32(0)))
    client.close()
    shutdown.packets = [(ts + 10_000, p) for ts, p in shutdown.packets]
    client.packets = [(ts + 20_000, p) for ts, p in client.packets]
    pcap = write_pcap(tmp_path / "zk.pcap", stop.packets + shutdown.packets + client.packets)
    out = read_assembled(pcap)
    assert {r["status"] for r in table(out, "requests")} == {"ok"}
    got = [
        {k: v for k, v in row.items() if k not in ("first_seen", "last_seen")}
        for row in run_sql(out, ZOOKEEPER_SQL)
    ]
    common = {"removed_in": "4.0"}
    assert got == [
        {
            "sender_ip": "10.0.0.1",
            "client_id": "controller-1",
            "receiver_ip": "10.0.0.2",
            "receiver_port": 9092,
            "api_key": 5,
            "api_name": "StopReplica",
            "api_version": 0,
            "requests": 2,
            **common,
        },
        {
            "sender_ip": "10.0.0.2",
            "client_id": "broker-2",
            "receiver_ip": "10.0.0.1",
            "receiver_port": 9092,
            "api_key": 7,
            "api_name": "ControlledShutdown",
            "api_version": 1,
            "requests": 1,
            **common,
        },
        {
            "sender_ip": "10.0.0.2",
            "client_id": None,
            "receiver_ip": "10.0.0.1",
            "receiver_port": 9092,
            "api_key": 7,
            "api_name": "ControlledShutdown",
            "api_version": 0,
            "requests": 1,
            **common,
        },
    ]


# -- assembled: a message format a release refuses on a newer Produce, a 4.1 removal ---------------
def flexible_request(api_key: int, version: int, corr: int, body: bytes, client_id: str) -> bytes:
    """Request header v2 (KIP-482): the classic client id string, then an empty tagged-field section."""
    payload = struct.pack(">hhi", api_key, version, corr) + string(client_id) + uvarint(0) + body
    return struct.pack(">i", len(payload)) + payload


def magic1_message(value: bytes) -> bytes:
    """One uncompressed message in format v1 (KIP-32): offset, size, CRC32 of the rest, magic 1."""
    rest = i8(1) + i8(0) + i64(1_700_000_000_000) + i32(-1) + i32(len(value)) + value
    message = struct.pack(">I", zlib.crc32(rest)) + rest
    return i64(0) + i32(len(message)) + message


def test_upgrade_rows_flag_message_formats_on_newer_produce_and_later_releases(tmp_path: Path) -> None:
    # One client names its software (ApiVersions v3), sends a Produce v3 carrying a format v1 message
    # set (the version is kept, the format is not: KIP-724) and a share-group heartbeat v0 (4.1).
    records = magic1_message(b"old format")
    produce_v3 = (
        i16(-1) + i16(1) + i32(1000) + i32(1) + string("t") + i32(1) + i32(0) + i32(len(records)) + records
    )
    heartbeat_v0 = cstring("g") + cstring("m") + i32(0) + cstring(None) + uvarint(0) + uvarint(0)
    flow = Flow(client=(bytes([10, 0, 0, 5]), 44000), broker=BROKER_2).handshake()
    flow.send(0, flexible_request(18, 3, 1, cstring("test-client") + cstring("1.0") + uvarint(0), "newer"))
    flow.send(1, response(1, i16(0) + uvarint(1) + i32(0) + uvarint(0)))
    flow.send(0, request(0, 3, 2, produce_v3, client_id="newer"))
    flow.send(0, flexible_request(76, 0, 3, heartbeat_v0, "newer"))
    flow.close()
    pcap = write_pcap(tmp_path / "newer.pcap", flow.packets)
    out = read_assembled(pcap)
    requests = {r["correlation_id"]: r for r in table(out, "requests")}
    assert [(requests[c]["status"], requests[c]["removed_in"]) for c in (1, 2, 3)] == [
        ("ok", None),
        ("unanswered", None),
        ("unanswered", "4.1"),
    ]
    (part,) = table(out, "partitions")
    assert (part["api_version"], part["record_count"], part["removed_in"]) == (3, 1, "4.0")
    common = {
        "client_id": "newer",
        "client_ip": "10.0.0.5",
        "client_software": "test-client 1.0",
        "requests": 1,
    }
    assert run_sql(out, UPGRADE_SQL) == [
        {
            **common,
            "api_key": 0,
            "api_name": "Produce",
            "api_version": 3,
            "first_seen": requests[2]["ts_request"],
            "last_seen": requests[2]["ts_request"],
            "removed_in": "4.0",
        },
        {
            **common,
            "api_key": 76,
            "api_name": "ShareGroupHeartbeat",
            "api_version": 0,
            "first_seen": requests[3]["ts_request"],
            "last_seen": requests[3]["ts_request"],
            "removed_in": "4.1",
        },
    ]
