"""`kwsniff report` against what real clients saw: tansu, one confluent-kafka producer and four
consumer groups: one stays to the end, one is killed mid-test (a crashed consumer: no LeaveGroup),
one leaves with close() (LeaveGroup), one never commits. Lag in seconds is checked against the
producer's acknowledgement times and the consumers' commit times, each group's state against what
the test did to its consumer, time windows against the same records, the inventory against the
clients started here, and the HTML page rendered in headless Chromium. A live capture (`kwsniff
capture`) stopped a while after a consumer was killed counts that consumer silent until the stop."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from click.testing import CliRunner
from realparts import create_topics, start_broker, stop_process, tcpdump_capture

from kwsniff.cli import main

TOPIC = "report-lag"
RECORDS = 40
PRODUCE_EVERY_S = 0.1
KILL_AFTER = 10  # records the stopped consumer commits before it is killed
LEAVE_AFTER = 5  # records the leaving consumer commits before it closes
VALUE = b"v" * 100

# A consumer that commits each record it handles (the next offset), saying when and which, then
# (mode `leave`) closes after `total` records: a LeaveGroup; or (mode `crash`) kills itself after
# `total` records (SIGKILL: no LeaveGroup, no last commit), saying when first; or (mode `stay`) keeps
# polling until it is stopped; mode `nocommit` polls and never commits. Each poll that returned a
# record is printed. A consumer killed from outside could commit one more record than the test saw.
CONSUMER = """
import os, signal, sys, time
from confluent_kafka import Consumer, TopicPartition
bootstrap, topic, group, client, delay, total, mode = sys.argv[1:8]
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client,
              "auto.offset.reset": "earliest", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
              "enable.auto.commit": False, "fetch.wait.max.ms": 100})
