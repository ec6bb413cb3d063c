"""Which broker answered (docs/tables.md "Which broker answered"): real clients (confluent-kafka and
kafka-python) against two tansu brokers on two loopback addresses, in one tcpdump capture. Every
row's broker_ip and broker_port must be the broker the test pointed that client at, and broker_id the
node id the broker reported to librdkafka (tansu 0.6 has no option for its node id: every tansu
process reports the same one, so distinct ids per broker come from --broker-map, which the test
writes). Rows exchanged before any response named the broker (a connection that only asks
ApiVersions before another connection's Metadata, a second capture of the same run) are named too."""

from __future__ import annotations

import socket
import struct
import subprocess
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from realparts import (
    broker_binary,
    free_ports,
    produce_with_confluent,
    run_kwsniff,
    stop_process,
    tcpdump_capture,
    wait_until,
)

import kwsniff

HOST_A, HOST_B = "127.0.0.1", "127.0.0.2"
CLUSTER = "kwsniff-identity"


def start_tansu(host: str, port: int, advertised: str) -> subprocess.Popen[bytes]:
    """tansu listening on host:port, advertising ``advertised``; returns once it accepts connections."""
    command = [
        broker_binary(),
        "broker",
        "--cluster-id",
        CLUSTER,
        "--listener-url",
        f"tcp://{host}:{port}",
        "--advertised-listener-url",
        advertised,
        "--storage-engine",
        "memory://tansu/",
    ]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def accepts() -> bool:
        assert proc.poll() is None, f"tansu on {host}:{port} exited"
        with socket.socket() as sock:
            sock.settimeout(0.5)
            return sock.connect_ex((host, port)) == 0

    try:
        wait_until(accepts, f"tansu on {host}:{port}", timeout_s=15.0)
    except BaseException:
        stop_process(proc)
        raise
    return proc


def node_ids(bootstrap: str) -> dict[int, tuple[str, int]]:
    """The brokers (node id -> advertised host, port) as librdkafka decodes the broker's Metadata."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "identity-oracle"})
    return {b.id: (b.host, b.port) for b in admin.list_topics(timeout=10).brokers.values()}


def api_versions_only(host: str, port: int, client_id: str) -> None:
    """One ApiVersions v0 request (encoded here with struct) and its response on a connection of its
    own: an exchange that names no broker."""
    cid = client_id.encode()
    body = struct.pack(">hhih", 18, 0, 7, len(cid)) + cid
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", _read(sock, 4))[0]
        answer = _read(sock, size)
    assert struct.unpack(">ih", answer[:6]) == (7, 0)  # its correlation id, no error


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    for _ in range(10_000):
        if len(data) == n:
            return data
        chunk = sock.recv(n - len(data))
        assert chunk, "connection closed early"
        data += chunk
    raise AssertionError("frame not read")


def produce_with_kafka_python(bootstrap: str, topic: str, n: int, client_id: str) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id=client_id, acks=1)
    try:
        for i in range(n):
            producer.send(topic, key=b"k%d" % i, value=b"v" * 50).get(timeout=30)
    finally:
        producer.close(timeout=10)


@pytest.fixture(scope="module")
def two_brokers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Capture 1: raw ApiVersions to B, confluent-kafka producing to A, kafka-python producing to
    and consuming from B. Capture 2 (later): raw ApiVersions to A only."""
    from realparts import consume_with_kafka_python

    tmp = tmp_path_factory.mktemp("identity")
    port_a, port_b = free_ports(2)
    a = start_tansu(HOST_A, port_a, f"tcp://{HOST_A}:{port_a}")
    try:
        b = start_tansu(HOST_B, port_b, f"tcp://{HOST_B}:{port_b}")
        try:
            ids = {"a": node_ids(f"{HOST_A}:{port_a}"), "b": node_ids(f"{HOST_B}:{port_b}")}
            bpf = f"tcp port {port_a} or tcp port {port_b}"
            first, second = tmp / "two-brokers.pcap", tmp / "later.pcap"
            with tcpdump_capture(first, port_a, bpf=bpf):
                api_versions_only(HOST_B, port_b, "raw-early")
                assert (
                    produce_with_confluent(f"{HOST_A}:{port_a}", "orders", 5, 100, client_id="confluent-a")
                    == 5
                )
                produce_with_kafka_python(f"{HOST_B}:{port_b}", "orders", 4, "kpython-b")
                got = consume_with_kafka_python(
                    f"{HOST_B}:{port_b}", ["orders"], "identity-group", 4, client_id="kpython-consumer-b"
                )
                assert got == 4
            with tcpdump_capture(second, port_a, bpf=bpf):
                api_versions_only(HOST_A, port_a, "raw-later")
        finally:
            stop_process(b)
    finally:
        stop_process(a)
    return {"first": first, "second": second, "ports": {"a": port_a, "b": port_b}, "ids": ids, "tmp": tmp}


