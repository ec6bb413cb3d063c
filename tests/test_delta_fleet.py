"""Many writers, one table (issue 47, goals 2 and 3; docs/delta.md): four `kwsniff capture` processes,
standing in for four broker hosts (each its own tansu broker, `--broker-port` and `--host`), append
their one-second periods to the same Delta tables on a real S3 server (SeaweedFS) while real
producers run, and one of them is killed with SIGKILL midway through a commit (between two tables'
log entries: KWSNIFF_TEST_COMMIT_PAUSE holds it there) and started again. Every record the producers'
delivery reports acknowledged is in the `partitions` table exactly once, but those the killed host
could not see; the killed commit is finished by the next run, once; each host's periods are
contiguous; and every version of the tables reads whole.

A `read` killed the same way on local disk has its commit finished by the next run too."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from seaweed import SeaweedS3, seaweed_s3

from kwsniff.sinks.delta import table_dataset
from kwsniff.sinks.delta_output import PAUSE_ENV, SCRATCH
from kwsniff.sinks.location import parse_location
from tests.realparts import (
    Broker,
    capture_metric,
    create_topics,
    free_ports,
    start_broker,
    start_capture_on,
    stop_process,
    wait_until,
)

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = [ROOT / "tests/data/captures/kafka_python.pcap", ROOT / "tests/data/captures/produce_codecs.pcap"]
READ_TABLES = ("requests", "connections", "errors", "partitions", "groups", "captures")
READY_TIMEOUT_S = 60.0
COMMIT_TIMEOUT_S = 120.0
HOSTS = ("host-1", "host-2", "host-3", "host-4")
KILLED = "host-4"
TOPIC = "fleet"
PARTITIONS = 2
BATCH = 10  # records a producer sends between two delivery flushes
PACE_S = 0.1  # the producers' rate: a batch every PACE_S (a workload, not a wait)
PERIODS_BEFORE_KILL = 8  # commits of the host to kill before its commit is paused
PERIODS_AFTER = 12  # commits of every host after the restart


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    with seaweed_s3(tmp_path_factory.mktemp("seaweed")) as server:
        yield server


class Producing:
    """A confluent-kafka producer sending batches to ``TOPIC`` in a thread until stopped; ``acked``
    holds the (partition, offset) of every record its delivery reports acknowledged."""

    def __init__(self, bootstrap: str, host: str) -> None:
        self.bootstrap = bootstrap
        self.host = host
        self.acked: list[tuple[int, int]] = []
        self.failed = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"produce-{self.host}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
            assert not self._thread.is_alive()

    def _run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "client.id": f"producer-{self.host}",
                "acks": "all",
                "linger.ms": 5,
                "enable.idempotence": False,
            }
        )

        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                self.acked.append((msg.partition(), msg.offset()))
            else:
                self.failed += 1

        seq = 0
        while not self._stop.is_set():
            for _ in range(BATCH):
                producer.produce(
                    TOPIC, key=f"{self.host}-{seq}".encode(), value=b"v" * 100, on_delivery=on_delivery
                )
                seq += 1
            producer.flush(30)
            self._stop.wait(PACE_S)
        producer.flush(30)


def start_capture(
    s3: SeaweedS3, uri: str, host: str, broker: Broker, metrics: int, err: Path, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    args = ["--out", uri, "--append", "--host", host, "--broker-port", str(broker.port), "--workers", "1"]
    args += ["--rotate-seconds", "1", "--metrics-port", str(metrics)]
    return start_capture_on("lo", args, err, env=env, stdout=subprocess.DEVNULL)


def commits(metrics: int) -> float:
    return capture_metric(metrics, "kwsniff_commit_duration_seconds_count")


def produce_rows(uri: str, options: dict[str, str], version: int | None = None) -> pa.Table:
    """The acknowledged Produce rows of `partitions` (at ``version``; None: the latest)."""
    import pyarrow.compute as pc

    columns = ["host", "capture", "conn_id", "correlation_id", "topic", "partition", "first_offset"]
    columns += ["last_offset", "record_count"]
    table = DeltaTable(f"{uri}/partitions", version=version, storage_options=options)
    rows = table.to_pyarrow_dataset().to_table(columns=[*columns, "api_name", "error_code"])
    keep = pc.and_(pc.equal(rows["api_name"], "Produce"), pc.equal(rows["error_code"], 0))
    return rows.filter(keep).select(columns)


def offsets_by_host(rows: pa.Table) -> dict[str, Counter[tuple[int, int]]]:
    """Each host's records, as (partition, offset) counted: a Produce row's offsets are its base
    offset's range of ``record_count``."""
    found: dict[str, Counter[tuple[int, int]]] = defaultdict(Counter)
    for row in rows.to_pylist():
        assert row["topic"] == TOPIC
        assert row["last_offset"] - row["first_offset"] + 1 == row["record_count"]
        for offset in range(row["first_offset"], row["last_offset"] + 1):
            found[row["host"]][(row["partition"], offset)] += 1
    return found


