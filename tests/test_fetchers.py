"""Who is fetching (docs/tables.md "Who is fetching"): consumer, follower and KRaft metadata-log Fetch
requests, encoded by kio (independent of kwsniff's encoder), sent over real TCP sockets on loopback to
a tiny kio-answering server, captured by tcpdump; each row's `replica_id` and `fetcher` must equal
what the test encoded, and the consumer-facing report sections count the consumer's fetches only."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import importlib
import io
import shutil
import socket
import struct
import threading
import types
import typing
import uuid
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from kio.schema.request_header.v1.header import RequestHeader as RequestHeader1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeader2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeader0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeader1
from kio.serial import entity_writer
from kio.static import primitive
from kio.static.primitive import i16, i32
from realparts import free_port, run_kwsniff, tcpdump_capture
from report_engines import answer_sections

from kwsniff.cli import main
from kwsniff.sections.catalog import BY_NAME
from kwsniff.sections.engines import DuckEngine, Filters
from kwsniff.sections.run import answer

FETCH = 1
# Fetch v4 and v11 (names, classic header), v12 (names, flexible), v13-v14 (topic ids), v15-v18
# (replica_state, KIP-903): every version kio has from v11 on, and v4, the oldest it has.
VERSIONS = (4, 11, 12, 13, 14, 15, 16, 17, 18)
ORDERS_ID = uuid.UUID("6b1d5c2e-0f4a-4d8e-9c3b-2a7e1f9d0c11")
METADATA_ID = uuid.UUID("00000000-0000-0000-0000-000000000001")  # the KRaft metadata log's fixed id
FOLLOWER_ID, VOTER_ID, MAX_WAIT_MS, HWM = 2, 3, 500, 120
# (client id, replica id encoded, topic: "orders" or the metadata log, fetcher expected)
FETCHERS = (
    ("consumer-1", -1, "orders", "consumer"),
    ("broker-2-fetcher-0", FOLLOWER_ID, "orders", "follower"),
    ("raft-client-3", VOTER_ID, "__cluster_metadata", "metadata"),
)


def build(entity_type: Any, values: dict[str, Any]) -> Any:
    """A kio entity: ``values`` (nested entities given as dicts, arrays as lists of dicts), every other
    field its default, or zero/empty/null when it has none."""
    hints = typing.get_type_hints(entity_type)
    assert set(values) <= set(hints), (entity_type, set(values) - set(hints))
    given = {}
    for field in dataclasses.fields(entity_type):
        hint = hints[field.name]
        if field.name in values:
            given[field.name] = _value(hint, values[field.name])
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            given[field.name] = _zero(hint)
    return entity_type(**given)


def _value(hint: Any, value: Any) -> Any:
    if typing.get_origin(hint) is tuple and isinstance(value, list):
        return tuple(_value(typing.get_args(hint)[0], item) for item in value)
    if dataclasses.is_dataclass(hint) and isinstance(value, dict):
        return build(hint, value)
    if isinstance(hint, type) and issubclass(hint, datetime.timedelta):
        return datetime.timedelta(milliseconds=value)
    return hint(value) if isinstance(hint, type) and issubclass(hint, primitive.Interval) else value


def _zero(hint: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        return None
    if origin is tuple:
        return ()
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(0)
    if isinstance(hint, type) and issubclass(hint, datetime.timedelta):
        return datetime.timedelta(0)
    if hint is uuid.UUID:
        return uuid.UUID(int=0)
    if hint is bool:
        return False
    if hint is str:
        return ""
    return hint(0)


def encoded(entity: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def fetch_request(version: int, replica_id: int, topic: str) -> dict[str, Any]:
    """The kio Fetch request's fields: the replica id in its place for the version, the topic by name
    up to v12 and by id from v13 (the metadata log's fixed id)."""
    part = {"partition": 0, "fetch_offset": 40, "partition_max_bytes": 1 << 20}
    if version >= 13:
        named: dict[str, Any] = {"topic_id": METADATA_ID if topic == "__cluster_metadata" else ORDERS_ID}
    else:
        named = {"topic": topic}
    body: dict[str, Any] = {
        "max_wait": MAX_WAIT_MS,
        "min_bytes": 1,
        "topics": [{**named, "partitions": [part]}],
    }
    if version >= 15:
        if replica_id >= 0:  # a consumer leaves the tagged field out (its default, -1)
            body["replica_state"] = {"replica_id": replica_id, "replica_epoch": 7}
    else:
        body["replica_id"] = replica_id
    return body


def fetch_response(version: int, request: dict[str, Any]) -> dict[str, Any]:
    named = {k: v for k, v in request["topics"][0].items() if k in ("topic", "topic_id")}
    part = {"partition_index": 0, "high_watermark": HWM, "last_stable_offset": HWM}
    return {"responses": [{**named, "partitions": [part]}]}


def frames(
    version: int, correlation: int, client_id: str, replica_id: int, topic: str
) -> tuple[bytes, bytes]:
    """One Fetch request frame and its response frame, both kio-encoded."""
    module = f"kio.schema.fetch.v{version}"
    request_type = importlib.import_module(f"{module}.request").FetchRequest
    response_type = importlib.import_module(f"{module}.response").FetchResponse
    request = fetch_request(version, replica_id, topic)
    flexible = request_type.__flexible__
    header = (RequestHeader2 if flexible else RequestHeader1)(
        request_api_key=i16(FETCH),
        request_api_version=i16(version),
        correlation_id=i32(correlation),
        client_id=client_id,
    )
    reply = (ResponseHeader1 if flexible else ResponseHeader0)(correlation_id=i32(correlation))
    req = encoded(header) + encoded(build(request_type, request))
    resp = encoded(reply) + encoded(build(response_type, fetch_response(version, request)))
    return struct.pack(">i", len(req)) + req, struct.pack(">i", len(resp)) + resp


def read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed mid-frame")
            out += chunk
        return out

    size = exactly(4)
    return size + exactly(struct.unpack(">i", size)[0])


def serve(server: socket.socket, answers: dict[bytes, bytes], connections: int) -> None:
    """Answer each request frame with its kio-encoded response, ``connections`` clients in turn."""
    for _ in range(connections):
        conn, _addr = server.accept()
        with conn:
            conn.settimeout(10)
            while True:
                try:
                    frame = read_frame(conn)
                except ConnectionError:
                    break
                conn.sendall(answers[frame])


@pytest.fixture(scope="module")
def sent(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[str, int, int, str]]]:
    """The tables of the capture, and per request sent: (client id, version, replica id, fetcher)."""
    tmp = tmp_path_factory.mktemp("fetchers")
    port = free_port()
    plan: dict[str, list[tuple[bytes, bytes]]] = {}
    truth = []
    correlation = 0
    for client_id, replica_id, topic, kind in FETCHERS:
        for version in VERSIONS:
            correlation += 1
            plan.setdefault(client_id, []).append(frames(version, correlation, client_id, replica_id, topic))
            truth.append((client_id, version, replica_id, kind))
    answers = {req: resp for pairs in plan.values() for req, resp in pairs}
    pcap = tmp / "fetchers.pcap"
    with socket.create_server(("127.0.0.1", port)) as server, tcpdump_capture(pcap, port):
        server.settimeout(10)
        thread = threading.Thread(target=serve, args=(server, answers, len(plan)), daemon=True)
        thread.start()
        for pairs in plan.values():
            with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
                for req, resp in pairs:
                    client.sendall(req)
                    assert read_frame(client) == resp  # answered before the next is sent
        thread.join(timeout=10)
        assert not thread.is_alive()
    out = tmp / "tables"
    done = CliRunner().invoke(main, ["read", "-q", str(pcap), "--out", str(out), "--overwrite"])
    assert done.exit_code == 0, done.output
    return out, truth