# Which broker the test pointed each client at.
CLIENT_BROKER = {
    "raw-early": "b",
    "confluent-a": "a",
    "kpython-b": "b",
    "kpython-consumer-b": "b",
    "raw-later": "a",
}
ADDRESS = {"a": HOST_A, "b": HOST_B}


def rows(out: Path, table: str) -> list[dict[str, Any]]:
    return ds.dataset(out / table).to_table().to_pylist()


def read(tmp: Path, name: str, *args: str) -> Path:
    out = tmp / name
    done = run_kwsniff("read", *args, "--out", str(out), "-q")
    assert done.returncode == 0, done.stderr
    return out


def expected_broker(setup: dict[str, Any], client_id: str, named: dict[str, int]) -> tuple[str, int, int]:
    which = CLIENT_BROKER[client_id]
    return ADDRESS[which], setup["ports"][which], named[which]


def test_every_row_names_the_broker_each_client_was_pointed_at(two_brokers: dict[str, Any]) -> None:
    setup = two_brokers
    # tansu 0.6 reports one node id whatever the process (no option sets it): librdkafka's view.
    (id_a,), (id_b,) = setup["ids"]["a"], setup["ids"]["b"]
    assert setup["ids"]["a"][id_a] == (HOST_A, setup["ports"]["a"])
    named = {"a": id_a, "b": id_b}
    out = read(setup["tmp"], "learned", str(setup["first"]))
    requests = rows(out, "requests")
    assert {r["client_id"] for r in requests} == set(CLIENT_BROKER) - {"raw-later"}
    for table in ("requests", "partitions", "errors", "groups"):
        for row in rows(out, table):
            got = (row["broker_ip"], row["broker_port"], row["broker_id"])
            assert got == expected_broker(setup, row["client_id"], named), (table, row["api_name"], row)
    # Each connection's first exchange (ApiVersions) came before any response named a broker; the
    # raw connection to B never saw one at all (kafka-python's Metadata, later, named B).
    first = {}
    for r in sorted(requests, key=lambda r: r["ts_request"]):
        first.setdefault(r["conn_id"], r)
    assert {r["api_name"] for r in first.values()} == {"ApiVersions"}
    assert all(r["broker_id"] is not None for r in first.values())
    assert [r["broker_id"] for r in requests if r["client_id"] == "raw-early"] == [id_b]
    # The groups rows are kafka-python's consumer's, at B.
    assert {r["client_id"] for r in rows(out, "groups")} == {"kpython-consumer-b"}


def test_broker_map_gives_each_broker_the_node_id_the_file_names(two_brokers: dict[str, Any]) -> None:
    setup = two_brokers
    ports = setup["ports"]
    mapping = setup["tmp"] / "brokers.map"
    mapping.write_text(f"# test brokers\n{HOST_A}:{ports['a']} 1\n\n{HOST_B}:{ports['b']}   2  # B\n")
    out = read(setup["tmp"], "mapped", str(setup["first"]), "--broker-map", str(mapping))
    named = {"a": 1, "b": 2}
    for table in ("requests", "partitions", "errors", "groups"):
        for row in rows(out, table):
            got = (row["broker_ip"], row["broker_port"], row["broker_id"])
            assert got == expected_broker(setup, row["client_id"], named), (table, row)
    # The Python API takes the same file.
    tables = kwsniff.read(setup["first"], broker_map=mapping)
    got = {(r["client_id"], r["broker_id"]) for r in tables["requests"].to_pylist()}
    assert got == {(c, named[b]) for c, b in CLIENT_BROKER.items() if c != "raw-later"}