def produce_exchanges(uri: str, options: dict[str, str], table: str) -> set[tuple[str, str, int, int]]:
    """The Produce exchanges ``table`` (`requests` or `partitions`) has rows of."""
    import pyarrow.compute as pc

    rows = table_dataset(parse_location(uri, options), table).to_table(
        columns=["host", "capture", "conn_id", "correlation_id", "api_name"]
    )
    rows = rows.filter(pc.equal(rows["api_name"], "Produce"))
    return {(r["host"], r["capture"], r["conn_id"], r["correlation_id"]) for r in rows.to_pylist()}


def periods(
    uri: str, options: dict[str, str], version: int | None = None
) -> dict[tuple[str, str], list[Any]]:
    """Each (host, capture)'s `capture_stats` periods as (start, end), sorted."""
    table = DeltaTable(f"{uri}/capture_stats", version=version, storage_options=options)
    rows = table.to_pyarrow_dataset().to_table(columns=["host", "capture", "period_start", "period_end"])
    runs: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for row in rows.to_pylist():
        runs[(row["host"], row["capture"])].append((row["period_start"], row["period_end"]))
    return {run: sorted(found) for run, found in runs.items()}


def contiguous(spans: list[Any]) -> bool:
    return len(set(spans)) == len(spans) and all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))


