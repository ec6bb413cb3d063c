"""`kwsniff spark` in local mode from a folder that holds a `kwsniff/` directory (issue 34, item 6).

Spark's local workers run in the driver's working directory, and `python -m` would put that folder
first on their `sys.path`, where a `kwsniff/` directory (the clone, seen from its parent; a folder of
that name holding a `tables/` output) is a namespace package. With the development install
(`pip install -e`, whose finder comes after `sys.path`) the folder used to win and the run stopped
with `executor imported kwsniff from …/kwsniff (a namespace folder)`. The driver is the test venv's
installed `kwsniff` script, as a user runs it; the tables are checked against tshark's view of the
captures (stored beside them, docs/test-oracles.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds
import pytest

ROOT = Path(__file__).resolve().parent.parent
CAPTURES = [ROOT / "sample_pcaps/quickstart.pcap", ROOT / "tests/data/captures/kafka_python.pcap"]
RUN_TIMEOUT_S = 480.0


def tshark_view(capture: Path) -> tuple[Counter[tuple], Counter[tuple]]:
    """(requests, connections) of ``capture`` as tshark decoded them: each request's client endpoint,
    API key, version, correlation id and client id; each stream's endpoints and payload bytes."""
    view = json.loads(capture.with_name(capture.name + ".tshark.json").read_text())
    client_of = {s["stream"]: s["client"] for s in view["streams"]}
    requests = Counter(
        (client_of[r["stream"]], r["api_key"], r["api_version"], r["correlation_id"], r["client_id"])
        for r in view["requests"]
    )
    connections = Counter(
        (s["client"], s["broker"], s["payload_bytes_to_broker"], s["payload_bytes_to_client"])
        for s in view["streams"]
    )
    return requests, connections


def table_view(out: Path) -> tuple[Counter[tuple], Counter[tuple]]:
    """The same two views of the tables `kwsniff spark` wrote."""
    connections = ds.dataset(out / "connections", partitioning="hive").to_table().to_pylist()
    client_of = {(c["capture"], c["conn_id"]): f"{c['client_ip']}:{c['client_port']}" for c in connections}
    requests = ds.dataset(out / "requests", partitioning="hive").to_table().to_pylist()
    return (
        Counter(
            (client_of[(r["capture"], r["conn_id"])], r["api_key"], r["api_version"])
            + (r["correlation_id"], r["client_id"])
            for r in requests
        ),
        Counter(
            (
                f"{c['client_ip']}:{c['client_port']}",
                f"{c['broker_ip']}:{c['broker_port']}",
                c["bytes_to_broker"],
                c["bytes_to_client"],
            )
            for c in connections
        ),
    )


def clone_parent(folder: Path) -> None:
    """``folder`` as the folder above a clone: `kwsniff/` is the repository (no `__init__.py`)."""
    (folder / "kwsniff").symlink_to(ROOT, target_is_directory=True)


def output_folder_named_kwsniff(folder: Path) -> None:
    """A folder of the user's own named `kwsniff`, holding a `tables/` output of an earlier run."""
    (folder / "kwsniff/tables").mkdir(parents=True)


@pytest.mark.parametrize("make", [clone_parent, output_folder_named_kwsniff])
def test_local_spark_from_a_folder_holding_kwsniff_imports_the_installed_package(
    make, tmp_path: Path
) -> None:
    make(tmp_path)
    script = Path(sys.executable).parent / "kwsniff"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "PYSPARK_", "SPARK_"))}
    result = subprocess.run(
        [str(script), "spark", *map(str, CAPTURES), "--out", "kafka-tables", "--master", "local[2]", "-q"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "kwsniff: error" not in result.stderr
    expected_requests: Counter[tuple] = Counter()
    expected_connections: Counter[tuple] = Counter()
    for capture in CAPTURES:
        requests, connections = tshark_view(capture)
        expected_requests += requests
        expected_connections += connections
    found_requests, found_connections = table_view(tmp_path / "kafka-tables")
    assert found_requests == expected_requests
    assert found_connections == expected_connections
    assert sum(found_requests.values()) == 75 + 46  # tshark: 75 requests in one capture, 46 in the other