def test_a_later_capture_of_the_run_is_named_by_what_the_first_taught(two_brokers: dict[str, Any]) -> None:
    setup = two_brokers
    (id_a,) = setup["ids"]["a"]
    both = read(setup["tmp"], "both", str(setup["first"]), str(setup["second"]))
    later = [r for r in rows(both, "requests") if r["capture"] == "later.pcap"]
    assert [(r["client_id"], r["broker_ip"], r["broker_port"], r["broker_id"]) for r in later] == [
        ("raw-later", HOST_A, setup["ports"]["a"], id_a)
    ]
    # Alone, nothing in it names a broker: the id is null and the summary says so.
    alone = setup["tmp"] / "alone"
    done = run_kwsniff("read", str(setup["second"]), "--out", str(alone))
    assert done.returncode == 0, done.stderr
    assert [r["broker_id"] for r in rows(alone, "requests")] == [None]
    assert "brokers without a node id: 1 rows (+0 written before an id could be learned)" in done.stdout


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("127.0.0.1:9092\n", "'127.0.0.1:9092' is not two fields"),
        ("127.0.0.1:x 1\n", "'127.0.0.1:x' is not HOST:PORT"),
        ("127.0.0.1:9092 one\n", "'one' is not a node id"),
        ("# ok\n127.0.0.1:9092 1\n127.0.0.1:9092 2\n", "127.0.0.1:9092 is node 1 on an earlier line"),
        ("no-such-host.invalid:9092 1\n", "no-such-host.invalid does not resolve"),
    ],
)
def test_a_bad_broker_map_is_one_error_line(tmp_path: Path, text: str, says: str) -> None:
    mapping = tmp_path / "bad.map"
    mapping.write_text(text)
    capture = Path(__file__).parents[1] / "sample_pcaps" / "quickstart.pcap"
    done = run_kwsniff("read", str(capture), "--out", str(tmp_path / "out"), "--broker-map", str(mapping))
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kwsniff: error: ") and says in lines[0], done.stderr
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def named_broker(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """tansu on 127.0.0.1 advertising the host NAME `localhost`; confluent-kafka produces to it."""
    tmp = tmp_path_factory.mktemp("named")
    (port,) = free_ports(1)
    proc = start_tansu(HOST_A, port, f"tcp://localhost:{port}")
    try:
        ids = node_ids(f"{HOST_A}:{port}")
        capture = tmp / "named.pcap"
        with tcpdump_capture(capture, port):
            api_versions_only(HOST_A, port, "raw-named")
            assert (
                produce_with_confluent(f"{HOST_A}:{port}", "orders", 3, 100, client_id="confluent-named") == 3
            )
    finally:
        stop_process(proc)
    return {"capture": capture, "port": port, "ids": ids, "tmp": tmp}


def test_an_advertised_host_name_is_linked_by_the_metadata_its_broker_sent(
    named_broker: dict[str, Any],
) -> None:
    setup = named_broker
    ((node, advertised),) = setup["ids"].items()
    assert advertised == ("localhost", setup["port"])  # what the test configured tansu to advertise
    out = read(setup["tmp"], "learned", str(setup["capture"]))
    got = {(r["client_id"], r["broker_ip"], r["broker_port"], r["broker_id"]) for r in rows(out, "requests")}
    # The raw connection's ApiVersions came before any Metadata and was held until one named it.
    assert got == {
        ("raw-named", HOST_A, setup["port"], node),
        ("confluent-named", HOST_A, setup["port"], node),
    }


def test_broker_map_names_an_advertised_host_name(named_broker: dict[str, Any]) -> None:
    setup = named_broker
    mapping = setup["tmp"] / "names.map"
    mapping.write_text(f"localhost:{setup['port']} 5\n")
    out = read(setup["tmp"], "mapped", str(setup["capture"]), "--broker-map", str(mapping))
    assert {r["broker_id"] for r in rows(out, "requests")} == {5}
    assert {r["broker_id"] for r in rows(out, "partitions")} == {5}


def test_host_names_are_linked_only_when_one_listed_broker_can_have_answered() -> None:
    """The rules of docs/tables.md "Which broker answered", on responses written here."""
    from kwsniff.rows.brokers import BrokerDirectory

    def metadata(*brokers: tuple[int, str, int]) -> dict[str, Any]:
        return {"brokers": [{"node_id": n, "host": h, "port": p} for n, h, p in brokers]}

    d = BrokerDirectory()
    # Two brokers by name on one port: either could have answered, nothing is decided.
    assert not d.learn(3, metadata((1, "kafka-1", 9092), (2, "kafka-2", 9092)), ("10.0.0.1", 9092))
    assert d.learned == {} and d.names == {}
    # One of them on the connection's port: it answered; its name is linked to the address.
    assert d.learn(3, metadata((1, "kafka-1", 9092), (2, "kafka-2", 9093)), ("10.0.0.1", 9092))
    assert d.learned == {("10.0.0.1", 9092): 1} and d.names == {("kafka-1", 9092): "10.0.0.1"}
    # On another address, kafka-1 (linked elsewhere) cannot be the one: kafka-3 is.
    assert d.learn(3, metadata((1, "kafka-1", 9092), (3, "kafka-3", 9092)), ("10.0.0.3", 9092))
    assert d.learned[("10.0.0.3", 9092)] == 3
    # FindCoordinator names another broker: by a linked name or an IP literal, never by elimination.
    # Another host's word names the address, but only provisionally: learn() says no firm id came.
    assert not d.learn(10, {"node_id": 4, "host": "kafka-4", "port": 9092}, ("10.0.0.1", 9092))
    assert not d.learn(
        10, {"coordinators": [{"node_id": 5, "host": "10.0.0.5", "port": 9092}]}, ("10.0.0.1", 9092)
    )
    assert d.learned[("10.0.0.5", 9092)] == 5 and ("10.0.0.1", 9092) in d.learned
    assert d.node(("10.0.0.5", 9092)) == 5 and d.firm(("10.0.0.5", 9092)) is None
    assert d.heard == {("10.0.0.5", 9092): ("10.0.0.1", 9092)}
    # DescribeCluster lists broker_id; an IPv6 literal is written as kwsniff.net.format_ip writes it.
    assert d.learn(
        60, {"brokers": [{"broker_id": 6, "host": "2001:DB8::0:6", "port": 9092}]}, ("2001:db8::6", 9092)
    )
    assert d.learned[("2001:db8::6", 9092)] == 6
    # The broker's own answer confirms what another host said: firm now.
    assert d.learn(3, metadata((5, "10.0.0.5", 9092)), ("10.0.0.5", 9092))
    assert d.firm(("10.0.0.5", 9092)) == 5 and d.heard == {}
    # A later different id for a known address is not applied, and is counted with who said what.
    assert not d.learn(3, metadata((7, "10.0.0.5", 9092)), ("10.0.0.5", 9092))
    assert d.learned[("10.0.0.5", 9092)] == 5 and d.conflicts == 1
    assert d.disputes == {("10.0.0.5", 9092): {5: [("10.0.0.5", 9092)], 7: [("10.0.0.5", 9092)]}}
    # A FindCoordinator error names node -1: no broker.
    assert not d.learn(10, {"node_id": -1, "host": "", "port": -1}, ("10.0.0.1", 9092))

    # --broker-map's addresses link the names a response gives their nodes, which helps elimination.
    m = BrokerDirectory(fixed={("10.0.1.1", 9092): 1})
    listed = metadata((1, "kafka-1", 9092), (2, "kafka-2", 9092))
    assert m.learn(3, listed, ("10.0.1.2", 9092))  # kafka-1 is at 10.0.1.1: kafka-2 answered here
    assert m.names == {("kafka-1", 9092): "10.0.1.1", ("kafka-2", 9092): "10.0.1.2"}
    assert m.node(("10.0.1.2", 9092)) == 2 and m.node(("10.0.1.1", 9092)) == 1


def test_spark_buckets_name_rows_by_what_any_bucket_learned(two_brokers: dict[str, Any]) -> None:
    """`kwsniff spark --flow-buckets`: a connection's bucket may hold no response naming its broker;
    the ids another bucket learned name it (kwsniff.spark.files.BucketFix), as `read` does."""
    setup = two_brokers
    (id_a,), (id_b,) = setup["ids"]["a"], setup["ids"]["b"]
    out = setup["tmp"] / "fleet"
    done = run_kwsniff(
        "spark", str(setup["first"]), "--out", str(out), "--master", "local[1]", "--flow-buckets", "8", "-q"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    named = {"a": id_a, "b": id_b}
    for table in ("requests", "partitions", "errors", "groups"):
        for row in ds.dataset(out / table, partitioning="hive").to_table().to_pylist():
            got = (row["broker_ip"], row["broker_port"], row["broker_id"])
            assert got == expected_broker(setup, row["client_id"], named), (table, row)


def test_a_bucket_fix_fills_the_broker_ids_other_buckets_learned() -> None:
    import pyarrow as pa

    from kwsniff.spark.files import BucketFix
    from kwsniff.tables.schemas import REQUESTS

    fix = BucketFix()
    fix.add({"conns": [10], "topics": {}, "node_ids": [["10.0.0.1", 9092, 1]]})
    fix.add({"conns": [20], "topics": {}, "node_ids": [["10.0.0.1", 9092, 9], ["10.0.0.2", 9092, 2]]})
    fix.rank()
    rows = [
        {"conn_id": 10, "broker_ip": "10.0.0.2", "broker_port": 9092, "broker_id": None},
        {"conn_id": 20, "broker_ip": "10.0.0.1", "broker_port": 9092, "broker_id": None},
        {"conn_id": 20, "broker_ip": "10.0.0.3", "broker_port": 9092, "broker_id": None},
        {"conn_id": 10, "broker_ip": "10.0.0.1", "broker_port": 9092, "broker_id": 4},  # its bucket's own
    ]
    batch = pa.RecordBatch.from_pylist(rows, schema=REQUESTS)
    fixed = fix.apply("requests", batch).to_pylist()
    assert [(r["conn_id"], r["broker_id"]) for r in fixed] == [(1, 2), (2, 1), (2, None), (1, 4)]


def test_rows_held_for_a_node_id_are_bounded_and_counted() -> None:
    from kwsniff.rows import ListSink
    from kwsniff.rows.brokers import BrokerDirectory, BrokerIds

    sink = ListSink()
    held = BrokerIds(sink, BrokerDirectory(), max_held=2)
    for n in range(3):
        held.add(
            "requests", {"correlation_id": n, "broker_ip": "10.0.0.1", "broker_port": 9092, "broker_id": None}
        )
    held.add("groups", {"correlation_id": 3, "broker_ip": "10.0.0.2", "broker_port": 9092, "broker_id": None})
    # The third and fourth rows found the hold full: written at once, without an id, and counted.
    assert [(r["correlation_id"], r["broker_id"]) for r in sink.tables["requests"]] == [(2, None)]
    assert held.held_overflow == 2
    # Another host's word does not release them: they wait for the broker's own.
    held.learn(3, {"brokers": [{"node_id": 1, "host": "10.0.0.1", "port": 9092}]}, ("10.0.0.9", 9092))
    assert [(r["correlation_id"], r["broker_id"]) for r in sink.tables["requests"]] == [(2, None)]
    held.learn(3, {"brokers": [{"node_id": 1, "host": "10.0.0.1", "port": 9092}]}, ("10.0.0.1", 9092))
    assert [(r["correlation_id"], r["broker_id"]) for r in sink.tables["requests"]] == [
        (2, None),
        (0, 1),
        (1, 1),
    ]
    held.add(
        "requests", {"correlation_id": 5, "broker_ip": "10.0.0.3", "broker_port": 9092, "broker_id": None}
    )
    held.add(
        "requests", {"correlation_id": 6, "broker_ip": "10.0.0.4", "broker_port": 9092, "broker_id": None}
    )
    held.learn(3, {"brokers": [{"node_id": 4, "host": "10.0.0.4", "port": 9092}]}, ("10.0.0.1", 9092))
    held.finish()  # never named: written with a null id, counted as unresolved
    assert [(r["correlation_id"], r["broker_id"]) for r in sink.tables["requests"][-2:]] == [
        (5, None),
        (6, 4),
    ]
    assert held.unresolved == 1  # 10.0.0.4 has the id 10.0.0.1 gave it, its own answer never came
    held.add("connections", {"conn_id": 1})  # other tables pass through untouched
    assert sink.tables["connections"] == [{"conn_id": 1}]


def test_a_broker_unnamed_after_its_per_broker_hold_is_written_without_an_id_until_named() -> None:
    """A capture that began after its clients' Metadata: past MAX_HELD_PER_BROKER held rows, that
    broker's rows are written at once (memory does not grow with the capture), in the order they
    came, and counted; once a response names it, its rows carry the id again."""
    from kwsniff.rows import ListSink
    from kwsniff.rows.brokers import MAX_HELD_PER_BROKER, BrokerDirectory, BrokerIds

    sink = ListSink()
    held = BrokerIds(sink, BrokerDirectory())

    def row(n: int, ip: str = "10.0.0.1") -> dict[str, Any]:
        return {"correlation_id": n, "broker_ip": ip, "broker_port": 9092, "broker_id": None}

    for n in range(MAX_HELD_PER_BROKER):
        held.add("requests", row(n))
    held.add("requests", row(-1, "10.0.0.2"))  # another broker's hold is its own
    assert sink.tables.get("requests", []) == [] and held.held_count == MAX_HELD_PER_BROKER + 1
    held.add("requests", row(MAX_HELD_PER_BROKER))
    held.add("requests", row(MAX_HELD_PER_BROKER + 1))
    written = [(r["correlation_id"], r["broker_id"]) for r in sink.tables["requests"]]
    assert written == [(n, None) for n in range(MAX_HELD_PER_BROKER + 2)]
    assert (held.held_overflow, held.held_count) == (MAX_HELD_PER_BROKER + 2, 1)
    held.learn(3, {"brokers": [{"node_id": 4, "host": "10.0.0.1", "port": 9092}]}, ("10.0.0.9", 1))
    held.add("requests", row(1000))
    assert (sink.tables["requests"][-1]["correlation_id"], sink.tables["requests"][-1]["broker_id"]) == (
        1000,
        4,
    )
