"""docs/notebooks/quickstart.ipynb runs in a real Jupyter kernel (nbclient, ipykernel) of this venv's
Python, and its answers are tshark's: the requests and clients of the sample capture, the median
latency of every API, and which client is slowest (sample_pcaps/quickstart.pcap.tshark.json)."""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK = REPO / "docs" / "notebooks" / "quickstart.ipynb"
TSHARK = REPO / "sample_pcaps" / "quickstart.pcap.tshark.json"
# Kafka's names of the API keys in the sample (Kafka's message specs, clients/src/main/resources).
API_NAMES = {
    0: "Produce",
    1: "Fetch",
    2: "ListOffsets",
    3: "Metadata",
    8: "OffsetCommit",
    9: "OffsetFetch",
    10: "FindCoordinator",
    11: "JoinGroup",
    12: "Heartbeat",
    13: "LeaveGroup",
    14: "SyncGroup",
    18: "ApiVersions",
    19: "CreateTopics",
    71: "GetTelemetrySubscriptions",
}


def tshark_exchanges() -> list[tuple[str, int, float | None]]:
    """(client id, api key, latency ms or None) of every request: from the frame completing the
    request to the response's first frame, in whole µs (the times kwsniff's latency_ms spans)."""
    view = json.loads(TSHARK.read_text())
    answers = {(r["stream"], r["correlation_id"]): r for r in view["responses"]}
    out = []
    for q in view["requests"]:
        a = answers.get((q["stream"], q["correlation_id"]))
        ms = None
        if a is not None:
            ms = (round(a["first_frame_time_epoch"] * 1e6) - round(q["frame_time_epoch"] * 1e6)) / 1000
        out.append((q["client_id"], q["api_key"], ms))
    return out


def stdout_of(cell: dict) -> str:
    return "".join(
        o["text"] for o in cell["outputs"] if o["output_type"] == "stream" and o["name"] == "stdout"
    )


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    # A kernel spec naming this interpreter, so the kernel is the venv's Python whatever kernels
    # the machine has installed.
    kernels = tmp_path_factory.mktemp("jupyter")
    spec = kernels / "kernels" / "kwsniff-test"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "kwsniff", "language": "python"})
    )
    mp = pytest.MonkeyPatch()
    mp.setenv("JUPYTER_PATH", str(kernels))
    mp.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("import sys\nprint(sys.executable)"))
    client = NotebookClient(
        nb, kernel_name="kwsniff-test", timeout=300, resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    )
    try:
        client.execute()
    finally:
        mp.undo()
    return [c for c in nb.cells if c["cell_type"] == "code"]


def test_the_kernel_is_this_venvs_python(executed: list[dict]) -> None:
    assert stdout_of(executed[-1]).strip() == sys.executable


def test_the_notebook_reads_every_request_of_the_capture(executed: list[dict]) -> None:
    exchanges = tshark_exchanges()
    clients = {c for c, _, _ in exchanges}
    assert stdout_of(executed[0]) == f"{len(exchanges)} requests, {len(clients)} clients\n"
    assert (len(exchanges), len(clients)) == (75, 6)  # sample_pcaps/README.md: six client ids


def test_latency_by_api_is_plotted_with_tsharks_medians(executed: list[dict]) -> None:
    cell = executed[1]
    assert any("image/png" in o.get("data", {}) for o in cell["outputs"])
    latencies = defaultdict(list)
    for _, key, ms in tshark_exchanges():
        if ms is not None:
            latencies[API_NAMES[key]].append(ms)
    expected = {api: f"{statistics.median(v):.3f}" for api, v in latencies.items()}
    printed = dict(line.split(": median ") for line in stdout_of(cell).splitlines())
    assert {api: text.removesuffix(" ms") for api, text in printed.items()} == expected


def test_the_slowest_client_is_tsharks(executed: list[dict]) -> None:
    service = defaultdict(list)
    for client, key, ms in tshark_exchanges():
        if ms is not None and key not in (1, 11, 78):
            service[client].append(ms)
    medians = {c: statistics.median(v) for c, v in service.items()}
    slowest = max(medians, key=medians.__getitem__)
    expected = (
        f"slowest client: {slowest}: median {medians[slowest]:.3f} ms over {len(service[slowest])} requests\n"
    )
    assert stdout_of(executed[2]) == expected
    assert stdout_of(executed[3]) == f"{slowest}: {len(service[slowest])} requests in the latency section\n"
