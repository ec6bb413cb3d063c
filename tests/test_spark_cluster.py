"""`kwsniff spark` where users run it (issue 21): a real standalone cluster started with pyspark's own
`bin/spark-class` on 127.0.0.1, executors that import the driver's kwsniff, the venv shipped with
`--ship-env`, and one line when a folder named `kwsniff` shadows the package.

The worker's PATH has no kwsniff and no Python with pyspark (/usr/bin:/bin), so an executor runs only
the interpreter the driver names. The worker runs in a mount namespace (`unshare -m`) where a tmpfs
hides the test venv: only the pack that `--ship-env` sends can run its tasks there (case B). One
Master and Worker serve the module: two JVMs take a minute to start on a loaded machine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink
from kwsniff.spark.executors import DRIVER_PYTHON_CONF, PYTHON_CONF, executor_python, failure
from kwsniff.spark.shipping import _editable
from kwsniff.tables import DEFAULT_TABLES
from kwsniff.tables.schemas import SCHEMAS
from kwsniff.view.summary import human_size
from tests.realparts import LOOPBACK, free_ports, stop_process, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
# The row tables; the per-input `captures` rows are compared with read's in tests/test_spark_isolation.py.
ROW_TABLES = tuple(t for t in DEFAULT_TABLES if t != "captures")
CAPTURES = [ROOT / "sample_pcaps/quickstart.pcap", ROOT / "tests/data/captures/kafka_python.pcap"]
SPARK_HOME = Path(__import__("pyspark").__file__).parent
PLAIN_PATH = "/usr/bin:/bin"  # java, sh, unshare; no kwsniff, no Python with pyspark
READY_TIMEOUT_S = 120.0  # two JVMs starting on a loaded two-core machine
RUN_TIMEOUT_S = 480.0
SHADOW_LINE = (
    "(a namespace folder), not the installed kwsniff 0.1.0; run from another directory or use --ship-env"
)


def _key(row: dict[str, Any]) -> tuple[str, ...]:
    return tuple(repr(row[k]) for k in sorted(row))


@pytest.fixture(scope="module")
def expected() -> dict[str, list[dict[str, Any]]]:
    """What `kwsniff read` writes for CAPTURES, normalised through the tables' Arrow schemas."""
    found: dict[str, list[dict[str, Any]]] = {t: [] for t in ROW_TABLES}
    for path in CAPTURES:
        sink = ListSink()
        run_capture(path, sink, SessionOptions())
        for t in ROW_TABLES:
            found[t] += pa.Table.from_pylist(sink.tables[t], schema=SCHEMAS[t]).to_pylist()
    return {t: sorted(rows, key=_key) for t, rows in found.items()}


def spark_rows(out: Path) -> dict[str, list[dict[str, Any]]]:
    found = {}
    for t in ROW_TABLES:
        rows = ds.dataset(out / t, partitioning="hive").to_table().to_pylist() if (out / t).exists() else []
        for row in rows:
            row.pop("date")
        found[t] = sorted(rows, key=_key)
    return found


def _master_ui_port(master_log: Path, asked: int) -> int:
    """The port the master's web UI really bound: Spark moves to the next one when ``asked`` is taken."""
    found = re.search(rb"Successfully started service 'MasterUI' on port (\d+)", master_log.read_bytes())
    return int(found.group(1)) if found else asked