def test_four_captures_append_to_one_s3_table_and_a_capture_killed_mid_commit_loses_and_doubles_nothing(
    s3: SeaweedS3, tmp_path: Path
) -> None:
    uri, options = s3.uri("fleet"), s3.storage_options()
    arm = tmp_path / "pause"
    procs: dict[str, subprocess.Popen[bytes]] = {}
    brokers: dict[str, Broker] = {}
    producers: dict[str, Producing] = {}
    metrics = dict(zip(HOSTS, free_ports(len(HOSTS)), strict=True))
    errs = {host: tmp_path / f"{host}.err" for host in HOSTS}
    try:
        for host in HOSTS:
            brokers[host] = start_broker()
            create_topics(brokers[host].bootstrap, {TOPIC: PARTITIONS})
        for host in HOSTS:
            env = s3.env() | ({PAUSE_ENV: f"partitions:{arm}"} if host == KILLED else {})
            procs[host] = start_capture(s3, uri, host, brokers[host], metrics[host], errs[host], env)
        for host in HOSTS:
            producers[host] = Producing(brokers[host].bootstrap, host)
            producers[host].start()
        wait_until(lambda: commits(metrics[KILLED]) >= PERIODS_BEFORE_KILL, "periods before the kill", 120)

        # The killed host's next commit holding `partitions` rows stops before that table's log entry,
        # the tables before it (`requests`...) committed: the capture is killed there.
        arm.touch()
        wait_until(lambda: b"paused before partitions" in errs[KILLED].read_bytes(), "commit paused", 60)
        paused_at = int(errs[KILLED].read_text().split("kwsniff: test: commit ")[1].split()[0])
        torn = produce_exchanges(uri, options, "requests") - produce_exchanges(uri, options, "partitions")
        # Its Produce exchanges of the period are in `requests`, not yet in `partitions` (a host still
        # committing may show the same for a moment: readers start from `capture_stats`, committed last).
        assert KILLED in {key[0] for key in torn}
        producers[KILLED].stop()  # acknowledged records up to here; those the killed run held are lost
        procs[KILLED].send_signal(signal.SIGKILL)
        procs[KILLED].wait(timeout=30)
        killed_pid = procs[KILLED].pid
        restart_from = len(producers[KILLED].acked)

        # Started again (without the pause): it finishes the killed run's commit before it captures.
        procs["restarted"] = start_capture(
            s3, uri, KILLED, brokers[KILLED], metrics[KILLED], tmp_path / "restarted.err", s3.env()
        )
        producers[KILLED].start()
        base = {host: commits(metrics[host]) for host in HOSTS}
        for host in HOSTS:
            wait_until(
                lambda h=host: commits(metrics[h]) >= base[h] + PERIODS_AFTER, f"{host}'s periods", 180
            )
        for producer in producers.values():
            producer.stop()
        for host in (*(h for h in HOSTS if h != KILLED), "restarted"):
            procs[host].send_signal(signal.SIGINT)
        for host, proc in procs.items():
            if host != KILLED:
                proc.communicate(timeout=120)
    finally:
        for producer in producers.values():
            producer.stop()
        arm.unlink(missing_ok=True)
        for proc in procs.values():
            stop_process(proc, signal.SIGKILL)
        for broker in brokers.values():
            broker.stop()

    for host in (*(h for h in HOSTS if h != KILLED), "restarted"):
        err = (tmp_path / f"{host}.err").read_text()
        assert procs[host].returncode == 0 and "Traceback" not in err, err
    assert all(p.failed == 0 for p in producers.values())

    rows = produce_rows(uri, options)
    found = offsets_by_host(rows)
    for host in HOSTS:
        acked = Counter(producers[host].acked)
        assert len(acked) == len(producers[host].acked)  # the broker acknowledged each offset once
        assert max(found[host].values()) == 1, host  # no record twice
        if host != KILLED:
            assert found[host] == acked, host  # every acknowledged record, once
    # The killed host: every record but those acknowledged after its last committed period (the
    # killed run's queue) and before it ran again, per partition one run of offsets, none twice.
    acked_k = producers[KILLED].acked
    missing = set(acked_k) - set(found[KILLED])
    assert set(found[KILLED]) <= set(acked_k)
    assert not missing & set(acked_k[restart_from:])  # after the restart, everything
    for partition in range(PARTITIONS):
        gap = sorted(o for p, o in missing if p == partition)
        assert not gap or gap == list(range(gap[0], gap[-1] + 1)), partition  # one run of offsets
    # The killed commit was finished, once: no Produce exchange of `requests` without its partitions.
    assert produce_exchanges(uri, options, "requests") == produce_exchanges(uri, options, "partitions")

    # Each run's periods are contiguous and once; the killed run's last is the commit it was killed in.
    runs = periods(uri, options)
    assert {host for host, _ in runs} == set(HOSTS)
    assert all(contiguous(spans) for spans in runs.values())
    killed_runs = sorted((spans for (host, _), spans in runs.items() if host == KILLED), key=lambda s: s[0])
    assert len(killed_runs) == 2
    assert len(killed_runs[0]) == paused_at + 1
    assert killed_runs[0][-1][1] <= killed_runs[1][0][0]
    # The killed run's staging directory was removed once its commit was finished.
    assert not list((Path(tempfile.gettempdir()) / SCRATCH).glob(f"*-{killed_pid}-*"))

    # Goal 3: a reader at every version of the tables reads it whole: each file the version names is
    # there with the rows its log entry says, a version holds every file of the one before (nothing
    # here removes any: no row once there goes), so no version holds a row twice, and each run's
    # periods at every version are a contiguous prefix of its final ones (no commit seen in part).
    location = parse_location(uri, options)
    fs, root = location.filesystem()
    for table in ("partitions", "capture_stats", "requests"):
        versions = files_by_version(uri, options, table)
        keys = set(s3.keys(f"fleet/{table}/"))
        rows_of = {
            path: pq.read_table(f"{root}/{table}/{path}", filesystem=fs) for path in versions[max(versions)]
        }
        for version, files in versions.items():
            assert {f"fleet/{table}/{path}" for path in files} <= keys, (table, version)
            assert all(rows_of[path].num_rows == count for path, (count, _) in files.items()), version
            assert set(versions.get(version - 1, {})) <= set(files), (table, version)
            if table == "capture_stats":
                at: dict[tuple[str, str], list[Any]] = defaultdict(list)
                for path, (_, host) in files.items():
                    for row in rows_of[path].to_pylist():
                        at[(host, row["capture"])].append((row["period_start"], row["period_end"]))
                for run, spans in at.items():
                    assert sorted(spans) == runs[run][: len(spans)], (version, run)


