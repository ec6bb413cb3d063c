"""Every `kwsniff report` section against a second computation that shares nothing with the report's
SQL: pandas over the raw Parquet tables, written from docs/report.md's description of the section
(never a translation of its query), on the repository's real captures, two groups of real clients
reading the same records (tests/data/report) and two captures made here (exchanges the test encodes,
sent over real loopback sockets and captured by tcpdump: throttled clients, ZooKeeper-era
inter-broker requests, a Produce carrying two partitions of one topic, a refused partition and
JoinGroup), the two holding the same exchanges so that sections adding captures up are checked to
add, not to count.

Sections checked elsewhere against the real clients' own record or values built into the input:
`lag`, `stopped`, `member_lag` (tests/test_report_live.py), `inventory`, `reconciliation`, `storms`,
`share_groups`, `share_deliveries` (tests/test_report_sections.py); docs/test-oracles.md lists them.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import socket
import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner
from kafkawire import i8, i16, i32, i64, request, response, string
from realparts import LOOPBACK, free_port, tcpdump_capture

from kwsniff.cli import main
from kwsniff.sections.engines import DuckEngine, Filters
from kwsniff.sections.run import answer

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = sorted((ROOT / "tests/data/captures").glob("*.pcap")) + [ROOT / "sample_pcaps/quickstart.pcap"]
# Two groups reading the same records (tests/data/report/README.md): batches fetched twice.
TWO_GROUPS = ROOT / "tests/data/report/two_groups.pcap"
LONG_POLL_APIS = {1, 78, 11}  # Fetch, ShareFetch, JoinGroup (docs/report.md `latency`, `long_polls`)
ZOOKEEPER_APIS = {4, 5, 6, 7}  # LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown
EPOCH = pd.Timestamp("1970-01-01", tz="UTC")
TIMEOUT_S = 10.0


def array(items: list[bytes]) -> bytes:
    return i32(len(items)) + b"".join(items)


def produce_v8_two_partitions(corr: int, throttle_ms: int) -> tuple[bytes, bytes]:
    """A Produce v8 of partitions 0 and 1 of `built-orders` (no records), throttled: partition 0
    acknowledged, partition 1 refused (NOT_LEADER_OR_FOLLOWER), every time."""
    body = (
        string(None)
        + i16(-1)
        + i32(1000)
        + array([string("built-orders") + array([i32(0) + i32(-1), i32(1) + i32(-1)])])
    )
    acked = i32(0) + i16(0) + i64(10 * corr) + i64(-1) + i64(0) + array([]) + string(None)
    refused = i32(1) + i16(6) + i64(-1) + i64(-1) + i64(-1) + array([]) + string("leader moved")
    answer_ = array([string("built-orders") + array([acked, refused])]) + i32(throttle_ms)
    return request(0, 8, corr, body, client_id="throttled-producer"), response(corr, answer_)


def describe_configs(corr: int, throttle_ms: int, version: int) -> tuple[bytes, bytes]:
    """DescribeConfigs of topic `built-orders`, answered throttled; v0 is refused from Kafka 4.0."""
    synonyms = b"\x00" if version else b""  # include_synonyms, from v1
    body = array([i8(2) + string("built-orders") + i32(-1)]) + synonyms
    fine = i16(0) + string(None) + i8(2) + string("built-orders") + array([])
    answer_ = i32(throttle_ms) + array([fine])
    return request(32, version, corr, body, client_id="throttled-admin"), response(corr, answer_)


def blob(data: bytes) -> bytes:
    return i32(len(data)) + data


def join_group_v1(corr: int, error_code: int, generation: int) -> tuple[bytes, bytes]:
    """Member m-built's JoinGroup v1 of `built-group` (rebalance timeout 60 s), answered with
    ``error_code`` (it then joins nothing) or as the leader of ``generation``."""
    body = string("built-group") + i32(10_000) + i32(60_000) + string("m-built") + string("consumer")
    body += array([string("range") + blob(b"\x00\x00")])
    joined = error_code == 0
    members = array([string("m-built") + blob(b"\x00\x00")]) if joined else array([])
    answer_ = i16(error_code) + i32(generation if joined else -1) + string("range" if joined else "")
    answer_ += string("m-built" if joined else "") + string("m-built") + members
    return request(11, 1, corr, body, client_id="built-consumer"), response(corr, answer_)


def sync_group_v0(corr: int, generation: int) -> tuple[bytes, bytes]:
    body = (
        string("built-group") + i32(generation) + string("m-built") + array([string("m-built") + blob(b"")])
    )
    return request(14, 0, corr, body, client_id="built-consumer"), response(corr, i16(0) + blob(b""))


def built_connections() -> list[list[tuple[bytes, bytes]]]:
    """The controller stops two replicas on broker 2 (StopReplica v0); broker 2 asks to shut down
    (ControlledShutdown v1); an admin is throttled 250 ms (DescribeConfigs v1) then 40 ms (v0, which
    Kafka 4.0 refuses); a producer sends three Produce requests of two partitions each, throttled 0,
    100 and 300 ms; a member's JoinGroup is refused while the coordinator loads
    (COORDINATOR_LOAD_IN_PROGRESS: no part of a generation), then it joins generation 5 and syncs.
    One list of (request, response) per connection."""
    stop = [
        (
            request(5, 0, corr, i32(1) + i32(7) + i8(corr - 1) + i32(0), client_id="controller-1"),
            response(corr, i16(0) + i32(0)),
        )
        for corr in (1, 2)
    ]
    shutdown = [(request(7, 1, 3, i32(2), client_id="broker-2"), response(3, i16(0) + i32(0)))]
    admin = [
        describe_configs(corr, throttle, version) for corr, throttle, version in ((4, 250, 1), (5, 40, 0))
    ]
    producer = [produce_v8_two_partitions(corr, throttle) for corr, throttle in ((6, 0), (7, 100), (8, 300))]
    member = [join_group_v1(9, 14, 0), join_group_v1(10, 0, 5), sync_group_v0(11, 5)]
    return [stop, shutdown, admin, producer, member]


def received(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "the peer closed early"
        data += chunk
    return data


def built_capture(path: Path, port: int) -> Path:
    """:func:`built_connections` to a server on ``port`` over real loopback sockets, one connection
    after the other, each request answered once it has arrived whole, captured by tcpdump."""
    connections = built_connections()
    with socket.create_server((LOOPBACK, port)) as listener:
        listener.settimeout(TIMEOUT_S)

        def serve() -> None:
            for exchanges in connections:
                conn, _ = listener.accept()
                with conn:
                    conn.settimeout(TIMEOUT_S)
                    for req, resp in exchanges:
                        assert received(conn, len(req)) == req
                        conn.sendall(resp)
                    assert conn.recv(1) == b""  # the client closes first

        with tcpdump_capture(path, port):
            server = threading.Thread(target=serve, daemon=True)
            server.start()
            for exchanges in connections:
                with socket.create_connection((LOOPBACK, port), timeout=TIMEOUT_S) as client:
                    for req, resp in exchanges:
                        client.sendall(req)
                        assert received(client, len(resp)) == resp
            server.join(TIMEOUT_S)
            assert not server.is_alive()
    return path


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    stage = tmp_path_factory.mktemp("built")
    # One broker port for both: the same receiver, whose requests the report adds up over captures.
    port = free_port()
    built = [built_capture(stage / f"built-{n}.pcap", port) for n in ("a", "b")]
    out = tmp_path_factory.mktemp("tables")
    done = CliRunner().invoke(
        main, ["read", "-q", *map(str, [*CAPTURES, TWO_GROUPS, *built]), "--out", str(out), "--overwrite"]
    )
    assert done.exit_code == 0, done.output
    return out


@pytest.fixture(scope="module")
def report(out: Path) -> dict[str, list[dict[str, Any]]]:
    with DuckEngine(out, Filters()) as engine:
        return answer(engine, Filters())


@pytest.fixture(scope="module")
def tables(out: Path) -> dict[str, pd.DataFrame]:
    return {
        name: pd.read_parquet(out / name)
        for name in ("requests", "connections", "errors", "partitions", "groups")
    }


# -- helpers: what the docs call things, in pandas ---------------------------------------------------
def nearest_rank(values: Any, p: float) -> float:
    """Percentiles are nearest-rank (docs/report.md): the value at rank ceil(p·n)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p * len(ordered)) - 1)]