def _wait_for_worker(
    ui_port: int, master_log: Path, master: subprocess.Popen[bytes], worker: subprocess.Popen[bytes]
) -> None:
    """Bounded wait until the master's JSON status lists one ALIVE worker."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    seen = "nothing"
    for _ in range(1000):
        for proc, name in ((master, "master"), (worker, "worker")):
            if proc.poll() is not None:
                raise RuntimeError(f"spark {name} exited early with code {proc.returncode}")
        url = f"http://{LOOPBACK}:{_master_ui_port(master_log, ui_port)}/json/"
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                body = answer.read()
            status = json.loads(body)
            if any(w["state"] == "ALIVE" for w in status["workers"]):
                return
            seen = f"{url}: {len(status['workers'])} workers, none ALIVE"
        except OSError as e:
            seen = f"{url}: {e}"
        except (ValueError, KeyError, TypeError):
            seen = f"{url}: not the master's status: {body[:80]!r}"
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    raise TimeoutError(f"no worker registered with the master within {READY_TIMEOUT_S}s (last: {seen})")


@contextmanager
def standalone(tmp_path: Path, *, hidden: Path) -> Iterator[str]:
    """A standalone Master and Worker on 127.0.0.1 (yields the master URL), stopped by PID. ``hidden``:
    a path the worker must not see (a tmpfs is mounted over it in the worker's own mount namespace)."""
    port, ui_port, worker_ui = free_ports(3)
    env = {
        "PATH": PLAIN_PATH,
        "HOME": str(tmp_path),
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": LOOPBACK,
        "SPARK_WORKER_DIR": str(tmp_path / "work"),
    }
    if shutil.which("java", path=PLAIN_PATH) is None and os.environ.get("JAVA_HOME"):
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    spark_class = str(SPARK_HOME / "bin/spark-class")
    master_cmd = [spark_class, "org.apache.spark.deploy.master.Master"]
    master_cmd += ["--host", LOOPBACK, "--port", str(port), "--webui-port", str(ui_port)]
    worker_cmd = [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", LOOPBACK, "--cores", "2"]
    worker_cmd += ["--memory", "1g", "--webui-port", str(worker_ui), f"spark://{LOOPBACK}:{port}"]
    # `exec` keeps one PID from unshare to the worker's JVM (spark-class execs java too).
    mount = 'mount -t tmpfs tmpfs "$0" && exec "$@"'
    worker_cmd = ["unshare", "-m", "sh", "-c", mount, str(hidden), *worker_cmd]
    logs = tmp_path / "logs"
    logs.mkdir()
    with open(logs / "master.log", "wb") as master_log, open(logs / "worker.log", "wb") as worker_log:
        master = subprocess.Popen(master_cmd, env=env, stdout=master_log, stderr=subprocess.STDOUT)
        worker = None
        try:
            wait_for_port(port, master, None, READY_TIMEOUT_S)
            worker = subprocess.Popen(worker_cmd, env=env, stdout=worker_log, stderr=subprocess.STDOUT)
            _wait_for_worker(ui_port, logs / "master.log", master, worker)
            yield f"spark://{LOOPBACK}:{port}"
        finally:
            if worker is not None:
                stop_process(worker)
            stop_process(master)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real venv holding this worktree's kwsniff with the spark extra (pip's cache makes it quick)."""
    where = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(where / "bin/python"), "install", "--quiet"]
        # --no-compile: half the install's CPU time, and a smaller pack for --ship-env to build.
        + ["--disable-pip-version-check", "--no-compile", f"{ROOT}[spark]"],
        check=True,
        timeout=RUN_TIMEOUT_S,
        stdout=subprocess.DEVNULL,
    )
    return where


@pytest.fixture(scope="module")
def master(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The module's standalone cluster, whose worker cannot see ``venv``."""
    with standalone(tmp_path_factory.mktemp("standalone"), hidden=venv) as url:
        yield url


def kwsniff(
    args: list[str], *, cwd: Path, python: Path | str = sys.executable, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`kwsniff ARGS` as a user runs it: the installed script of ``python``'s environment (no
    PYTHONPATH), or this worktree through ``-m`` and PYTHONPATH when ``python`` is this one."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "PYSPARK_", "SPARK_"))}
    base.update(env or {})
    if python == sys.executable:
        command = [sys.executable, "-m", "kwsniff", *args]
        base["PYTHONPATH"] = str(ROOT)
    else:
        command = [str(Path(python).parent / "kwsniff"), *args]
    return subprocess.run(command, cwd=cwd, env=base, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)


def errors_of(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("kwsniff: ")]


def test_executors_run_the_drivers_python_on_a_standalone_cluster(
    master: str, tmp_path: Path, expected: dict
) -> None:
    """Case A: the worker sees the driver's environment but has none of its PATH: the executors run
    the driver's interpreter, and the tables equal `read`'s."""
    out = tmp_path / "kafka-tables"
    # The executors find this worktree's kwsniff as the driver does (an installed copy needs nothing);
    # PySpark puts spark.executorEnv.PYTHONPATH on its workers' path.
    here = ["--conf", f"spark.executorEnv.PYTHONPATH={ROOT}"]
    result = kwsniff(
        ["spark", *map(str, CAPTURES), "--out", str(out), "--master", master, *here], cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert errors_of(result) == []
    assert spark_rows(out) == expected


def pack_line(result: subprocess.CompletedProcess[str]) -> str:
    return next(line for line in result.stdout.splitlines() if line.startswith("--ship-env: "))


def test_only_the_shipped_venv_runs_where_the_workers_cannot_see_it(
    venv: Path, master: str, tmp_path: Path, expected: dict
) -> None:
    """Case B: the worker's mount namespace hides the driver's venv. Without --ship-env the job fails
    in one line; with it the tables equal `read`'s, and a second run reuses the cached pack."""
    cache = tmp_path / "cache"
    python = venv / "bin/python"
    common = ["spark", *map(str, CAPTURES), "--out", str(tmp_path / "kafka-tables")]
    # One attempt per task (--conf, as spark-submit's): a missing interpreter is missing on a retry too.
    once = ["--conf", "spark.task.maxFailures=1"]
    bare = kwsniff([*common, "--master", master, *once], cwd=tmp_path, python=python)
    shipped = kwsniff(
        [*common, "--master", master, "--ship-env"],
        cwd=tmp_path,
        python=python,
        env={"XDG_CACHE_HOME": str(cache)},
    )
    assert shipped.returncode == 0, shipped.stderr[-3000:]
    assert spark_rows(tmp_path / "kafka-tables") == expected
    (pack,) = (cache / "kwsniff").iterdir()
    built_at = pack.stat().st_mtime_ns
    again = kwsniff(
        [*common, "--master", master, "--ship-env", "--overwrite"],
        cwd=tmp_path,
        python=python,
        env={"XDG_CACHE_HOME": str(cache)},
    )
    assert bare.returncode == 1
    assert errors_of(bare) == [
        f"kwsniff: error: executors could not start python {python} (No such file or directory): "
        "the workers lack this environment; use --ship-env"
    ]
    assert "Traceback" not in bare.stderr
    assert pack.name.startswith("venv-env-") and pack.name.endswith(".tar.gz")
    assert pack_line(shipped).startswith("--ship-env: built in ")
    assert pack_line(shipped).endswith(f": {pack} ({human_size(pack.stat().st_size)})")
    assert again.returncode == 0, again.stderr[-3000:]
    assert pack_line(again) == f"--ship-env: reused: {pack} ({human_size(pack.stat().st_size)})"
    assert pack.stat().st_mtime_ns == built_at
    assert spark_rows(tmp_path / "kafka-tables") == expected


def test_a_kwsniff_folder_in_the_working_directory_never_shadows_the_installed_package(
    venv: Path, tmp_path: Path, expected: dict
) -> None:
    """Run from the folder above a clone (a `kwsniff/` folder without __init__.py, holding a
    `tables/` output): the executors run the venv's interpreter, whose installed kwsniff wins."""
    (tmp_path / "kwsniff/tables").mkdir(parents=True)
    (tmp_path / "kwsniff/kwsniff").mkdir()
    result = kwsniff(
        ["spark", *map(str, CAPTURES), "--out", "kafka-tables", "--master", "local[2]"],
        cwd=tmp_path,
        python=venv / "bin/python",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert spark_rows(tmp_path / "kafka-tables") == expected


def test_executors_that_import_a_namespace_kwsniff_fail_in_one_line_naming_it(
    venv: Path, tmp_path: Path
) -> None:
    """Executors told to run this test's interpreter, where kwsniff is an editable install (its
    finder comes after sys.path), and to put the working directory first on sys.path (kwsniff's
    PYTHONSAFEPATH=1 for local workers undone, as Spark's `python -m` does on a cluster): the
    `kwsniff/` folder there is what they import, and the task check names it."""
    (tmp_path / "kwsniff/tables").mkdir(parents=True)
    result = kwsniff(
        ["spark", str(CAPTURES[0]), "--out", "kafka-tables", "--master", "local[1]"]
        + ["--conf", f"spark.pyspark.python={sys.executable}", "--conf", "spark.executorEnv.PYTHONSAFEPATH="],
        cwd=tmp_path,
        python=venv / "bin/python",
    )
    assert result.returncode == 1
    assert errors_of(result) == [
        f"kwsniff: error: executor imported kwsniff from {tmp_path}/kwsniff {SHADOW_LINE}"
    ]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "kafka-tables").exists()


def test_ship_env_outside_a_venv_is_one_error_line(tmp_path: Path) -> None:
    # The base interpreter of whatever runs the tests (CI runs them in .venv), given this
    # environment's packages on PYTHONPATH: a Python that is not in a virtual environment.
    base = Path(sys.base_prefix) / "bin" / "python3"
    site = sysconfig.get_paths()["purelib"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), site])}
    executable = subprocess.run(
        [str(base), "-c", "import sys; print(sys.executable)"], capture_output=True, text=True, check=True
    ).stdout.strip()
    result = subprocess.run(
        [str(base), "-m", "kwsniff", "spark", str(CAPTURES[0]), "--out", "o"]
        + ["--master", "spark://127.0.0.1:7077", "--ship-env"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"kwsniff: error: --ship-env packs the virtual environment kwsniff runs from, but {executable} "
        "is not in one; create one (python3 -m venv ENV && ENV/bin/pip install 'kwsniff[spark]') and run "
        "ENV/bin/kwsniff"
    ]


def test_ship_env_refuses_a_venv_with_system_site_packages(tmp_path: Path) -> None:
    env = tmp_path / "env"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(env)], check=True
    )
    result = subprocess.run(
        [str(env / "bin/python"), "-m", "kwsniff", "spark", str(CAPTURES[0]), "--out", "o", "--ship-env"]
        + ["--master", "spark://127.0.0.1:7077"],
        cwd=tmp_path,
        # kwsniff and its dependencies from this checkout and the test venv: the system site-packages
        # (the base interpreter's) need not hold them, so the refusal is what the run reaches.
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *site.getsitepackages()])},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"kwsniff: error: --ship-env: {env} uses the system site-packages, which a pack cannot hold; "
        "create the venv without --system-site-packages"
    ]


