"""docs/spark.md's standalone commands work as written from a fresh venv (issue 34, item 6).

The commands come from the page: the venv of "What `--ship-env` does" (`python3 -m venv
~/kwsniff-env && ~/kwsniff-env/bin/pip install 'kwsniff[spark]'`) and the four lines of
"Standalone" (`SPARK_HOME`, the master, the worker, `kwsniff spark ... --ship-env`). Changed, and
only these: `kwsniff[spark]` is this worktree (`ROOT[spark]`), 10.0.0.1 is 127.0.0.1, 7077 a free
port, `/shared/` a folder of the test, `~` a home of the test. `PATH` holds no venv (`/usr/bin:/bin`
and java), as for a user who did not activate one; the web UIs get free ports and Spark's addresses
stay on loopback through Spark's own environment variables. The master and the worker are stopped
by PID. The tables are checked against tshark's view of the captures (docs/test-oracles.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

from tests.realparts import LOOPBACK, free_ports, stop_process, wait_for_port
from tests.test_spark_local_folders import CAPTURES, table_view, tshark_view

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "spark.md"
INSTALL_TIMEOUT_S = 1200.0  # a fresh venv with PySpark, its bytecode compiled, on a loaded machine
READY_TIMEOUT_S = 180.0
RUN_TIMEOUT_S = 900.0  # the pack is built in the run


def block_after(heading: str) -> list[str]:
    """The commands of the first code block after ``heading``: continued lines joined, comments cut."""
    text = PAGE.read_text(encoding="utf-8").split(heading + "\n", 1)[1]
    block = text.split("```\n", 1)[1].split("```", 1)[0]
    commands = block.replace("\\\n", "").splitlines()
    return [re.sub(r"\s+# .*$", "", c).strip() for c in commands if c.strip()]


def test_the_standalone_commands_work_as_written_from_a_fresh_venv(tmp_path: Path) -> None:
    home, shared = tmp_path / "home", tmp_path / "shared"
    home.mkdir()
    (shared / "captures").mkdir(parents=True)
    for capture in CAPTURES:
        shutil.copy(capture, shared / "captures")
    port, master_ui, worker_ui = free_ports(3)

    def here(command: str) -> str:
        command = command.replace("'kwsniff[spark]'", f"'{ROOT}[spark]'").replace("10.0.0.1", LOOPBACK)
        return command.replace("7077", str(port)).replace("/shared/", f"{shared}/")

    java = shutil.which("java")
    assert java is not None
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTHON", "PYSPARK_", "SPARK_", "VIRTUAL_ENV"))
    }
    env |= {
        "HOME": str(home),
        "PATH": f"{Path(java).resolve().parent}:/usr/bin:/bin",
        "SPARK_LOCAL_IP": LOOPBACK,
        "SPARK_LOCAL_HOSTNAME": LOOPBACK,
        "SPARK_MASTER_WEBUI_PORT": str(master_ui),
        "SPARK_WORKER_WEBUI_PORT": str(worker_ui),
        "SPARK_WORKER_DIR": str(tmp_path / "work"),
    }
    # The venv's `python3` is the system's (Debian's, with ensurepip: tools/install-test-deps.sh).
    assert shutil.which("python3", path=env["PATH"]) is not None

    (install,) = [c for c in block_after("### What `--ship-env` does") if c.startswith("python3 -m venv")]
    subprocess.run(["bash", "-c", here(install)], cwd=home, env=env, check=True, timeout=INSTALL_TIMEOUT_S)
    spark_home, master_line, worker_line, run_line = block_after("### Standalone")
    assert spark_home.startswith("export SPARK_HOME=")

    def start(line: str, log: Path) -> subprocess.Popen[bytes]:
        # spark-class execs java: with `exec` here too, the PID is the JVM's.
        with open(log, "wb") as out:
            return subprocess.Popen(
                ["bash", "-c", f"{here(spark_home)}\nexec {here(line)}"],
                cwd=home,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    master = start(master_line, tmp_path / "master.log")
    worker = None
    try:
        wait_for_port(port, master, None, READY_TIMEOUT_S)
        worker = start(worker_line, tmp_path / "worker.log")
        wait_for_alive_worker(master_ui, master, worker, tmp_path / "master.log")
        result = subprocess.run(
            ["bash", "-c", here(run_line)],
            cwd=home,
            env=env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
    finally:
        if worker is not None:
            stop_process(worker)  # type: ignore[arg-type]
        stop_process(master)  # type: ignore[arg-type]
    assert result.returncode == 0, result.stderr[-3000:]
    (built,) = [line for line in result.stdout.splitlines() if line.startswith("--ship-env: ")]
    (pack,) = (home / ".cache/kwsniff").glob("venv-kwsniff-env-*.tar.gz")
    assert re.fullmatch(rf"--ship-env: built in [\d.]+ s: {re.escape(str(pack))} \(\d+\.\d MB\)", built), (
        built
    )
    expected_requests, expected_connections = tshark_view(CAPTURES[0])
    for capture in CAPTURES[1:]:
        requests, connections = tshark_view(capture)
        expected_requests += requests
        expected_connections += connections
    assert table_view(shared / "kafka-tables") == (expected_requests, expected_connections)


def wait_for_alive_worker(
    ui_port: int, master: subprocess.Popen[bytes], worker: subprocess.Popen[bytes], master_log: Path
) -> None:
    """Bounded wait until the master's JSON status lists one ALIVE worker."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    seen = "nothing"
    for _ in range(2000):
        for proc, name in ((master, "master"), (worker, "worker")):
            assert proc.poll() is None, (
                f"spark {name} exited with {proc.returncode}: {master_log.read_text()[-2000:]}"
            )
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{ui_port}/json/", timeout=2) as answer:
                status = json.loads(answer.read())
            if any(w["state"] == "ALIVE" for w in status["workers"]):
                return
            seen = f"{len(status['workers'])} workers, none ALIVE"
        except (OSError, ValueError, KeyError) as e:
            seen = str(e)
        assert time.monotonic() < deadline, f"no worker registered within {READY_TIMEOUT_S}s (last: {seen})"
        time.sleep(0.5)
