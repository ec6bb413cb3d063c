"""The report's `findings` section, each rule on a scenario whose expectation comes from the scenario:
the repository's captures (tests/data/report/two_groups.pcap: a consumer killed after 10 of 40
records, whose clients' own record is two_groups.truth.json; legacy_msgset.pcap: kafka-python forced
to Kafka 0.9 and 0.10.1, i.e. Produce v1 and v2, whose message formats Kafka 4.0 refuses, KIP-724),
exchanges encoded here and sent over loopback (tests/test_report_oracles.py's throttled admin and
producer), a copy of a capture with one TCP segment taken out (a stream gap of its length), a
capture cut short, share-group heartbeats rebalancing five times in a minute
(tests/test_report_sections.py's built groups), and a built capture of a group committing half as
fast as its producer writes (its lag in seconds growing by a number the test computes from the times
it chose). On DuckDB and on Spark, the same sentences."""

from __future__ import annotations

import datetime as dt
import json
import re
import socket
import struct
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import dpkt
import duckdb
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from kafkawire import METADATA_V0_REQUEST, METADATA_V0_RESPONSE, Flow, write_pcap
from kafkawire import request as kafka_request
from kafkawire import response as kafka_response
from realparts import free_port, tcpdump_capture
from test_int64_edges import (
    batch,
    offset_commit_v2_request,
    offset_commit_v2_response,
    produce_v8_request,
    produce_v8_response,
)
from test_misrouted import captured  # noqa: F401 - a fixture: the misrouted clients, captured
from test_report_oracles import TIMEOUT_S, built_capture, received
from test_report_sections import built_groups_table

from kwsniff.cli import main
from kwsniff.sections.catalog import BY_NAME, SECTIONS
from kwsniff.sections.engines import DuckEngine, Filters, SparkEngine, to_spark
from kwsniff.sections.findings import RULE_ORDER, THRESHOLDS, number, parse_threshold, tenths
from kwsniff.sections.run import answer

ROOT = Path(__file__).resolve().parent.parent
LEGACY = ROOT / "tests/data/captures/legacy_msgset.pcap"
ACKS = ROOT / "tests/data/captures/acks_modes.pcap"
TWO_GROUPS = ROOT / "tests/data/report/two_groups.pcap"
TRUTH = json.loads((ROOT / "tests/data/report/two_groups.truth.json").read_text())
# The 12th TCP segment carrying data in acks_modes.pcap, taken out: a gap of its length.
GAP_SEGMENT = 12
CUT_AT = 20_000  # acks_modes.pcap's first bytes, its last record cut short


def segment_removed(src: Path, dst: Path, nth: int) -> int:
    """``src`` without its ``nth`` TCP segment carrying data; the segment's payload length."""
    with src.open("rb") as f:
        reader = dpkt.pcap.Reader(f)
        link, packets = reader.datalink(), list(reader)
    removed, seen, kept = 0, 0, []
    for ts, buf in packets:
        ip = dpkt.ethernet.Ethernet(buf).data
        if not removed and isinstance(ip, dpkt.ip.IP) and isinstance(ip.data, dpkt.tcp.TCP) and ip.data.data:
            seen += 1
            if seen == nth:
                removed = len(ip.data.data)
                continue
        kept.append((ts, buf))
    with dst.open("wb") as f:
        writer = dpkt.pcap.Writer(f, linktype=link)
        for ts, buf in kept:
            writer.writepkt(buf, ts)
    return removed


def cut_record_offset(data: bytes, size: int) -> int:
    """The file offset of the pcap record that the first ``size`` bytes of ``data`` cut short."""
    offset = 24
    while True:
        (length,) = struct.unpack_from("<I", data, offset + 8)
        if offset + 16 + length > size:
            return offset
        offset += 16 + length


def acked(offset: int) -> float:
    """When the producer's delivery callback saw ``offset`` acknowledged (the clients' record)."""
    return float(TRUTH["producer_acks"]["times"][str(offset)])