def test_editable_installs_are_found_by_their_direct_url(tmp_path: Path) -> None:
    """PEP 610: pip records `dir_info.editable` for `pip install -e`; venv-pack would pack only the
    finder that points back at the source tree."""
    for name, url in {
        "kwsniff-0.1.0": {"url": "file:///src/kwsniff", "dir_info": {"editable": True}},
        "click-8.1.7": {"url": "file:///wheels/click.whl", "archive_info": {}},
    }.items():
        (tmp_path / f"{name}.dist-info").mkdir()
        (tmp_path / f"{name}.dist-info/direct_url.json").write_text(json.dumps(url))
    (tmp_path / "rich-13.0.0.dist-info").mkdir()
    assert _editable(tmp_path) == ["kwsniff"]


def test_executors_run_the_users_python_else_the_drivers() -> None:
    """The user's own choice wins, then PYSPARK_PYTHON; --ship-env always runs the shipped venv."""
    driver = {DRIVER_PYTHON_CONF: sys.executable}
    assert executor_python({}, {}, shipped=False) == {PYTHON_CONF: sys.executable, **driver}
    assert executor_python({}, {"PYSPARK_PYTHON": "/opt/py"}, shipped=False) == {
        PYTHON_CONF: "/opt/py",
        **driver,
    }
    conf = {PYTHON_CONF: "/usr/bin/python3.11"}
    assert (
        executor_python(conf, {"PYSPARK_PYTHON": "/opt/py"}, shipped=False)[PYTHON_CONF]
        == "/usr/bin/python3.11"
    )
    assert executor_python(conf, {}, shipped=True)[PYTHON_CONF] == "./environment/bin/python"


