"""Shared fixtures: a real tansu broker on loopback and a helper that captures a workload's traffic;
and how pytest-xdist shares the tests between its workers."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from realparts import CapturedTraffic, start_broker, tcpdump_capture

# pyproject's addopts run the suite on two workers (`-n 2 --dist loadgroup`; `-n 0` runs it in one
# process). A group runs whole on one worker: each module is its own group, so a module's fixtures (a
# broker, a capture, a cluster) are made once. These modules share a group because one watches what the
# other changes: the machine's network namespaces.
SHARED_GROUPS = {"test_bench_edges": "netns", "test_live_tunnels": "netns", "test_live_fanout": "netns"}
# Modules that take minutes go first, longest first, so that neither worker is left alone with one at
# the end (the scheduler hands out groups in collection order; --no-loadscope-reorder keeps it).
SLOW_FIRST = ("test_datasets_kill", "test_spark_cluster", "test_tls_kafka")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return
    for item in items:
        module = item.path.stem
        item.add_marker(pytest.mark.xdist_group(SHARED_GROUPS.get(module, module)))
    rank = {module: i for i, module in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: the rest keep their order


@pytest.fixture(scope="session")
def broker() -> Iterator[str]:
    """A tansu broker for the whole test session; yields its bootstrap address "127.0.0.1:PORT"."""
    with start_broker() as running:
        yield running.bootstrap


@pytest.fixture
def capture_traffic(broker: str, tmp_path: Path) -> Callable[..., CapturedTraffic]:
    """Run `workload(bootstrap)` while tcpdump records the broker port; returns the capture."""
    port = int(broker.rsplit(":", 1)[1])

    def run(workload: Callable[[str], Any], name: str = "traffic.pcap") -> CapturedTraffic:
        pcap = tmp_path / name
        with tcpdump_capture(pcap, port) as stats:
            result = workload(broker)
        return CapturedTraffic(pcap=pcap, port=port, result=result, tcpdump=stats)

    return run


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The one local SparkSession of the test run (two cores, no UI, few shuffle partitions)."""
    from pyspark.sql import SparkSession

    # Workers run the interpreter running the tests (a venv's too), as kwsniff's spark_session does.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("kwsniff-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        # One session serves every Spark test of a worker: with the 1 GiB default its hash
        # aggregations ran out of execution memory late in a full run (CI: AGGREGATE_OUT_OF_MEMORY in
        # test_report_sections, which passes alone).
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