def last_packet(path: Path) -> float:
    with path.open("rb") as f:
        return max(float(ts) for ts, _ in dpkt.pcap.Reader(f))


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    stage = tmp_path_factory.mktemp("findings")
    gap = segment_removed(ACKS, stage / "gap.pcap", GAP_SEGMENT)
    data = ACKS.read_bytes()
    (stage / "cut.pcap").write_bytes(data[:CUT_AT])
    built = built_capture(stage / "built.pcap", free_port())
    out = tmp_path_factory.mktemp("tables")
    inputs = [LEGACY, TWO_GROUPS, built, stage / "gap.pcap", stage / "cut.pcap"]
    done = CliRunner().invoke(
        main, ["read", "-q", *map(str, inputs), "--out", str(out), "--overwrite", "--summaries", "never"]
    )
    assert done.exit_code == 0, done.output
    pq.write_table(built_groups_table(), out / "groups" / "kip848-built.parquet")
    return {"out": out, "gap": gap, "cut_at": cut_record_offset(data, CUT_AT)}


def findings(
    out: Path, engine: str, request: pytest.FixtureRequest, filters: Filters | None = None
) -> list[dict]:
    filters = filters or Filters()
    if engine == "spark":
        spark = SparkEngine(out, filters, request.getfixturevalue("spark"))
        try:
            return answer(spark, filters, [BY_NAME["findings"]])["findings"]
        finally:
            spark.close()
    with DuckEngine(out, filters) as duck:
        return answer(duck, filters, [BY_NAME["findings"]])["findings"]


def answered(out: Path) -> dict[str, list[dict]]:
    """Every section of the report over ``out`` on DuckDB (the findings among them)."""
    with DuckEngine(out, Filters()) as duck:
        return answer(duck, Filters())