def test_a_failed_job_names_the_executors_python_in_one_line() -> None:
    """What PySpark raises holds the executors' traceback; the line is taken from it, or None."""
    started = RuntimeError(
        "py4j.protocol.Py4JJavaError: An error occurred while calling o51.collectToPython.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 0.0 failed 4 "
        'times, most recent failure: Lost task 0.3: java.io.IOException: Cannot run program "/venv/bin/python": '
        "error=2, No such file or directory\n\tat java.base/java.lang.ProcessBuilder.start(ProcessBuilder.java:1143)"
    )
    assert failure(started) == (
        "executors could not start python /venv/bin/python (No such file or directory): the workers lack "
        "this environment; use --ship-env"
    )
    checked = RuntimeError(
        'Traceback (most recent call last):\n  File "<string>", line 1, in run\nRuntimeError: executor imported '
        "kwsniff from /x/kwsniff (a namespace folder), not the installed kwsniff 0.1.0; run from another "
        "directory or use --ship-env\n\n\tat org.apache.spark.api.python.BasePythonRunner"
    )
    assert failure(checked) == f"executor imported kwsniff from /x/kwsniff {SHADOW_LINE}"
    assert failure(RuntimeError("java.lang.OutOfMemoryError: Java heap space")) is None


def test_executors_upload_their_files_to_s3_and_the_driver_commits_them_on_a_standalone_cluster(
    tmp_path: Path, expected: dict
) -> None:
    """`spark --out s3://` on a real standalone cluster whose worker cannot see the driver's
    temporary directory (a tmpfs over it in the worker's mount namespace): no file can reach the
    driver but through the S3 server (SeaweedFS), so the executors' tasks upload their tables'
    files there and the driver commits them. The Delta tables hold the rows `read` writes."""
    from deltalake import DeltaTable
    from seaweed import seaweed_s3

    from kwsniff.sinks.delta import table_dataset
    from kwsniff.sinks.location import parse_location

    driver_tmp, cluster = tmp_path / "driver-tmp", tmp_path / "cluster"
    driver_tmp.mkdir()
    cluster.mkdir()
    with seaweed_s3(tmp_path / "seaweed") as s3, standalone(cluster, hidden=driver_tmp) as url:
        uri = s3.uri("cluster-tables")
        here = ["--conf", f"spark.executorEnv.PYTHONPATH={ROOT}"]
        env = {**s3.storage_options(), "TMPDIR": str(driver_tmp)}
        result = kwsniff(
            ["spark", *map(str, CAPTURES), "--out", uri, "--master", url, *here], cwd=tmp_path, env=env
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert errors_of(result) == []
        options = s3.storage_options()
        location = parse_location(uri, options)
        got = {}
        for t in ROW_TABLES:
            rows = table_dataset(location, t).to_table().to_pylist() if expected[t] else []
            got[t] = sorted(({k: r[k] for k in SCHEMAS[t].names} for r in rows), key=_key)
        assert got == expected
        # The tables' files are the tasks' uploads, named by capture, added in one commit.
        for table in ("requests", "partitions"):
            delta = DeltaTable(f"{uri}/{table}", storage_options=options)
            names = sorted(Path(p).name.split("-task-")[0] for p in delta.file_uris())
            assert names == sorted(c.name for c in CAPTURES) and delta.version() == 1, table
