"""The one rule for signals (issue 34, item 6; docs/datasets.md "How runs end"): `capture`, which
Ctrl-C or SIGTERM is how one ends, exits 0 once everything is committed; every other command that
SIGINT or SIGTERM stops before it finished exits 128 + the signal (130, 143), with no traceback
and no `Aborted!`. `read`'s two cases are in tests/test_datasets.py, `capture` with real clients in
tests/test_live_capture.py.

Each command is caught mid-way by an event, not by a delay: `show` and `report` blocked writing
into a pipe nobody reads (its buffer shrunk to one page), `spark` once its JVM is running, `capture`
once it printed its `capturing on` line.
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.realparts import free_port, stop_process

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "sample_pcaps/quickstart.pcap"
WAIT_S = 120.0
SIGNALS = [(signal.SIGINT, 130), (signal.SIGTERM, 143)]
PAGE = 4096


def start(*args: str, stdout: int, cwd: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    return subprocess.Popen(
        [sys.executable, "-m", "kwsniff", *args], stdout=stdout, stderr=subprocess.PIPE, cwd=cwd, env=env
    )


def blocked_writing(proc: subprocess.Popen[bytes]) -> None:
    """Until the process sleeps writing into its full stdout pipe."""
    deadline = time.monotonic() + WAIT_S
    while "pipe_write" not in Path(f"/proc/{proc.pid}/wchan").read_text():
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline, "it never filled the pipe"
        time.sleep(0.05)


def stopped_while_writing(args: list[str], signum: int, cwd: Path) -> tuple[int, str]:
    """Runs kwsniff ARGS into a one-page pipe nobody reads, signals it once it is blocked there."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PAGE)
    proc = start(*args, stdout=write_end, cwd=cwd)
    os.close(write_end)
    try:
        blocked_writing(proc)
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=WAIT_S)
    finally:
        os.close(read_end)
        stop_process(proc, signal.SIGKILL)  # type: ignore[arg-type]
    return proc.returncode, stderr.decode()


@pytest.mark.parametrize(("signum", "status"), SIGNALS)
def test_show_stopped_by_a_signal_exits_128_plus_it(tmp_path: Path, signum: int, status: int) -> None:
    assert stopped_while_writing(["show", str(QUICKSTART)], signum, tmp_path) == (status, "")


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tables") / "t"
    done = subprocess.run(
        [sys.executable, "-m", "kwsniff", "read", str(QUICKSTART), "--out", str(out), "-q"], timeout=WAIT_S
    )
    assert done.returncode == 0
    return out


@pytest.mark.parametrize(("signum", "status"), SIGNALS)
def test_report_stopped_by_a_signal_exits_128_plus_it(
    tables: Path, tmp_path: Path, signum: int, status: int
) -> None:
    assert stopped_while_writing(["report", str(tables), "--format", "json"], signum, tmp_path) == (
        status,
        "",
    )


def jvm_child(pid: int) -> int | None:
    """The PID of a `java` child of ``pid``, if one runs."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            if Path(f"/proc/{child}/comm").read_text().strip() == "java":
                return int(child)
    return None


@pytest.mark.parametrize(("signum", "status"), SIGNALS)
def test_spark_stopped_by_a_signal_exits_128_plus_it_and_writes_nothing(
    tmp_path: Path, signum: int, status: int
) -> None:
    proc = start(
        "spark",
        str(QUICKSTART),
        "--out",
        "t",
        "--master",
        "local[1]",
        "-q",
        stdout=subprocess.PIPE,
        cwd=tmp_path,
    )
    jvm = None
    try:
        deadline = time.monotonic() + WAIT_S
        while (jvm := jvm_child(proc.pid)) is None:
            assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
            assert time.monotonic() < deadline, "no JVM started"
            time.sleep(0.1)
        proc.send_signal(signum)  # the Python driver's PID only, as `kill PID` does
        stdout, stderr = proc.communicate(timeout=WAIT_S)
    finally:
        stop_process(proc, signal.SIGKILL)  # type: ignore[arg-type]
    assert proc.returncode == status, stderr.decode()[-2000:]
    assert "Traceback" not in stderr.decode() and "Aborted!" not in stderr.decode()
    assert not (tmp_path / "t").exists()
    # The JVM ends with its driver (PySpark's gateway exits when its stdin closes).
    deadline = time.monotonic() + WAIT_S
    while Path(f"/proc/{jvm}").exists() and "(java)" in Path(f"/proc/{jvm}/stat").read_text():
        if Path(f"/proc/{jvm}/stat").read_text().split(") ", 1)[1].startswith("Z"):
            break  # exited, not yet reaped by init
        if time.monotonic() > deadline:
            os.kill(jvm, signal.SIGKILL)
            pytest.fail("the JVM outlived its driver")
        time.sleep(0.1)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_capture_stopped_by_a_signal_commits_and_exits_0(tmp_path: Path, signum: int) -> None:
    assert os.geteuid() == 0, "live capture needs root"
    port = free_port()  # nothing listens there: the capture sees no packet, and commits its empty period
    proc = start("capture", "lo", "-p", str(port), "--out", "live", stdout=subprocess.PIPE, cwd=tmp_path)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline().decode()
        assert line.startswith("kwsniff: capturing on lo"), line
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=WAIT_S)
    finally:
        stop_process(proc, signal.SIGKILL)  # type: ignore[arg-type]
    assert proc.returncode == 0, stderr.decode()
    assert "Traceback" not in stderr.decode()
    assert re.match(rb"lo-\S+: 0 packets", stdout), stdout
    assert ds.dataset(tmp_path / "live" / "capture_stats").to_table().column("packets").to_pylist() != []