def by_rule(rows: list[dict]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in rows:
        out.setdefault(r["rule"], []).append(r["finding"])
    return out


def stopped_sentence(out: Path) -> str:
    """g-stopped, from the clients' own record: killed after committing 10 of the 40 records
    produced; at the capture's end (its last packet) the first record it lacks, offset 10, is as old
    as the end minus the producer's acknowledgement of it."""
    acks = TRUTH["producer_acks"]["times"]
    committed = 10
    behind = len(acks) - committed
    seconds = round(last_packet(TWO_GROUPS) - acked(committed))
    return f"{behind} records and {seconds} s behind on topic `report-lag` (1 partition)"


@pytest.mark.parametrize("engine", ["duckdb", "spark"])
def test_findings_name_each_rules_subjects_with_the_scenarios_numbers(
    scenario: dict, engine: str, request: pytest.FixtureRequest
) -> None:
    rows = findings(scenario["out"], engine, request)
    assert [r["rule"] for r in rows] == [r["rule"] for r in answered(scenario["out"])["findings"]]
    rules = by_rule(rows)
    # Ranked: 1, 2, 3... with the rules in the order of their harm.
    assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    assert [r["rule"] for r in rows] == sorted(
        (r["rule"] for r in rows),
        key=[
            "stopped_group",
            "lag_growing",
            "client_errors",
            "throttled",
            "broker_p99",
            "misrouted",
            "kafka4_refuses",
            "rebalance_storm",
            "damaged_capture",
            "dropped_packets",
            "stream_gaps",
            "decode_errors",
            "unnamed_topic_ids",
        ].index,
    )
    # The killed consumer: silent past its 6 s session timeout (its JoinGroup's), 30 records behind.
    (stopped,) = rules["stopped_group"]
    assert re.fullmatch(r"group `g-stopped` stopped (\d+) s ago \(session timeout 6 s\), (.*)", stopped)
    assert int(stopped.split(" stopped ")[1].split(" s ago")[0]) > 6
    assert stopped.endswith(stopped_sentence(scenario["out"]))
    assert rows[0]["severity"] == "critical"
    assert (rows[0]["shown_in"], rows[0]["group_id"], rows[0]["topic"]) == (
        "stopped",
        "g-stopped",
        "report-lag",
    )
    # g-active caught up by the capture's end (it committed all 40): its lag is not growing then.
    assert "lag_growing" not in rules
    # The built producer: each of its 3 Produce requests had partition 1 refused (NOT_LEADER_OR_FOLLOWER).
    assert (
        "client `throttled-producer` got 3 failed responses in 3 requests (100%), most NOT_LEADER_OR_FOLLOWER"
        " on Produce"
    ) in rules["client_errors"]
    # The built member's COORDINATOR_LOAD_IN_PROGRESS is a code healthy clients meet: no finding.
    assert not any("built-consumer" in f for f in rules["client_errors"])
    # The legacy producers each failed once (the workload's UnknownProducerIdError).
    for client in ("rig-legacy-producer-m0", "rig-legacy-producer-m1"):
        (line,) = [f for f in rules["client_errors"] if f"`{client}`" in f]
        found = re.fullmatch(
            rf"client `{client}` got 1 failed response in (\d+) requests \((\d+)%\), most UNKNOWN_PRODUCER_ID on Produce",
            line,
        )
        assert found and int(found[2]) == round(100 / int(found[1]))
    # The built admin: throttled 250 ms then 40 ms; the producer 0, 100 and 300 ms.
    assert rules["throttled"] == [
        "client `throttled-producer` was throttled on 2 requests, 400 ms in all (at most 300 ms)",
        "client `throttled-admin` was throttled on 2 requests, 290 ms in all (at most 250 ms)",
    ]
    # Kafka 0.9's Produce v1 (magic 0) and 0.10.1's v2 (magic 1), the admin's DescribeConfigs v0,
    # and the ZooKeeper-era requests built: two StopReplica v0, one ControlledShutdown v1.
    assert sorted(rules["kafka4_refuses"]) == [
        "client `broker-2` sends ControlledShutdown v1, which Kafka 4.0 refuses (1 request)",
        "client `controller-1` sends StopReplica v0, which Kafka 4.0 refuses (2 requests)",
        "client `rig-legacy-consumer` sends Fetch v3, which Kafka 4.0 refuses (1 request)",
        "client `rig-legacy-producer-m0` sends Produce v1, which Kafka 4.0 refuses (1 request)",
        "client `rig-legacy-producer-m1` sends Produce v2, which Kafka 4.0 refuses (1 request)",
        "client `throttled-admin` sends DescribeConfigs v0, which Kafka 4.0 refuses (1 request)",
    ]
    # Share group s1: five assignments within one minute (more than 3 is a storm).
    assert rules["rebalance_storm"] == ["group `s1` rebalanced 5 times in one minute (1 such minute)"]
    assert rules["damaged_capture"] == [
        f"capture `cut.pcap` is damaged: last record cut short at offset {scenario['cut_at']}"
    ]
    assert rules["stream_gaps"] == [
        f"capture `gap.pcap` missed {scenario['gap']} bytes in 1 stream gap on 1 connection: their rows are incomplete"
    ]
    assert set(rules) == {
        "stopped_group",
        "client_errors",
        "throttled",
        "kafka4_refuses",
        "rebalance_storm",
        "damaged_capture",
        "stream_gaps",
    }


def test_findings_equal_on_duckdb_and_spark_in_a_window_with_thresholds_given(
    scenario: dict, request: pytest.FixtureRequest
) -> None:
    # At 07:05:50 g-active had committed 27 of the 40 records produced: 4 s behind and growing.
    filters = Filters(
        until=dt.datetime(2026, 11, 28, 7, 5, 50, tzinfo=dt.UTC),
        finding_thresholds=(("lag_growth_seconds", 1.0),),
    )
    duck = findings(scenario["out"], "duckdb", request, filters)
    assert findings(scenario["out"], "spark", request, filters) == duck
    rules = by_rule(duck)
    # The clients' own record: the last commit before 07:05:50 and the acknowledgement of its offset.
    end = filters.until.timestamp()  # type: ignore[union-attr]
    _, offset = max((t, o) for t, o in TRUTH["g_active_commits"]["commits"] if t < end)
    lag = end - acked(offset)
    assert 0.2 < lag % 1 < 0.8, "the scenario's lag is far from a rounding boundary"
    (active,) = [f for f in rules["lag_growing"] if "g-active" in f]
    grew = re.fullmatch(
        rf"group `g-active` falls behind on topic `report-lag`: its lag grew by (\d+) s to {round(lag)} s at the end \(1 partition\)",
        active,
    )
    # Its lowest lag, in its first second of commits, was under one second (a record every 0.1 s).
    assert grew and int(grew[1]) in (round(lag) - 1, round(lag))
    # The built capture, made today, is outside the window: nothing of it is found.
    assert "throttled" not in rules


def test_a_threshold_given_keeps_only_what_passes_it(scenario: dict, request: pytest.FixtureRequest) -> None:
    filters = Filters(finding_thresholds=(("throttle_ms", 300.0), ("error_rate", 0.3)))
    rules = by_rule(findings(scenario["out"], "duckdb", request, filters))
    # throttle_ms=300: the admin's 290 ms in all is under it, the producer's 400 ms is not.
    assert rules["throttled"] == [
        "client `throttled-producer` was throttled on 2 requests, 400 ms in all (at most 300 ms)"
    ]
    # error_rate=0.3: the producer that failed 1 of its 4 requests is under it.
    assert not any("rig-legacy-producer-m1" in f for f in rules["client_errors"])
    assert any("rig-legacy-producer-m0" in f for f in rules["client_errors"])


def test_findings_come_first_in_every_format(scenario: dict, tmp_path: Path) -> None:
    assert SECTIONS[0].name == "findings"
    out = str(scenario["out"])
    text = CliRunner().invoke(main, ["report", out, "--section", "findings", "--section", "stopped"])
    assert text.exit_code == 0, text.output
    assert text.output.lstrip().startswith("Findings: what is wrong, the worst first (")
    as_json = CliRunner().invoke(
        main, ["report", out, "--format", "json", "--section", "stopped", "--section", "findings"]
    )
    assert list(json.loads(as_json.output)) == ["findings", "stopped"]
    as_csv = CliRunner().invoke(
        main, ["report", out, "--format", "csv", "--section", "stopped", "--section", "findings"]
    )
    assert as_csv.output.splitlines()[0] == (
        "section,rank,severity,finding,shown_in,rule,capture,group_id,topic,client_id,broker"
    )
    page = tmp_path / "report.html"
    html = CliRunner().invoke(
        main, ["report", out, "--section", "stopped", "--section", "findings", "--html", str(page)]
    )
    assert html.exit_code == 0, html.output
    body = page.read_text()
    assert body.index('<h2 id="findings">') < body.index('<h2 id="stopped">')


SLOW_S = 0.2  # the slow broker's wait before each answer
METADATA_REQUESTS = 12


def two_brokers(path: Path) -> tuple[Path, int]:
    """Two brokers on one port of two loopback addresses, each asked METADATA_REQUESTS Metadata v0
    on one connection; the one on 127.0.0.2 waits SLOW_S before each answer. Captured by tcpdump."""
    port = free_port()
    listeners = [socket.create_server((host, port)) for host in ("127.0.0.1", "127.0.0.2")]

    def serve(listener: socket.socket, wait_s: float) -> None:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(TIMEOUT_S)
            for corr in range(METADATA_REQUESTS):
                req = kafka_request(3, 0, corr, METADATA_V0_REQUEST, client_id="asker")
                assert received(conn, len(req)) == req
                if wait_s:
                    threading.Event().wait(wait_s)  # the scenario: a broker slow to answer
                conn.sendall(kafka_response(corr, METADATA_V0_RESPONSE))
            assert conn.recv(1) == b""

    with tcpdump_capture(path, port):
        servers = [
            threading.Thread(target=serve, args=(listener, wait), daemon=True)
            for listener, wait in zip(listeners, (0.0, SLOW_S), strict=True)
        ]
        for server in servers:
            server.start()
        for host in ("127.0.0.1", "127.0.0.2"):
            with socket.create_connection((host, port), timeout=TIMEOUT_S) as client:
                for corr in range(METADATA_REQUESTS):
                    client.sendall(kafka_request(3, 0, corr, METADATA_V0_REQUEST, client_id="asker"))
                    answer_ = kafka_response(corr, METADATA_V0_RESPONSE)
                    assert received(client, len(answer_)) == answer_
        for server in servers:
            server.join(TIMEOUT_S)
            assert not server.is_alive()
    for listener in listeners:
        listener.close()
    return path, port


@pytest.mark.parametrize("engine", ["duckdb", "spark"])
def test_a_broker_slow_to_answer_stands_out_from_its_peer(
    engine: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> None:
    stage = tmp_path_factory.mktemp("slow")
    pcap, port = two_brokers(stage / "slow.pcap")
    out = stage / "tables"
    done = CliRunner().invoke(main, ["read", "-q", str(pcap), "--out", str(out), "--summaries", "never"])
    assert done.exit_code == 0, done.output
    rules = by_rule(findings(out, engine, request))
    (slow,) = rules["broker_p99"]
    found = re.fullmatch(
        rf"broker 127\.0\.0\.2:{port} answers Metadata in ([\d,.]+) ms at p99 \({METADATA_REQUESTS} requests\),"
        r" against at most ([\d.]+) ms on 1 other broker",
        slow,
    )
    assert found, slow
    # Its every answer waited SLOW_S; the other broker's did not (a third of it is the threshold).
    assert float(found[1].replace(",", "")) >= SLOW_S * 1000
    assert float(found[2]) * 3 <= float(found[1].replace(",", ""))


@pytest.mark.parametrize("engine", ["duckdb", "spark"])
def test_each_misrouted_client_is_a_finding(
    captured: tuple[Path, list[tuple[Any, ...]]],  # noqa: F811 - the fixture imported
    engine: str,
    request: pytest.FixtureRequest,
) -> None:
    """tests/test_misrouted.py's clients, each naming a cluster or node that differs from what the
    broker it reached reported: one finding per client, broker and mismatch."""
    out, expected = captured
    per = Counter(
        (cid, ip, f"{bip}:{bport}", mismatch, cluster, reported_cluster, node, reported_node)
        for cid, ip, _, _, _, bip, bport, mismatch, cluster, reported_cluster, node, reported_node in expected
    )
    want = []
    for (cid, ip, broker, mismatch, cluster, reported_cluster, node, reported_node), n in per.items():
        meant = [f"cluster `{cluster}`"] if mismatch.startswith("cluster") else []
        reached = [f"cluster `{reported_cluster}`"] if mismatch.startswith("cluster") else []
        if mismatch.endswith("node"):
            meant.append(f"node {node}")
            reached.append(f"node {reported_node}")
        connections = "1 connection" if n == 1 else f"{n} connections"
        want.append(
            f"client `{cid}` at {ip} meant {' and '.join(meant)} but reached {' and '.join(reached)}"
            f" at {broker} ({connections})"
        )
    assert sorted(by_rule(findings(out, engine, request))["misrouted"]) == sorted(want)


def test_member_lag_says_it_measures_from_the_last_fetch(scenario: dict) -> None:
    # g-stopped's consumer last fetched past offset 10 (a consumer fetches what it will commit later),
    # while its group committed 10: member_lag's position is the fetch's, and says so.
    rows = answered(scenario["out"])
    members = [r for r in rows["member_lag"] if r["group_id"] == "g-stopped"]
    assert members and {r["measured_from"] for r in members} == {"last_fetch"}
    (group,) = [r for r in rows["stopped"] if r["group_id"] == "g-stopped"]
    assert group["committed_offset"] == 10
    assert all(r["position"] >= group["committed_offset"] for r in members)


@pytest.mark.parametrize("engine", ["duckdb", "spark"])
def test_numbers_in_findings_are_whole_and_grouped_by_thousands(
    engine: str, request: pytest.FixtureRequest
) -> None:
    values = [0, 0.4, 0.6, 999, 1000, 11164.2, 1234567, -2500, 123456789012345]
    sql = "SELECT " + ", ".join(f"{number(repr(float(v)))} AS n{i}" for i, v in enumerate(values))
    sql += f", {tenths('1234.56')} AS t"
    if engine == "spark":
        got = request.getfixturevalue("spark").sql(to_spark(sql)).collect()[0].asDict()
    else:
        got = dict(
            zip([f"n{i}" for i in range(len(values))] + ["t"], duckdb.sql(sql).fetchall()[0], strict=True)
        )
    assert got == {
        **{
            f"n{i}": text
            for i, text in enumerate(
                ["0", "0", "1", "999", "1,000", "11,164", "1,234,567", "-2,500", "123,456,789,012,345"]
            )
        },
        "t": "1,234.6",
    }


def test_docs_list_every_rule_and_threshold_with_its_default() -> None:
    docs = (ROOT / "docs/report.md").read_text()
    for name, threshold in THRESHOLDS.items():
        assert f"| `{name}` | {threshold.default:g} |" in docs, name
    for rule in RULE_ORDER:
        assert f"| `{rule}` | " in docs, rule


def test_finding_thresholds_are_named_and_checked() -> None:
    assert parse_threshold("error_rate=0.5") == ("error_rate", 0.5)
    for bad in ("nope=1", "error_rate", "error_rate=x", "error_rate=-1", "error_rate=inf"):
        with pytest.raises(ValueError):
            parse_threshold(bad)
    done = CliRunner().invoke(main, ["report", "/nonexistent", "--finding-threshold", "nope=1"])
    assert done.exit_code == 2
    assert "'nope=1': expected NAME=VALUE, NAME one of " + ", ".join(THRESHOLDS) in done.output


# -- lag in seconds growing ---------------------------------------------------------------------------
T0_US = 1_700_000_000_000_000
SECONDS = 80  # the producer's and the groups' seconds
PER_SECOND = 10  # records produced a second, in one batch
ACK_US = 10_000  # each Produce acknowledged 10 ms after it was sent
SLOW_AT_US, FAST_AT_US = 300_000, 600_000  # when in each second the groups commit


def at(flow: Flow, us: int, direction: int, data: bytes) -> None:
    """``data`` sent by one side of ``flow`` at T0 + ``us``."""
    flow.ts = T0_US + us - 1
    flow.send(direction, data, mss=60_000, dt=1)


def growing_lag(path: Path) -> tuple[Path, dict[int, int], int]:
    """A producer writing PER_SECOND records of `orders` partition 0 in one batch at the start of
    every second, each acknowledged ACK_US later; group `slow-group` commits 5 more records every
    second (at 0.3 s), half the rate; `fast-group` commits all produced (at 0.6 s). Both
    keep committing to the end. Returns the capture, each batch's base offset -> its acknowledgement
    time (µs), and the capture's last packet time (µs)."""
    producer = Flow(client=(bytes([10, 0, 0, 1]), 40000))
    slow = Flow(client=(bytes([10, 0, 0, 3]), 40001), isn_c=2000)
    fast = Flow(client=(bytes([10, 0, 0, 4]), 40002), isn_c=3000)
    for flow in (producer, slow, fast):
        flow.ts = T0_US - 1_000_000
        flow.handshake()
    acks = {}
    for k in range(SECONDS):
        second, base = k * 1_000_000, PER_SECOND * k
        produce = produce_v8_request("orders", [(0, batch(0, PER_SECOND))])
        at(producer, second, 0, kafka_request(0, 8, k, produce, client_id="orders-producer"))
        at(producer, second + ACK_US, 1, kafka_response(k, produce_v8_response("orders", [(0, base, 0)])))
        acks[base] = T0_US + second + ACK_US
        for flow, group, when, offset in (
            (slow, "slow-group", SLOW_AT_US, 5 * (k + 1)),
            (fast, "fast-group", FAST_AT_US, PER_SECOND * (k + 1)),
        ):
            commit = offset_commit_v2_request(group, "orders", 0, offset)
            at(flow, second + when, 0, kafka_request(8, 2, k, commit, client_id=group))
            at(flow, second + when + 1_000, 1, kafka_response(k, offset_commit_v2_response("orders", 0)))
    for flow in (producer, slow, fast):
        flow.close()
    packets = sorted(producer.packets + slow.packets + fast.packets)
    return write_pcap(path, packets), acks, packets[-1][0]


@pytest.mark.parametrize("engine", ["duckdb", "spark"])
def test_a_group_committing_slower_than_its_producer_has_a_growing_lag(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    pcap, acks, end_us = growing_lag(tmp_path / "growing.pcap")
    out = tmp_path / "tables"
    done = CliRunner().invoke(main, ["read", "-q", str(pcap), "--out", str(out), "--summaries", "never"])
    assert done.exit_code == 0, done.output
    rows = findings(out, engine, request)
    rules = by_rule(rows)
    # slow-group's last commit, offset 5 * SECONDS, is the first record of the batch produced in
    # second SECONDS / 2: at the capture's end its lag is the end minus that batch's acknowledgement.
    last = 5 * SECONDS
    end_lag = (end_us - acks[last]) / 1e6
    # Its lowest: its first commit (offset 5, of the first batch), alone in its second (the ack before
    # it has no commit to measure); every later second has the moment before its commit, at least 1 s.
    lowest = (SLOW_AT_US - ACK_US) / 1e6
    assert 0.2 < end_lag % 1 < 0.8 and 0.2 < (end_lag - lowest) % 1 < 0.8, "far from a rounding boundary"
    assert rules["lag_growing"] == [
        f"group `slow-group` falls behind on topic `orders`: its lag grew by {round(end_lag - lowest)} s"
        f" to {round(end_lag)} s at the end (1 partition)"
    ]
    (row,) = [r for r in rows if r["rule"] == "lag_growing"]
    assert (row["severity"], row["shown_in"], row["capture"], row["group_id"], row["topic"]) == (
        "warning",
        "lag",
        "growing.pcap",
        "slow-group",
        "orders",
    )
    # Still committing at the end (active), so not a stopped group; fast-group kept up: no finding.
    assert "stopped_group" not in rules
    if engine == "spark":
        return  # the threshold's binding is the engines' one text (findings.bind)
    # Its growth under a threshold above it: nothing.
    above = Filters(finding_thresholds=(("lag_growth_seconds", float(round(end_lag - lowest) + 1)),))
    assert "lag_growing" not in by_rule(findings(out, engine, request, above))