c.subscribe([topic], on_assign=lambda cons, parts: print("assigned", flush=True))
deadline, done = time.time() + 120, 0
while time.time() < deadline and not (mode == "leave" and done >= int(total)):
    if mode == "crash" and done >= int(total):
        print("crashing", time.time(), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    m = c.poll(0.1)
    if m is None or m.error():
        continue
    print("polled", m.offset(), time.time(), flush=True)
    if mode == "nocommit" or done >= int(total):
        continue
    time.sleep(float(delay))
    t = time.time()
    c.commit(offsets=[TopicPartition(topic, m.partition(), m.offset() + 1)], asynchronous=False)
    print("committed", m.offset() + 1, t, flush=True)
    done += 1
c.close()
print("closed", time.time(), flush=True)
"""


class Consumer:
    """A consumer process whose printed commits are collected as (time, next offset), and the time
    of each poll that returned a record."""

    def __init__(
        self, bootstrap: str, group: str, client: str, delay: float, mode: str = "stay", total: int = RECORDS
    ) -> None:
        args = [sys.executable, "-c", CONSUMER, bootstrap, TOPIC, group, client, str(delay), str(total), mode]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        self.commits: list[tuple[float, int]] = []
        self.polls: list[tuple[float, int]] = []
        self.closed: float | None = None
        self.crashing: float | None = None
        self.assigned = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            words = line.split()
            if words[:1] == ["assigned"]:
                self.assigned.set()
            elif words[:1] == ["committed"]:
                self.commits.append((float(words[2]), int(words[1])))
            elif words[:1] == ["polled"]:
                self.polls.append((float(words[2]), int(words[1])))
            elif words[:1] == ["closed"]:
                self.closed = float(words[1])
            elif words[:1] == ["crashing"]:
                self.crashing = float(words[1])


def wait_for(condition: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def traffic(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from confluent_kafka import Producer

    tmp = tmp_path_factory.mktemp("report-live")
    pcap = tmp / "lag.pcap"
    acks: dict[int, float] = {}
    with start_broker() as broker, tcpdump_capture(pcap, broker.port):
        create_topics(broker.bootstrap, {TOPIC: 1})
        active = Consumer(broker.bootstrap, "g-active", "lag-active", 0.25)
        stopped = Consumer(broker.bootstrap, "g-stopped", "lag-stopped", 0.0, "crash", KILL_AFTER)
        left = Consumer(broker.bootstrap, "g-left", "lag-left", 0.0, "leave", LEAVE_AFTER)
        audit = Consumer(broker.bootstrap, "g-audit", "lag-audit", 0.0, "nocommit")
        consumers = (active, stopped, left, audit)
        try:
            for c in consumers:
                assert c.assigned.wait(30), "consumer never assigned"
            producer = Producer(
                {"bootstrap.servers": broker.bootstrap, "client.id": "lag-producer", "linger.ms": 0}
            )
            for _ in range(RECORDS):

                def acked(err: Any, msg: Any) -> None:
                    assert err is None
                    acks[msg.offset()] = time.time()

                producer.produce(TOPIC, value=VALUE, on_delivery=acked)
                producer.flush(10)
                time.sleep(PRODUCE_EVERY_S)
            producer = None  # closes its connections while the broker is still up
            # The stopped consumer killed itself after its KILL_AFTER commits (a crash).
            assert stopped.proc.wait(30) == -signal.SIGKILL
            stopped.reader.join(5)
            killed_at = stopped.crashing
            assert killed_at is not None and stopped.commits[-1][1] == KILL_AFTER
            wait_for(lambda: active.commits and active.commits[-1][1] == RECORDS, 30)
            wait_for(lambda: len(audit.polls) == RECORDS, 30)
            assert left.proc.wait(30) == 0 and left.closed is not None
            # Silent past its 6 s session timeout by the end of the capture.
            wait_for(lambda: time.time() - killed_at > 7.5, 10)
        finally:
            # SIGTERM ends them at once, without a LeaveGroup: the staying ones are active at the end.
            for c in consumers:
                stop_process(c.proc)
                c.reader.join(5)
    out = tmp / "tables"
    done = CliRunner().invoke(main, ["read", "-q", str(pcap), "--out", str(out)])
    assert done.exit_code == 0, done.output
    # The consumers' session.timeout.ms, for tables whose groups rows do not carry it.
    report = CliRunner().invoke(
        main, ["report", str(out), "--format", "json", "--session-timeout-ms", "6000"]
    )
    assert report.exit_code == 0, report.output
    return {
        "out": out,
        "tmp": tmp,
        "acks": acks,
        "active": active.commits,
        "stopped": stopped.commits,
        "left": left.commits,
        "left_closed": left.closed,
        "audit_polls": audit.polls,
        "killed_at": killed_at,
        "report": json.loads(report.stdout),
    }


def test_inventory_is_the_clients_this_test_started(traffic: dict) -> None:
    rows = traffic["report"]["inventory"]
    assert {(r["client_id"], r["client_ip"], r["role"], r["topic"], r["group_id"]) for r in rows} == {
        ("kwsniff-admin", "127.0.0.1", "admin", None, None),
        ("lag-producer", "127.0.0.1", "producer", TOPIC, None),
        ("lag-active", "127.0.0.1", "consumer", TOPIC, "g-active"),
        ("lag-stopped", "127.0.0.1", "consumer", TOPIC, "g-stopped"),
        ("lag-left", "127.0.0.1", "consumer", TOPIC, "g-left"),
        ("lag-audit", "127.0.0.1", "consumer", TOPIC, "g-audit"),
    }
    by_client = {r["client_id"]: r for r in rows}
    assert by_client["lag-producer"]["records"] == RECORDS
    # The active consumer fetched every record once, in the batches the producer sent.
    assert (by_client["lag-active"]["records"], by_client["lag-active"]["bytes"]) == (
        RECORDS,
        by_client["lag-producer"]["bytes"],
    )
    assert by_client["lag-stopped"]["records"] >= KILL_AFTER


# How far the clients' clocks may read from the capture's: a commit's time is read just before the
# commit is sent, an acknowledgement's in the delivery callback after the response came; both make
# the clients' lag a little smaller than the wire's, by milliseconds unless the machine is loaded.
CLOCK_SKEW_S = 0.1


def lag_bounds(acks: dict[int, float], commits: list[tuple[float, int]]) -> tuple[float, float]:
    """The group's worst lag in seconds from the clients' own clocks, as the report may find it.
    Lag at t is t minus the acknowledgement time of the first offset not yet committed: it grows
    with t between events and drops at a commit. The report samples it at commits and at every
    watermark it sees, Fetch responses included (which come at any moment between two commits):
    its worst is at least the worst at the acknowledgements and commits (low) and at most the worst
    just before each commit or acknowledgement, where each rise ends (high)."""
    events = sorted([(t, "ack", o) for o, t in acks.items()] + [(t, "commit", c) for t, c in commits])
    committed, hwm, low, high = None, 0, 0.0, 0.0
    for t, kind, value in events:
        if committed is not None and committed < hwm:
            high = max(high, t - acks[committed])  # the rise up to this event, before it applies
        if kind == "ack":
            hwm = max(hwm, value + 1)
        else:
            committed = value
        if committed is not None and committed < hwm:
            low = max(low, t - acks[committed])
    return low, max(high, low)


def test_lag_in_seconds_matches_what_the_clients_saw(traffic: dict) -> None:
    lag = [r for r in traffic["report"]["lag"] if r["group_id"] == "g-active"]
    worst = max(r["lag_seconds"] for r in lag)
    # The slow consumer (0.25 s a record against one produced every 0.1 s) falls seconds behind.
    assert worst > 2.0
    low, high = lag_bounds(traffic["acks"], traffic["active"])
    assert low - CLOCK_SKEW_S < worst < high + CLOCK_SKEW_S, (low, worst, high)
    assert {r["lag_source"] for r in lag} <= {"produce_ack", "caught_up"}


def test_a_killed_consumer_shows_as_stopped_with_growing_lag(traffic: dict) -> None:
    stopped = {r["group_id"]: r for r in traffic["report"]["stopped"]}
    dead, alive = stopped["g-stopped"], stopped["g-active"]
    last = traffic["stopped"][-1][1]
    assert (dead["state"], dead["committed_offset"], dead["high_watermark"], dead["offset_lag"]) == (
        "stopped",
        last,
        RECORDS,
        RECORDS - last,
    )
    end = dt_seconds(dead["capture_end"])
    assert abs(dead["lag_seconds"] - (end - traffic["acks"][last])) < 0.25
    assert dead["silent_seconds"] > 6.0 and dead["session_timeout_ms"] == 6000
    assert (alive["state"], alive["offset_lag"], alive["lag_seconds"]) == ("active", 0, 0.0)
    after_kill = [
        r["lag_seconds"]
        for r in traffic["report"]["lag"]
        if r["group_id"] == "g-stopped" and dt_seconds(r["second"]) > traffic["killed_at"]
    ]
    assert len(after_kill) >= 3 and after_kill == sorted(after_kill) and after_kill[-1] > after_kill[0] + 1


def test_member_lag_names_each_member_and_its_last_fetch_against_the_producers_acks(traffic: dict) -> None:
    rows = {r["group_id"]: r for r in traffic["report"]["member_lag"]}
    assert {(g, r["client_id"], r["client_ip"], r["topic"], r["partition"]) for g, r in rows.items()} == {
        ("g-active", "lag-active", "127.0.0.1", TOPIC, 0),
        ("g-stopped", "lag-stopped", "127.0.0.1", TOPIC, 0),
        ("g-left", "lag-left", "127.0.0.1", TOPIC, 0),
        ("g-audit", "lag-audit", "127.0.0.1", TOPIC, 0),
    }
    assert len(traffic["report"]["member_lag"]) == 4 and all(r["member_id"] for r in rows.values())
    alive, dead = rows["g-active"], rows["g-stopped"]
    # The active member read everything: its last Fetch asked for the offset after the last record.
    assert (alive["position"], alive["high_watermark"], alive["offset_lag"], alive["lag_seconds"]) == (
        RECORDS,
        RECORDS,
        0,
        0.0,
    )
    # The killed member's last Fetch was asked before the kill (a Fetch then in flight is answered
    # when its fetch.wait.max.ms of 100 ms ends: 1 s allows a loaded broker), at or past what it
    # committed, and its seconds behind are that Fetch's time minus the producer's acknowledgement
    # of its position.
    assert dt_seconds(dead["last_fetch"]) < traffic["killed_at"] + 1.0
    assert traffic["stopped"][-1][1] <= dead["position"] <= dead["high_watermark"] < RECORDS
    assert dead["offset_lag"] == dead["high_watermark"] - dead["position"]
    if dead["offset_lag"]:
        behind = dt_seconds(dead["last_fetch"]) - traffic["acks"][dead["position"]]
        assert abs(dead["lag_seconds"] - behind) < 0.25
    else:
        assert dead["lag_seconds"] == 0.0


def dt_seconds(iso: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def test_the_html_report_shows_its_plots_in_chromium(traffic: dict) -> None:
    import matplotlib.image as mpimg

    html = traffic["tmp"] / "report.html"
    args = ["report", str(traffic["out"]), "--html", str(html), "--session-timeout-ms", "6000"]
    done = CliRunner().invoke(main, args)
    assert done.exit_code == 0, done.output
    page = html.read_text()
    assert "http://" not in page and "https://" not in page and page.count("data:image/png;base64,") == 4
    shot = traffic["tmp"] / "report.png"
    chromium = shutil.which("chromium")
    assert chromium, "chromium missing: tools/install-test-deps.sh installs it"
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1280,2400",
            f"--screenshot={shot}",
            html.as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    pixels = mpimg.imread(shot)[:, :, :3]
    # The lag plot, the first on the page, is a row of panels per group that committed (g-active,
    # g-stopped, g-left), each drawing its one partition's line in matplotlib's first colour (C0
    # blue #1f77b4): three bands of blue one above the other, before the other plots' lines.
    near = (abs(pixels * 255 - (0x1F, 0x77, 0xB4)) < 12).all(axis=2)
    rows = [int(y) for y in near.sum(axis=1).nonzero()[0] if near[y].sum() >= 3]
    bands = [rows[0]] + [b for a, b in zip(rows, rows[1:], strict=False) if b - a > 40]
    assert len(bands) >= 3 and near.sum() > 600, bands


def test_each_group_state_is_what_the_test_did_to_its_consumer(traffic: dict) -> None:
    """stay: active; SIGKILL: stopped; close(): left (its LeaveGroup); polls without commits:
    never_committed, with the high watermark and no commit."""
    stopped = {r["group_id"]: r for r in traffic["report"]["stopped"]}
    assert {g: r["state"] for g, r in stopped.items()} == {
        "g-active": "active",
        "g-stopped": "stopped",
        "g-left": "left",
        "g-audit": "never_committed",
    }
    gone = stopped["g-left"]
    assert (gone["committed_offset"], gone["high_watermark"]) == (LEAVE_AFTER, RECORDS)
    # It left after its last commit and before the close() returned.
    assert traffic["left"][-1][0] - 0.05 < dt_seconds(gone["last_leave"]) < traffic["left_closed"] + 0.05
    audit = stopped["g-audit"]
    assert traffic["audit_polls"][-1][1] == RECORDS - 1  # it read every record
    assert (
        audit["committed_offset"],
        audit["high_watermark"],
        audit["offset_lag"],
        audit["last_commit"],
    ) == (
        None,
        RECORDS,
        None,
        None,
    )
    assert audit["last_leave"] is None and stopped["g-stopped"]["last_leave"] is None


def window_answers(out: Any, since: Any = None, until: Any = None, spark: Any = None) -> dict:
    from kwsniff.sections.catalog import BY_NAME
    from kwsniff.sections.engines import DuckEngine, Filters, SparkEngine
    from kwsniff.sections.run import answer

    filters = Filters(since=since, until=until, session_timeout_ms=6000)
    sections = [BY_NAME[n] for n in ("lag", "stopped", "member_lag")]
    if spark is None:
        with DuckEngine(out, filters) as engine:
            return answer(engine, filters, sections)
    engine = SparkEngine(out, filters, spark)
    try:
        return answer(engine, filters, sections)
    finally:
        engine.close()


def test_a_window_after_a_consumer_stopped_still_shows_its_lag_state_and_member(
    traffic: dict, spark: Any
) -> None:
    """--since after the killed consumer's last commit: its lag at the window's start (from what the
    capture saw before it), its stopped state and its member, on both engines."""
    import datetime as dt
    import math

    last_t, last = traffic["stopped"][-1]
    since_s = math.ceil(traffic["killed_at"] + 1.0)  # a whole second after the kill
    since = dt.datetime.fromtimestamp(since_s, dt.UTC).replace(tzinfo=None)
    duck = window_answers(traffic["out"], since)
    assert window_answers(traffic["out"], since, spark=spark) == duck
    lag = [r for r in duck["lag"] if r["group_id"] == "g-stopped"]
    assert lag and all(dt_seconds(r["second"].isoformat()) >= since_s for r in lag)
    first = lag[0]
    assert dt_seconds(first["second"].isoformat()) == since_s
    assert (first["committed_offset"], first["lag_source"]) == (last, "produce_ack")
    # The worst moment of its first second: at least its lag at `since`, at most a second more.
    behind = since_s - traffic["acks"][last]
    assert behind - 0.25 < first["lag_seconds"] < behind + 1.25
    states = {r["group_id"]: r["state"] for r in duck["stopped"]}
    assert states == {
        "g-active": "active",
        "g-stopped": "stopped",
        "g-left": "left",
        "g-audit": "never_committed",
    }
    members = {r["group_id"] for r in duck["member_lag"]}
    assert members == {"g-active", "g-stopped", "g-left", "g-audit"}
    # The same from the command line.
    args = ["report", str(traffic["out"]), "--format", "json", "--session-timeout-ms", "6000"]
    done = CliRunner().invoke(main, [*args, "--since", since.isoformat()])
    assert done.exit_code == 0, done.output
    cli = json.loads(done.stdout)
    shown = [dt_seconds(r["second"]) for r in cli["lag"] if r["group_id"] == "g-stopped"]
    assert shown[0] == since_s and len(shown) == len(lag)
    assert last_t < traffic["killed_at"] < since_s


def test_a_window_ending_before_the_kill_judges_the_state_at_its_end(traffic: dict, spark: Any) -> None:
    import datetime as dt

    last_t, last = traffic["stopped"][-1]
    until_s = last_t - 0.5  # the consumer was still committing then
    until = dt.datetime.fromtimestamp(until_s, dt.UTC).replace(tzinfo=None)
    duck = window_answers(traffic["out"], until=until)
    assert window_answers(traffic["out"], until=until, spark=spark) == duck
    dead = next(r for r in duck["stopped"] if r["group_id"] == "g-stopped")
    assert dead["state"] == "active" and abs(dead["capture_end"].timestamp() - until_s) < 1e-6
    committed_before = max(o for t, o in traffic["stopped"] if t < until_s - 0.3)
    assert committed_before <= dead["committed_offset"] < last
    assert all(dt_seconds(r["second"].isoformat()) <= until_s for r in duck["lag"])


SILENT_S = 12.0  # how long the live capture runs on after the consumer is killed


def test_a_live_capture_counts_a_killed_consumer_silent_until_it_was_stopped(tmp_path: Any) -> None:
    """No packet comes after the kill: the capture's end is when it was stopped (its last period's
    end), not its last packet, so the consumer is silent from its last request to the stop."""
    from confluent_kafka import Producer

    out, err_path = tmp_path / "live", tmp_path / "capture.err"
    with start_broker() as broker:
        create_topics(broker.bootstrap, {TOPIC: 1})
        err = open(err_path, "wb")  # noqa: SIM115 - the child owns it
        capture = subprocess.Popen(
            [sys.executable, "-m", "kwsniff", "capture", "lo", "--out", str(out)]
            + ["--broker-port", str(broker.port), "--workers", "1", "--rotate-seconds", "5"],
            stdout=subprocess.PIPE,
            stderr=err,
        )
        err.close()
        try:
            wait_for(lambda: b"kwsniff: capturing on lo" in err_path.read_bytes(), 60)
            consumer = Consumer(broker.bootstrap, "g-live", "live-killed", 0.0, total=5)
            try:
                assert consumer.assigned.wait(30), "consumer never assigned"
                producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "live-producer"})
                for _ in range(5):
                    producer.produce(TOPIC, value=VALUE)
                assert producer.flush(10) == 0
                producer = None  # its connections close now, not after the kill
                wait_for(lambda: len(consumer.commits) == 5, 30)
                consumer.proc.send_signal(signal.SIGKILL)
                consumer.proc.wait(10)
                killed_at = time.time()
            finally:
                stop_process(consumer.proc)
                consumer.reader.join(5)
            wait_for(lambda: time.time() - killed_at > SILENT_S, SILENT_S + 5)
            stop_sent = time.time()
            capture.send_signal(signal.SIGINT)
            capture.communicate(timeout=60)
            stopped_at = time.time()
        finally:
            stop_process(capture, signal.SIGKILL)
    assert capture.returncode == 0, err_path.read_text()
    args = ["report", str(out), "--format", "json", "--section", "stopped", "--session-timeout-ms", "6000"]
    done = CliRunner().invoke(main, args)
    assert done.exit_code == 0, done.output
    (row,) = [r for r in json.loads(done.stdout)["stopped"] if r["group_id"] == "g-live"]
    assert (row["state"], row["committed_offset"], row["high_watermark"]) == ("stopped", 5, 5)
    assert stop_sent <= dt_seconds(row["capture_end"]) <= stopped_at
    # Its last request was after its last commit and before the kill.
    last_commit = consumer.commits[-1][0]
    assert stop_sent - killed_at <= row["silent_seconds"] <= stopped_at - last_commit


def test_findings_open_with_the_killed_and_the_departed_consumers(traffic: dict) -> None:
    """The report's first rows: the killed consumer's group stopped, the closed one's left, each
    behind by what it had not committed of the RECORDS produced; the active group, caught up, and
    the audit group, which never committed, are no finding."""
    found = [r for r in traffic["report"]["findings"] if r["rule"] == "stopped_group"]
    assert found == traffic["report"]["findings"][: len(found)]
    killed, closed = traffic["stopped"][-1][1], traffic["left"][-1][1]
    behind = {"g-stopped": RECORDS - killed, "g-left": RECORDS - closed}
    assert [r["group_id"] for r in found] == sorted(behind, key=lambda g: -behind[g])
    end = dt_seconds(traffic["report"]["stopped"][0]["capture_end"])
    for r in found:
        group = r["group_id"]
        state = "stopped" if group == "g-stopped" else "left"
        timeout = " \\(session timeout 6 s\\)" if state == "stopped" else ""
        sentence = re.fullmatch(
            rf"group `{group}` {state} (\d+) s ago{timeout}, {behind[group]} records and (\d+) s behind"
            rf" on topic `{TOPIC}` \(1 partition\)",
            r["finding"],
        )
        assert sentence, r["finding"]
        # Its first record not committed was acknowledged to the producer that long before the end.
        committed = killed if group == "g-stopped" else closed
        assert abs(int(sentence[2]) - (end - traffic["acks"][committed])) <= 1
        assert (r["severity"], r["shown_in"], r["topic"]) == ("critical", "stopped", TOPIC)
    assert not any(r["group_id"] in ("g-active", "g-audit") for r in traffic["report"]["findings"])
