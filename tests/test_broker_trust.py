"""Whose word names a broker (docs/tables.md "Which broker answered", issue 45): a real tansu broker on
127.0.0.1 and, beside it on 127.0.0.2 and the same port, a host that answers Metadata (kio-encoded)
listing the real broker's address under node id 666. The real broker's rows must keep the node id
it reports for itself (librdkafka is the oracle), whichever answer the capture shows first; the
conflict must be counted in the `captures` table and named in the summary; and `misrouted` must
not list the clients that meant to reach the real broker (ApiVersions v5 naming its node id)."""

from __future__ import annotations

import socket
import struct
import threading
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.response_header.v1.header import ResponseHeader
from kio.static.primitive import i32
from realparts import free_ports, produce_with_confluent, run_kwsniff, stop_process, tcpdump_capture
from report_engines import answer_sections
from test_broker_identity import CLUSTER, node_ids, start_tansu
from test_fetchers import build, read_frame
from test_misrouted import api_versions_request, api_versions_response, kio_frame, request_frame

REAL, POISONER = "127.0.0.1", "127.0.0.2"
FALSE_NODE, POISONER_NODE = 666, 7
API_VERSIONS, METADATA = 18, 3


def poison_answer(frame: bytes, port: int) -> bytes:
    """The poisoner's answer: ApiVersions (struct), and Metadata v12 listing itself as node 7 and
    the real broker's address as node 666."""
    api_key, _version, correlation = struct.unpack(">hhi", frame[4:12])
    if api_key == API_VERSIONS:
        return api_versions_response(correlation)
    body = build(
        MetadataResponse,
        {
            "brokers": [
                {"node_id": POISONER_NODE, "host": POISONER, "port": port},
                {"node_id": FALSE_NODE, "host": REAL, "port": port},
            ],
            "cluster_id": "poisoned",
            "controller_id": POISONER_NODE,
        },
    )
    return kio_frame(ResponseHeader(correlation_id=i32(correlation)), body)


def serve_poison(server: socket.socket, port: int) -> None:
    conn, _addr = server.accept()
    with conn:
        conn.settimeout(10)
        for _ in range(10):
            try:
                frame = read_frame(conn)
            except ConnectionError:
                return
            conn.sendall(poison_answer(frame, port))


def metadata_request(correlation: int, client_id: str) -> bytes:
    return request_frame(METADATA, 12, correlation, client_id, build(MetadataRequest, {"topics": []}))


def ask_poisoner(port: int) -> None:
    with socket.create_connection((POISONER, port), timeout=10) as client:
        client.sendall(api_versions_request(1, "poisoned-client", 3, "test-poisoned", None, -1))
        read_frame(client)
        client.sendall(metadata_request(2, "poisoned-client"))
        read_frame(client)


def ask_real_broker(port: int, client_id: str, node: int) -> None:
    """An ApiVersions v5 request meaning to reach node ``node`` of CLUSTER (KIP-1242; tansu 0.6 knows
    v0-v4 and closes the connection, which leaves the request unanswered with its intent), then, on
    a connection of its own, ApiVersions v3 and Metadata: the broker's answer about itself."""
    with socket.create_connection((REAL, port), timeout=10) as client:
        client.sendall(api_versions_request(1, client_id, 5, "test-honest", CLUSTER, node))
        for _ in range(100):  # until tansu closes (a frame, if a later tansu answers, is read past)
            if not client.recv(65536):
                break
    with socket.create_connection((REAL, port), timeout=10) as client:
        client.sendall(api_versions_request(1, client_id, 3, "test-honest", None, -1))
        read_frame(client)
        client.sendall(metadata_request(2, client_id))
        read_frame(client)