def table(out: Path, name: str) -> list[dict[str, Any]]:
    return pq.read_table(out / name).to_pylist()


def test_requests_rows_carry_the_encoded_replica_id_and_fetcher(
    sent: tuple[Path, list[tuple[str, int, int, str]]],
) -> None:
    out, truth = sent
    rows = table(out, "requests")
    got = sorted((r["client_id"], r["api_version"], r["replica_id"], r["fetcher"]) for r in rows)
    assert got == sorted(truth)
    assert all(r["status"] == "ok" for r in rows)


def test_spark_decodes_the_same_replica_ids_and_fetchers(
    sent: tuple[Path, list[tuple[str, int, int, str]]], tmp_path: Path
) -> None:
    """`kwsniff spark` (split by flow, so its bucketed sessions) writes the same columns."""
    out, truth = sent
    fleet = tmp_path / "fleet"
    pcap = out.parent / "fetchers.pcap"
    done = run_kwsniff(
        "spark", str(pcap), "--out", str(fleet), "--master", "local[1]", "--flow-buckets", "2", "-q"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    keys = ("client_id", "api_version", "replica_id", "fetcher")
    for name in ("requests", "partitions"):
        rows = ds.dataset(fleet / name, partitioning="hive").to_table().to_pylist()
        assert sorted(tuple(r[k] for k in keys) for r in rows) == sorted(truth), name


def test_fetch_partitions_rows_repeat_them(sent: tuple[Path, list[tuple[str, int, int, str]]]) -> None:
    out, truth = sent
    rows = table(out, "partitions")
    keys = ("client_id", "api_version", "replica_id", "fetcher", "fetch_offset", "high_watermark")
    got = sorted(tuple(r[k] for k in keys) for r in rows)
    assert got == sorted((*t, 40, HWM) for t in truth)
    # The metadata log named or by its fixed id; orders by name up to v12, by its id from v13.
    for r in rows:
        metadata = r["fetcher"] == "metadata"
        if r["api_version"] >= 13:
            assert (r["topic"], r["topic_id"]) == (None, str(METADATA_ID if metadata else ORDERS_ID))
        else:
            assert (r["topic"], r["topic_id"]) == ("__cluster_metadata" if metadata else "orders", None)


@pytest.mark.parametrize("engine_name", ["duckdb", "spark"])
def test_report_counts_only_the_consumer_fetches(
    sent: tuple[Path, list[tuple[str, int, int, str]]], engine_name: str, request: pytest.FixtureRequest
) -> None:
    out, _truth = sent
    rows = answer_sections(out, ["long_polls", "inventory"], engine_name, request)
    polls = [(r["api_name"], r["client_id"], r["polls"], r["wait_ms"]) for r in rows["long_polls"]]
    assert polls == [("Fetch", "consumer-1", len(VERSIONS), MAX_WAIT_MS)]
    # Inventory names topics: orders by name up to v12 (v4, v11, v12); the fetches naming it by a
    # topic id no Metadata names are the consumer's row with no topic, records and bytes unknown.
    inventory = sorted(
        ((r["client_id"], r["role"], r["topic"], r["requests"]) for r in rows["inventory"]), key=str
    )
    by_name = [v for v in VERSIONS if v <= 12]
    assert inventory == [
        ("consumer-1", "consumer", "orders", len(by_name)),
        ("consumer-1", "consumer", None, len(VERSIONS) - len(by_name)),
    ]
    assert [r["records"] for r in rows["inventory"] if r["topic"] is None] == [None]


def test_tables_written_before_the_columns_existed_still_report(
    sent: tuple[Path, list[tuple[str, int, int, str]]], tmp_path: Path
) -> None:
    """Tables without `replica_id`/`fetcher` (an older kwsniff's) read them as null, taken for
    consumers: every client's fetches count, as they did before."""
    out, truth = sent
    old = tmp_path / "old"
    shutil.copytree(out, old, ignore=lambda d, names: [n for n in names if n.startswith("summary_")])
    for name in ("requests", "partitions"):
        for path in (old / name).rglob("*.parquet"):
            written = pq.read_table(path)
            pq.write_table(written.drop_columns(["replica_id", "fetcher"]), path)
    with DuckEngine(old, Filters()) as engine:
        assert not engine.summarized
        rows = answer(engine, Filters(), [BY_NAME["long_polls"]])
    polls = sorted((r["client_id"], r["polls"]) for r in rows["long_polls"])
    assert polls == [(client_id, len(VERSIONS)) for client_id in sorted({t[0] for t in truth})]