def files_by_version(uri: str, options: dict[str, str], table: str) -> dict[int, dict[str, tuple[int, str]]]:
    """Each version of ``table`` as a reader at that version has it: its files, each with its row
    count (the log's statistics) and host."""
    delta = DeltaTable(f"{uri}/{table}", version=0, storage_options=options)
    latest = DeltaTable(f"{uri}/{table}", storage_options=options).version()
    found = {}
    for version in range(latest + 1):
        delta.load_as_version(version)
        adds = pa.table(delta.get_add_actions(flatten=True))
        found[version] = {
            path: (rows, host)
            for path, rows, host in zip(
                adds.column("path").to_pylist(),
                adds.column("num_records").to_pylist(),
                adds.column("partition.host").to_pylist(),
                strict=True,
            )
        }
    return found


def table_rows(location: Any, table: str) -> int:
    return int(table_dataset(location, table).count_rows())


def kwsniff_read(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kwsniff", "read", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def killed_read(tmp_path: Path, out: str) -> int:
    """A `read` of CAPTURES[0] into ``out`` killed with its commit paused before `partitions`'s log
    entry (checked: `requests` committed, `partitions` not); its pid."""
    arm, err = tmp_path / "pause", tmp_path / "first.err"
    arm.touch()
    with open(err, "wb") as sink:
        first = subprocess.Popen(
            [sys.executable, "-m", "kwsniff", "read", str(CAPTURES[0]), "--out", out, "--host", "h"],
            stdout=subprocess.DEVNULL,
            stderr=sink,
            env=os.environ | {PAUSE_ENV: f"partitions:{arm}"},
        )
    try:
        wait_until(
            lambda: b"paused before partitions" in err.read_bytes() or first.poll() is not None,
            "the read's commit paused",
            120,
        )
        assert first.poll() is None, err.read_text()
        location = parse_location(out)
        assert table_rows(location, "requests") > 0
        assert table_rows(location, "partitions") == 0
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        stop_process(first, signal.SIGKILL)
    return first.pid


def test_a_read_killed_between_two_tables_log_entries_has_its_commit_finished_by_the_next_run(
    tmp_path: Path,
) -> None:
    plain = {}
    for i, capture in enumerate(CAPTURES):
        done = kwsniff_read(str(capture), "--out", str(tmp_path / f"plain{i}"))
        assert done.returncode == 0, done.stderr
        plain[i] = {t: pq.read_table(tmp_path / f"plain{i}" / t).num_rows for t in READ_TABLES}
    out = f"file://{tmp_path / 'tables'}"
    location = parse_location(out)
    killed = killed_read(tmp_path, out)
    assert table_rows(location, "requests") == plain[0]["requests"]

    second = kwsniff_read(str(CAPTURES[1]), "--out", out, "--append", "--host", "h")
    assert second.returncode == 0, second.stderr
    # Both runs whole, the killed one's commit finished once (requests not committed again).
    for table in READ_TABLES:
        assert table_rows(location, table) == plain[0][table] + plain[1][table], table
    captures = table_dataset(location, "captures").to_table(columns=["path"]).column(0).to_pylist()
    assert sorted(Path(p).name for p in captures) == sorted(c.name for c in CAPTURES)
    assert not list((Path(tempfile.gettempdir()) / SCRATCH).glob(f"*-{killed}-*"))


def test_a_killed_commit_whose_staged_file_is_gone_stops_the_next_run_in_one_line_naming_it(
    tmp_path: Path,
) -> None:
    out = f"file://{tmp_path / 'tables'}"
    location = parse_location(out)
    killed = killed_read(tmp_path, out)
    # The paused commit had staged `partitions`'s file into the table; a vacuum removes it.
    staged = list((tmp_path / "tables" / "partitions").rglob("*.parquet"))
    assert len(staged) == 1
    staged[0].unlink()
    (left,) = (Path(tempfile.gettempdir()) / SCRATCH).glob(f"*-{killed}-*")

    refused = kwsniff_read(str(CAPTURES[1]), "--out", out, "--append", "--host", "h")
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == [
        f"kwsniff: error: --out {location.uri}: the commit journaled in {left}: "
        f"partitions/{staged[0].relative_to(tmp_path / 'tables' / 'partitions')} "
        "is no longer in the table's storage"
    ]
    assert table_rows(location, "partitions") == 0  # nothing committed that names the missing file

    shutil.rmtree(left)  # that commit given up: the next run goes on
    again = kwsniff_read(str(CAPTURES[1]), "--out", out, "--append", "--host", "h")
    assert again.returncode == 0, again.stderr
    assert table_rows(location, "partitions") > 0