@pytest.fixture(scope="module")
def poisoned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two captures of the same traffic in two orders: `poison-first` (the false claim before any
    answer of the real broker) and `honest-first` (after them, then one more honest client)."""
    tmp = tmp_path_factory.mktemp("trust")
    (port,) = free_ports(1)
    tansu = start_tansu(REAL, port, f"tcp://{REAL}:{port}")
    try:
        (real_node,) = node_ids(f"{REAL}:{port}")
        captures = {}
        for order in ("poison-first", "honest-first"):
            pcap = tmp / f"{order}.pcap"
            with socket.create_server((POISONER, port)) as server, tcpdump_capture(pcap, port):
                server.settimeout(10)
                thread = threading.Thread(target=serve_poison, args=(server, port), daemon=True)
                thread.start()
                if order == "poison-first":
                    ask_poisoner(port)
                ask_real_broker(port, "honest-a", real_node)
                assert produce_with_confluent(f"{REAL}:{port}", "orders", 3, 100, client_id="confluent") == 3
                if order == "honest-first":
                    ask_poisoner(port)
                    ask_real_broker(port, "honest-b", real_node)
                thread.join(timeout=10)
                assert not thread.is_alive()
            out = tmp / order
            done = run_kwsniff("read", str(pcap), "--out", str(out), "--broker-port", str(port))
            assert done.returncode == 0, done.stderr
            captures[order] = (out, done.stdout)
    finally:
        stop_process(tansu)
    return {"port": port, "real_node": real_node, "captures": captures}


ORDERS = ("poison-first", "honest-first")


def rows(out: Path, table: str) -> list[dict[str, Any]]:
    return ds.dataset(out / table).to_table().to_pylist()


def test_the_real_broker_keeps_the_node_id_it_gives_itself_whatever_another_host_says(
    poisoned: dict[str, Any],
) -> None:
    port, real_node = poisoned["port"], poisoned["real_node"]
    for order in ORDERS:  # the same rows whichever claim came first
        out, _summary = poisoned["captures"][order]
        named = {
            (r["broker_ip"], r["broker_port"], r["broker_id"])
            for t in ("requests", "partitions")
            for r in rows(out, t)
        }
        assert named == {(REAL, port, real_node), (POISONER, port, POISONER_NODE)}, order
        # Every exchange with the real broker is there: the ApiVersions v5 it closed on, the honest
        # clients' and librdkafka's Metadata, the producer's Produce.
        real = {(r["client_id"], r["api_key"]) for r in rows(out, "requests") if r["broker_ip"] == REAL}
        assert {("honest-a", API_VERSIONS), ("honest-a", METADATA), ("confluent", 0)} <= real, order


@pytest.mark.parametrize("order", ORDERS)
def test_the_conflict_is_counted_in_the_captures_table_and_named_in_the_summary(
    poisoned: dict[str, Any], order: str
) -> None:
    out, summary = poisoned["captures"][order]
    port, real_node = poisoned["port"], poisoned["real_node"]
    assert [r["broker_conflicts"] for r in rows(out, "captures")] == [1]
    line = next(x.strip() for x in summary.splitlines() if "broker conflicts" in x)
    assert line == (
        f"broker conflicts: 1 claims of another node id: {REAL}:{port} is node {real_node}"
        f" (its own answer), not node {FALSE_NODE} (said by {POISONER}:{port})"
    )


def test_misrouted_does_not_list_the_clients_that_reached_the_broker_they_meant(
    poisoned: dict[str, Any], request: pytest.FixtureRequest
) -> None:
    real_node = poisoned["real_node"]
    for order, clients in zip(ORDERS, (["honest-a"], ["honest-a", "honest-b"]), strict=True):
        out, _summary = poisoned["captures"][order]
        intents = {
            (r["client_id"], r["intended_node_id"], r["broker_id"])
            for r in rows(out, "requests")
            if r["intended_node_id"] is not None
        }
        assert intents == {(c, real_node, real_node) for c in clients}, order
        assert answer_sections(out, ["misrouted"], "duckdb", request)["misrouted"] == [], order


# -- the rules, on responses written here -------------------------------------------------------------
def metadata(*brokers: tuple[int, str, int]) -> dict[str, Any]:
    return {"brokers": [{"node_id": n, "host": h, "port": p} for n, h, p in brokers]}


def test_rows_named_only_by_another_host_wait_for_the_brokers_own_answer() -> None:
    from kwsniff.rows import ListSink
    from kwsniff.rows.brokers import BrokerDirectory, BrokerIds

    sink = ListSink()
    ids = BrokerIds(sink, BrokerDirectory())
    real, poisoner = ("10.0.0.1", 9092), ("10.0.0.2", 9092)
    ids.learn(3, metadata((666, "10.0.0.1", 9092), (7, "10.0.0.2", 9092)), poisoner)
    ids.add(
        "requests", {"correlation_id": 1, "broker_ip": "10.0.0.1", "broker_port": 9092, "broker_id": None}
    )
    ids.add(
        "requests", {"correlation_id": 2, "broker_ip": "10.0.0.2", "broker_port": 9092, "broker_id": None}
    )
    # The poisoner's word about itself names its rows at once; its word about 10.0.0.1 does not.
    assert [(r["correlation_id"], r["broker_id"]) for r in sink.tables["requests"]] == [(2, 7)]
    ids.learn(3, metadata((1, "10.0.0.1", 9092)), real)
    assert [(r["correlation_id"], r["broker_id"]) for r in sink.tables["requests"]] == [(2, 7), (1, 1)]
    # A later false claim changes nothing; each claim against the id an address has is counted.
    ids.learn(3, metadata((666, "10.0.0.1", 9092)), poisoner)
    assert ids.directory.firm(real) == 1
    assert ids.directory.take_conflicts() == (2, {real: {1: [real], 666: [poisoner]}})
    assert ids.directory.take_conflicts() == (0, {})


def test_broker_map_stays_above_every_claim_and_is_not_a_conflict() -> None:
    from kwsniff.rows.brokers import BrokerDirectory

    d = BrokerDirectory(fixed={("10.0.0.1", 9092): 5})
    assert not d.learn(3, metadata((1, "10.0.0.1", 9092)), ("10.0.0.1", 9092))
    assert not d.learn(3, metadata((666, "10.0.0.1", 9092)), ("10.0.0.2", 9092))
    assert d.node(("10.0.0.1", 9092)) == d.firm(("10.0.0.1", 9092)) == 5
    assert (d.learned, d.conflicts) == ({}, 0)


def test_the_broker_map_is_held_within_its_pool_and_another_hosts_claims_go_first() -> None:
    from kwsniff.memory import BROKERS, MemoryBudget
    from kwsniff.rows.brokers import ADDRESS_COST, HEARD_COST, BrokerDirectory

    budget = MemoryBudget(8 * 1024 * 1024)
    cap = budget.cap(BROKERS)  # 128 KiB
    d = BrokerDirectory()
    d.bound(budget.cell(BROKERS), cap)
    own = [(f"192.168.0.{i}", 9092) for i in range(1, 101)]
    for n, endpoint in enumerate(own):
        d.learn(3, metadata((n, endpoint[0], 9092)), endpoint)
    flood = [(i, f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}", 9092) for i in range(50_000)]
    d.learn(3, metadata(*flood), ("10.255.0.1", 9092))
    assert d.held <= cap and budget.used(BROKERS) == d.held
    assert all(d.firm(e) == n for n, e in enumerate(own))  # the brokers' own words stayed
    kept = len(d.heard)
    assert len(d.learned) == len(own) + kept
    assert 0 < kept < cap // (ADDRESS_COST + HEARD_COST)
    assert d.take_evicted() == (
        len(flood) - kept,
        sum(ADDRESS_COST + HEARD_COST + len(h) for _, h, _ in flood[: len(flood) - kept]),
    )
    d.bound(None, cap)  # the session ends: its pool lets go, the map stays for the next capture
    assert budget.used(BROKERS) == 0 and d.firm(own[0]) == 0


def test_workers_conflicts_add_up_and_their_disputes_are_merged() -> None:
    """`capture --workers`: each worker's session counts the claims it saw; the run's result adds
    them and names each address once (kwsniff.pipeline.run_workers.merge_results)."""
    from collections import Counter

    from kwsniff.pipeline.run import CaptureResult
    from kwsniff.pipeline.run_workers import merge_results
    from kwsniff.pipeline.session import SessionStats

    real, poisoner, other = ("10.0.0.1", 9092), ("10.0.0.2", 9092), ("10.0.0.3", 9092)

    def result(conflicts: int, disputes: dict[Any, Any]) -> CaptureResult:
        stats = SessionStats(broker_conflicts=conflicts, broker_disputes=disputes)
        return CaptureResult(
            "w", "w", 0, 0.0, stats, Counter(), Counter(), Counter(), Counter(), Counter(), 0, False
        )

    merged = merge_results(
        [
            result(2, {real: {1: [real], 666: [poisoner]}}),
            result(1, {real: {1: [real], 667: [other]}}),
        ],
        "eth0",
        1.0,
    )
    assert merged.stats.broker_conflicts == 3
    assert merged.stats.broker_disputes == {real: {1: [real], 666: [poisoner], 667: [other]}}


# -- memory, read from the kernel -------------------------------------------------------------------
MEMORY_LIMIT = 32 * 1024 * 1024
ATTACK_ANSWERS, ATTACK_BROKERS = 80, 50_000


def flood_metadata(first: int, n: int) -> bytes:
    """A Metadata v1 response body listing ``n`` brokers, each at an address of its own."""
    parts = [struct.pack(">i", n)]
    for i in range(first, first + n):
        host = b"10.%d.%d.%d" % (i >> 16 & 255, i >> 8 & 255, i & 255)
        parts.append(struct.pack(">ih", i & 0x7FFFFFFF, len(host)) + host + struct.pack(">ih", 9092, -1))
    parts.append(struct.pack(">ii", 0, 0))  # controller id, no topics
    return b"".join(parts)


def test_metadata_naming_four_million_brokers_stays_within_the_limit(tmp_path: Path) -> None:
    # Issue 45's attack: 80 Metadata answers of 50,000 broker addresses each. Before, every address
    # was kept (1 GB at any limit); now the brokers share holds the newest, the rest counted.
    from kafkawire import Flow, request, response, write_pcap
    from test_input_bounds import MIB, metadata_exchange, peak_run

    small = write_pcap(tmp_path / "small.pcap", metadata_exchange())
    code, baseline, _, err = peak_run(
        ["read", str(small), "-o", str(tmp_path / "base"), "--memory-limit", str(MEMORY_LIMIT), "-q"]
    )
    assert (code, err) == (0, "")
    flow = Flow(client=(bytes([10, 255, 0, 7]), 40007)).handshake()
    for a in range(ATTACK_ANSWERS):
        flow.send(0, request(3, 1, a, struct.pack(">i", -1)))
        flow.send(1, response(a, flood_metadata(a * ATTACK_BROKERS, ATTACK_BROKERS)), mss=65000)
    flow.close()
    attack = write_pcap(tmp_path / "brokers.pcap", flow.packets)
    del flow
    args = ["read", str(attack), "-o", str(tmp_path / "t"), "--memory-limit", str(MEMORY_LIMIT)]
    code, peak, out, err = peak_run(args)
    assert (code, err) == (0, "")
    assert f"requests {ATTACK_ANSWERS}: ok {ATTACK_ANSWERS}," in out
    from kwsniff.memory import BROKERS, MemoryBudget
    from kwsniff.rows.brokers import ADDRESS_COST, HEARD_COST

    line = next(x for x in out.splitlines() if "evicted:" in x)
    evicted = int(line.split("evicted: ")[1].split(" broker map entries")[0].replace(",", ""))
    total = ATTACK_ANSWERS * ATTACK_BROKERS
    assert total - MemoryBudget(MEMORY_LIMIT).cap(BROKERS) // (ADDRESS_COST + HEARD_COST) <= evicted < total
    assert peak < baseline + MEMORY_LIMIT, f"peak {peak / MIB:.0f} MiB, baseline {baseline / MIB:.0f} MiB"