def us(ts: pd.Series) -> pd.Series:
    return (ts - EPOCH) // pd.Timedelta(microseconds=1)


def ms_between(later: pd.Series, earlier: pd.Series) -> pd.Series:
    return (us(later) - us(earlier)) / 1e3


def minute(ts: pd.Series) -> pd.Series:
    return ts.dt.floor("min")


def py(value: Any) -> Any:
    """A pandas cell as the report's JSON-able value (None for missing, datetimes in UTC)."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    if isinstance(value, pd.Timestamp):
        return value.to_pydatetime()
    if hasattr(value, "item"):
        return value.item()
    return value


def rows(frame: pd.DataFrame, columns: list[str]) -> list[tuple[Any, ...]]:
    return sorted((tuple(py(v) for v in r) for r in frame[columns].itertuples(index=False)), key=repr)


def got(report: dict, section: str, columns: list[str]) -> list[tuple[Any, ...]]:
    return sorted((tuple(r[c] for c in columns) for r in report[section]), key=repr)


def groups_of(frame: pd.DataFrame, keys: list[str]) -> Any:
    return frame.groupby(keys, dropna=False, sort=False)


def latency_rows(frame: pd.DataFrame, keys: list[str], value: str) -> pd.DataFrame:
    """Per group of ``keys``: count of known ``value``s, nearest-rank p50, p99 and the max."""
    known = frame[frame[value].notna()]
    out = [
        (*key, len(g), nearest_rank(g[value], 0.5), nearest_rank(g[value], 0.99), g[value].max())
        for key, g in groups_of(known, keys)
    ]
    return pd.DataFrame(out, columns=[*keys, "n", "p50_ms", "p99_ms", "max_ms"])


# -- the sections --------------------------------------------------------------------------------------
def test_the_built_captures_give_every_checked_section_rows(report: dict) -> None:
    checked = [
        "latency", "long_polls", "produce_latency", "produce_to_consume", "errors", "throttled",
        "throughput", "churn", "rebalances", "rebalance_members", "upgrade", "upgrade_zookeeper",
    ]  # fmt: skip
    assert [s for s in checked if not report[s]] == []


def test_throughput_is_the_records_and_bytes_produced_per_topic_and_minute(
    report: dict, tables: dict
) -> None:
    produced = tables["partitions"]
    produced = produced[produced.api_key == 0].assign(minute=lambda f: minute(f.ts_request))
    want = groups_of(produced, ["topic", "minute"]).agg(
        records=("record_count", lambda s: s.sum(min_count=1)),
        bytes=("record_bytes", lambda s: s.sum(min_count=1)),
    )
    columns = ["topic", "minute", "records", "bytes"]
    assert got(report, "throughput", columns) == rows(want.reset_index(), columns)


def test_throughput_per_topic_adds_up_to_what_the_clients_produced(report: dict) -> None:
    # The real clients' truth files: records the producers had acknowledged per topic.
    truth: dict[str, int] = {}
    for capture in (ROOT / "tests/data/captures").glob("*.truth.json"):
        facts = json.loads(capture.read_text())
        for topic, count in facts.get("produced", {}).get("per_topic", {}).items():
            truth[topic] = truth.get(topic, 0) + count
        # legacy_msgset: each attempt with a forced old version sent one record the broker refused;
        # throughput is what producers sent, acknowledged or not.
        if facts.get("legacy_attempts"):
            truth["legacy-t"] += len(facts["legacy_attempts"])
    # two_groups.pcap: the producer's delivery callbacks, one per record.
    truth["report-lag"] = len(
        json.loads(TWO_GROUPS.with_suffix(".truth.json").read_text())["producer_acks"]["times"]
    )
    assert len(truth) == 13
    per_topic: dict[str, int] = {}
    for r in report["throughput"]:
        per_topic[r["topic"]] = per_topic.get(r["topic"], 0) + (r["records"] or 0)
    assert {t: per_topic.get(t) for t in truth} == truth


def test_churn_counts_connections_opened_closed_and_short_lived_per_minute(
    report: dict, tables: dict
) -> None:
    c = tables["connections"]
    closed = c.fin_seen | c.rst_seen
    opened = c.assign(minute=minute(c.ts_first), short=closed & (ms_between(c.ts_last, c.ts_first) < 1000))
    per_open = opened.groupby("minute").agg(opened=("conn_id", "size"), short_lived=("short", "sum"))
    per_close = (
        c[closed].assign(minute=lambda f: minute(f.ts_last)).groupby("minute").agg(closed=("conn_id", "size"))
    )
    want = per_open.join(per_close, how="outer").fillna(0).astype(int).reset_index()
    columns = ["minute", "opened", "closed", "short_lived"]
    assert got(report, "churn", columns) == rows(want, columns)


def test_latency_is_per_api_version_and_client_without_long_polls(report: dict, tables: dict) -> None:
    r = tables["requests"]
    want = latency_rows(
        r[~r.api_key.isin(LONG_POLL_APIS)], ["api_name", "api_version", "client_id"], "latency_ms"
    )
    columns = ["api_name", "api_version", "client_id", "requests", "p50_ms", "p99_ms", "max_ms"]
    assert got(report, "latency", columns) == rows(want.rename(columns={"n": "requests"}), columns)


def test_throttled_clients_how_often_in_total_and_at_most(report: dict, tables: dict) -> None:
    r = tables["requests"]
    throttled = r[r.throttle_time_ms > 0]
    want = groups_of(throttled, ["client_id"]).agg(
        throttled_requests=("throttle_time_ms", "size"),
        throttle_ms_total=("throttle_time_ms", "sum"),
        throttle_ms_max=("throttle_time_ms", "max"),
    )
    columns = ["client_id", "throttled_requests", "throttle_ms_total", "throttle_ms_max"]
    assert got(report, "throttled", columns) == rows(want.reset_index(), columns)
    # The two built captures hold the same exchanges: each client throttled twice as often as built.
    assert got(report, "throttled", columns) == [
        ("throttled-admin", 4, 580, 250),
        ("throttled-producer", 4, 800, 300),
    ]


def test_produce_latency_is_one_count_and_one_latency_per_request_and_topic(
    report: dict, tables: dict
) -> None:
    # Each Produce request's latency from its `requests` row, its topics and records from its
    # partitions: a request carrying two partitions of a topic is one request of that topic.
    keys = ["capture", "conn_id", "correlation_id"]
    parts = tables["partitions"]
    per_topic = (
        groups_of(parts[parts.api_key == 0], [*keys, "topic"])
        .agg(records=("record_count", lambda s: s.sum(min_count=1)))
        .reset_index()
        .merge(tables["requests"][[*keys, "latency_ms"]], on=keys)
    )
    answered = per_topic[per_topic.latency_ms.notna()]
    want = latency_rows(answered, ["topic"], "latency_ms").merge(
        groups_of(answered, ["topic"]).agg(records=("records", lambda s: s.sum(min_count=1))).reset_index()
    )
    columns = ["topic", "requests", "records", "p50_ms", "p99_ms", "max_ms"]
    assert got(report, "produce_latency", columns) == rows(want.rename(columns={"n": "requests"}), columns)
    orders = [r for r in report["produce_latency"] if r["topic"] == "built-orders"]
    assert [r["requests"] for r in orders] == [6]  # 3 requests of 2 partitions, in each of 2 captures


def test_inventory_counts_a_producers_requests_once_per_topic(report: dict, tables: dict) -> None:
    # docs/report.md: `requests` per client, role and topic. A Produce request is one request of each
    # topic it carries, whatever its partitions: distinct (capture, connection, correlation id).
    parts = tables["partitions"]
    produce = parts[(parts.api_key == 0) & parts.topic.notna()]
    keys = ["client_id", "client_ip", "topic"]
    one_per_request = produce.drop_duplicates([*keys, "capture", "conn_id", "correlation_id"])
    want = groups_of(one_per_request, keys).size().reset_index(name="requests")
    producers = [r for r in report["inventory"] if r["role"] == "producer"]
    columns = ["client_id", "client_ip", "topic", "requests"]
    assert sorted((tuple(r[c] for c in columns) for r in producers), key=repr) == rows(want, columns)
    orders = [r["requests"] for r in producers if r["topic"] == "built-orders"]
    assert orders == [6]  # 3 requests of 2 partitions, in each of 2 captures


def test_produce_to_consume_is_each_batch_to_the_first_fetch_response_carrying_it(
    report: dict, tables: dict
) -> None:
    p = tables["partitions"]
    place = ["capture", "topic", "partition"]
    batches = (
        p[(p.api_key == 0) & p.first_offset.notna() & p.ts_response.notna()]
        .groupby([*place, "first_offset"])
        .agg(ts_produce=("ts_request", "min"))
        .reset_index()
    )
    fetched = p[(p.api_key == 1) & p.first_offset.notna() & p.ts_response.notna()][
        [*place, "first_offset", "last_offset", "ts_response"]
    ].rename(columns={"first_offset": "f_first", "last_offset": "f_last"})
    both = batches.merge(fetched, on=place)
    both = both[(both.first_offset >= both.f_first) & (both.first_offset <= both.f_last)]
    seen = both.groupby([*place, "first_offset"]).agg(
        ts_produce=("ts_produce", "min"), ts_consume=("ts_response", "min")
    )
    seen = seen.reset_index().assign(e2e_ms=lambda f: ms_between(f.ts_consume, f.ts_produce))
    want = latency_rows(seen, ["topic"], "e2e_ms").rename(columns={"n": "batches"})
    columns = ["topic", "batches", "p50_ms", "p99_ms", "max_ms"]
    assert got(report, "produce_to_consume", columns) == rows(want, columns)


def expected_kind(error_code: int, api_key: int) -> str:
    """docs/report.md `errors`: the codes healthy clients meet in handshakes, on the APIs it names."""
    handshakes = {79: {11}, 27: {12, 14, 8}, 35: {18}, 70: {1}}
    if error_code in (14, 16) or api_key in handshakes.get(error_code, ()):
        return "expected"
    return "failure"


def test_errors_by_code_api_topic_and_client_with_their_kind_and_rate(report: dict, tables: dict) -> None:
    e = tables["errors"].copy()
    e["kind"] = [expected_kind(c, k) for c, k in zip(e.error_code, e.api_key, strict=True)]
    keys = ["kind", "error_name", "api_name", "topic", "client_id"]
    want = (
        groups_of(e, keys)
        .agg(errors=("error_code", "size"), partitions=("partition", "nunique"))
        .reset_index()
    )
    per_client = groups_of(tables["requests"], ["client_id"]).size().rename("client_requests").reset_index()
    want = want.merge(per_client, on="client_id", how="left")
    want["errors_per_request"] = want.errors / want.client_requests
    columns = [*keys, "errors", "partitions", "client_requests", "errors_per_request"]
    assert got(report, "errors", columns) == rows(want, columns)
    # Built: partition 1 refused in each of 3 requests, in each of 2 captures.
    assert [
        (r["kind"], r["errors"], r["partitions"], r["client_requests"])
        for r in report["errors"]
        if r["error_name"] == "NOT_LEADER_OR_FOLLOWER"
    ] == [("failure", 6, 1, 6)]
    assert {(r["kind"], r["error_name"]) for r in report["errors"]} >= {
        ("expected", "MEMBER_ID_REQUIRED"),
        ("failure", "UNKNOWN_PRODUCER_ID"),
    }


def test_long_polls_are_judged_against_their_own_wait(report: dict, tables: dict) -> None:
    keys = ["capture", "conn_id", "correlation_id"]
    r = tables["requests"]
    polls = r[r.api_key.isin(LONG_POLL_APIS) & r.latency_ms.notna()].merge(
        tables["groups"][[*keys, "rebalance_timeout_ms"]], on=keys, how="left"
    )
    # Every poll of these tables names its wait (no guess from empty polls is needed).
    assert (polls.max_wait_ms.notna() | polls.rebalance_timeout_ms.notna()).all()
    polls["wait_ms"] = polls.rebalance_timeout_ms.fillna(polls.max_wait_ms).astype(float)
    polls["wait_source"] = [
        "rebalance_timeout_ms" if pd.notna(t) else "max_wait_ms" for t in polls.rebalance_timeout_ms
    ]
    polls["over"] = polls.latency_ms > polls.wait_ms * 1.1 + 100
    polls["is_empty"] = polls.record_count == 0
    keys = ["api_name", "client_id", "wait_ms", "wait_source"]
    want = groups_of(polls, keys).agg(
        polls=("latency_ms", "size"),
        empty=("is_empty", "sum"),
        p50_ms=("latency_ms", lambda s: nearest_rank(s, 0.5)),
        max_ms=("latency_ms", "max"),
        over_wait=("over", "sum"),
    )
    columns = [*keys, "polls", "empty", "p50_ms", "max_ms", "over_wait"]
    assert got(report, "long_polls", columns) == rows(want.reset_index(), columns)


def classic_generations(groups: pd.DataFrame) -> pd.DataFrame:
    """Each JoinGroup that joined a generation, and each MEMBER_ID_REQUIRED attempt with the
    generation its member then joined (its next successful JoinGroup)."""
    member = ["capture", "group_id", "member_id"]
    joins = groups[groups.api_key == 11]
    joined = joins[joins.error_code == 0]
    attempts = joins[joins.error_code == 79]
    out = [joined.assign(generation=joined.generation_id)]
    for _, a in attempts.iterrows():
        later = joined[
            (joined[member] == a[member]).all(axis=1) & (joined.ts_request > a.ts_request)
        ].sort_values("ts_request")
        if len(later):
            out.append(a.to_frame().T.assign(generation=later.generation_id.iloc[0]))
    return pd.concat(out, ignore_index=True)


def syncs(groups: pd.DataFrame) -> pd.DataFrame:
    return groups[(groups.api_key == 14) & (groups.error_code == 0)].rename(
        columns={"generation_id": "generation"}
    )


def test_rebalances_run_from_the_first_join_to_the_last_sync_of_a_generation(
    report: dict, tables: dict
) -> None:
    g = tables["groups"]
    gen = ["capture", "group_id", "generation"]
    joins = classic_generations(g)
    starts = groups_of(joins, gen).agg(
        ts_start=("ts_request", "min"),
        members=("member_id", "nunique"),
        protocol_name=("protocol_name", lambda s: s[joins.loc[s.index, "error_code"] == 0].max()),
    )
    ends = groups_of(syncs(g), gen).agg(ts_end=("ts_response", "max"))
    want = starts.join(ends, how="left").reset_index()
    want["duration_ms"] = ms_between(want.ts_end, want.ts_start)
    columns = [
        "capture",
        "group_id",
        "generation",
        "members",
        "protocol_name",
        "ts_start",
        "ts_end",
        "duration_ms",
    ]
    assert got(report, "rebalances", columns) == rows(want, columns)
    # Built: the refused JoinGroup is no part of generation 5, which starts at the JoinGroup that
    # joined it (one member; once in each of the two captures).
    built = [r for r in report["rebalances"] if r["group_id"] == "built-group"]
    assert [(r["generation"], r["members"]) for r in built] == [(5, 1), (5, 1)]
    joins = tables["groups"][(tables["groups"].group_id == "built-group") & (tables["groups"].api_key == 11)]
    assert [r["ts_start"] for r in built] == sorted(py(t) for t in joins[joins.error_code == 0].ts_request)


def test_rebalance_members_wait_for_the_others_and_reach_their_sync(report: dict, tables: dict) -> None:
    g = tables["groups"]
    key = ["capture", "group_id", "generation", "member_id"]
    joins = classic_generations(g)
    joins["wait"] = [
        ms_between(pd.Series([r.ts_response]), pd.Series([r.ts_request])).iloc[0]
        if r.error_code == 0
        else None
        for r in joins.itertuples()
    ]
    member = groups_of(joins, key).agg(ts_join=("ts_request", "min"), join_wait_ms=("wait", "max"))
    synced = groups_of(syncs(g), key).agg(ts_sync=("ts_response", "min"))
    want = member.join(synced, how="left").reset_index()
    want["join_to_sync_ms"] = ms_between(want.ts_sync, want.ts_join)
    columns = [*key, "ts_join", "ts_sync", "join_wait_ms", "join_to_sync_ms"]
    assert got(report, "rebalance_members", columns) == rows(want, columns)


def test_upgrade_zookeeper_lists_each_sender_receiver_and_version(report: dict, tables: dict) -> None:
    r = tables["requests"].merge(tables["connections"], on=["capture", "conn_id"], suffixes=("", "_c"))
    zk = r[r.api_key.isin(ZOOKEEPER_APIS)].rename(
        columns={"client_ip_c": "sender_ip", "broker_ip": "receiver_ip", "broker_port": "receiver_port"}
    )
    keys = ["sender_ip", "client_id", "receiver_ip", "receiver_port", "api_key", "api_name", "api_version"]
    want = groups_of(zk, keys).agg(
        requests=("api_key", "size"), first_seen=("ts_request", "min"), last_seen=("ts_request", "max"),
        removed_in=("removed_in", "min"),
    )  # fmt: skip
    columns = [*keys, "requests", "first_seen", "last_seen", "removed_in"]
    assert got(report, "upgrade_zookeeper", columns) == rows(want.reset_index(), columns)
    # Built into each of the two captures: StopReplica twice, ControlledShutdown once.
    assert [(r["client_id"], r["api_name"], r["requests"]) for r in report["upgrade_zookeeper"]] == [
        ("broker-2", "ControlledShutdown", 2),
        ("controller-1", "StopReplica", 4),
    ]


def test_upgrade_lists_each_client_and_version_a_release_refuses(report: dict, tables: dict) -> None:
    keys3 = ["capture", "conn_id", "correlation_id"]
    p = tables["partitions"]
    formats = (
        p[p.removed_in.notna()].groupby(keys3).agg(format_removed_in=("removed_in", "min")).reset_index()
    )
    c = tables["connections"][
        ["capture", "conn_id", "client_ip", "client_software_name", "client_software_version"]
    ]
    r = (
        tables["requests"]
        .drop(columns=["client_ip"])
        .merge(formats, on=keys3, how="left")
        .merge(c, on=["capture", "conn_id"])
    )
    r["flag"] = r.removed_in.fillna(r.format_removed_in)
    r = r[r.flag.notna()]
    r["client_software"] = [
        None if pd.isna(n) else f"{n} {v}" if pd.notna(v) else n
        for n, v in zip(r.client_software_name, r.client_software_version, strict=True)
    ]
    keys = ["client_id", "client_ip", "client_software", "api_key", "api_name", "api_version"]
    want = groups_of(r, keys).agg(
        requests=("api_key", "size"), first_seen=("ts_request", "min"), last_seen=("ts_request", "max"),
        removed_in=("flag", "min"),
    )  # fmt: skip
    columns = [*keys, "requests", "first_seen", "last_seen", "removed_in"]
    assert got(report, "upgrade", columns) == rows(want.reset_index(), columns)
    # Built into each of the two captures: one DescribeConfigs v0.
    assert [(r["client_id"], r["api_name"], r["api_version"], r["requests"]) for r in report["upgrade"]][
        -1
    ] == (
        "throttled-admin",
        "DescribeConfigs",
        0,
        2,
    )


def test_the_timestamps_compared_are_utc_datetimes(report: dict) -> None:
    # The comparisons above hold datetimes, not strings that could match by accident.
    assert isinstance(report["rebalances"][0]["ts_start"], dt.datetime)
    assert report["rebalances"][0]["ts_start"].utcoffset() == dt.timedelta(0)
