"""Datasets that are always whole (issue 22, part A): a run publishes --out in one step, every run and
input has a name of its own, and signals, a full disk and over-long names end a run cleanly."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pyarrow.dataset as ds
import pytest

from kwsniff.sinks import ExistingOutput, Output, OutputError, output_name
from kwsniff.sinks import commit as commit_module
from kwsniff.tables import DEFAULT_TABLES
from kwsniff.tables.names import SUMMARIES

CAPTURES = Path(__file__).parent / "data" / "captures"
ACKS = CAPTURES / "acks_modes.pcap"  # 103 requests, 10 connections
KP = CAPTURES / "kafka_python.pcap"  # 46 requests, 7 connections
CODECS = CAPTURES / "produce_codecs.pcap"
WAIT_S = 60.0


def kwsniff(*args: str, stdin: IO[bytes] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kwsniff", *args], capture_output=True, text=True, timeout=180, stdin=stdin
    )


def start(*args: str, **kw: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "kwsniff", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw
    )


@contextlib.contextmanager
def all_exit_0(procs: list[subprocess.Popen[bytes]]) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Runs started into ``procs`` inside the block run together; after it each must exit 0 within
    WAIT_S, and any still running (a failed assertion, a timeout) is killed."""
    try:
        yield procs
        for proc in procs:
            _, err = proc.communicate(timeout=WAIT_S)
            assert proc.returncode == 0, err
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def version(out: Path, tables: tuple[str, ...] = DEFAULT_TABLES) -> dict[str, tuple[int, str]]:
    """Rows and a digest of the rows (without the `capture` column) of each table."""
    found = {}
    for table in tables:
        rows = ds.dataset(out / table).to_table().to_pylist()
        # A `captures` row also says where and when the input was read, which differs run to run.
        volatile = {"capture", "path", "started", "duration_ms"} if table == "captures" else {"capture"}
        flat = sorted(repr(sorted((k, v) for k, v in r.items() if k not in volatile)) for r in rows)
        found[table] = (len(rows), hashlib.sha256("\n".join(flat).encode()).hexdigest()[:16])
    return found


def leftovers(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.kwsniff-"))


def hidden_files(out: Path) -> list[str]:
    return sorted(str(p) for p in out.rglob(".*"))


# --- one step: the commit ---------------------------------------------------------------------


def test_overwrite_with_a_missing_input_changes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "t"
    assert kwsniff("read", str(ACKS), "-o", str(out)).returncode == 0
    before, inode = version(out), out.stat().st_ino
    missing = tmp_path / "missing.pcap"
    proc = kwsniff("read", str(KP), str(missing), "-o", str(out), "--overwrite")
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == f"kwsniff: error: {missing}: no such file\n"
    assert version(out) == before and out.stat().st_ino == inode
    assert leftovers(out) == []


def test_overwrite_swaps_in_a_new_directory_and_keeps_what_is_not_a_table(tmp_path: Path) -> None:
    out = tmp_path / "t"
    assert kwsniff("read", str(ACKS), "-o", str(out)).returncode == 0
    (out / "notes.txt").write_text("mine")
    (out / "requests" / ".stale.parquet.tmp").write_bytes(b"left by an old kwsniff")
    inode = out.stat().st_ino
    proc = kwsniff("read", str(KP), "-o", str(out), "--overwrite", "-q", "--summaries", "always")
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_ino != inode  # the staged directory took the old one's place
    assert version(out)["requests"][0] == 46
    assert sorted(p.name for p in out.iterdir()) == sorted([*DEFAULT_TABLES, *SUMMARIES, "notes.txt"])
    assert (out / "notes.txt").read_text() == "mine"
    for table in DEFAULT_TABLES:
        assert sorted(p.name for p in (out / table).iterdir()) == [f"{output_name(KP)}.parquet"]
    assert leftovers(out) == []


def test_append_keeps_the_old_files_by_hard_link(tmp_path: Path) -> None:
    out = tmp_path / "t"
    assert kwsniff("read", str(ACKS), "-o", str(out)).returncode == 0
    old = out / "requests" / f"{output_name(ACKS)}.parquet"
    inode = old.stat().st_ino
    assert kwsniff("read", str(KP), "-o", str(out), "--append", "-q").returncode == 0
    assert old.stat().st_ino == inode and old.stat().st_nlink == 1  # the same file, not a copy
    assert version(out)["requests"][0] == 103 + 46
    assert leftovers(out) == []


def test_a_commit_that_cannot_exchange_falls_back_to_two_renames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unsupported(a: Path, b: Path) -> None:
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(commit_module, "exchange", unsupported)
    out = tmp_path / "t"
    for content in ("old", "new"):
        output = Output(out, ExistingOutput.OVERWRITE)
        (output.stage / "requests").mkdir()
        (output.stage / "requests" / f"{content}.parquet").write_text(content)
        output.commit()
        output.close()
    assert sorted(p.name for p in (out / "requests").iterdir()) == ["new.parquet"]
    assert leftovers(out) == []


def staged_by_a_dead_run(out: Path, kind: str, content: str) -> Path:
    path = out.parent / f".{out.name}.kwsniff-{kind}-99999-0badc0de"
    (path / "requests").mkdir(parents=True)
    (path / "requests" / f"{content}.parquet").write_text(content)
    return path


def test_a_kill_between_the_fallbacks_renames_is_finished_by_the_next_run(tmp_path: Path) -> None:
    out = tmp_path / "t"
    # Killed after `out` was moved away and before the ready directory took its place: no `out`.
    staged_by_a_dead_run(out, "ready", "new")
    staged_by_a_dead_run(out, "stage", "old")
    Output(out, ExistingOutput.APPEND).close()
    assert sorted(p.name for p in (out / "requests").iterdir()) == ["new.parquet"]
    assert leftovers(out) == []
    # Killed before `out` was moved: the ready directory was never published and is dropped.
    staged_by_a_dead_run(out, "ready", "newer")
    Output(out, ExistingOutput.APPEND).close()
    assert sorted(p.name for p in (out / "requests").iterdir()) == ["new.parquet"]
    assert leftovers(out) == []


def test_leftovers_of_dead_runs_go_and_a_live_runs_staging_stays(tmp_path: Path) -> None:
    out = tmp_path / "t"
    dead = staged_by_a_dead_run(out, "stage", "dead")
    live = out.parent / f".{out.name}.kwsniff-stage-1-live"
    live.mkdir()
    fd = os.open(live, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as the run that made it holds it while it lives
        output = Output(out, ExistingOutput.REFUSE)
        assert not dead.exists() and live.exists()
        assert leftovers(out) == sorted([live.name, output.stage.name])
        output.close()
    finally:
        os.close(fd)
    assert leftovers(out) == [live.name]


def test_a_dataset_written_meanwhile_into_an_empty_out_is_not_mixed_with(tmp_path: Path) -> None:
    out = tmp_path / "t"
    first = Output(out, ExistingOutput.REFUSE)
    (first.stage / "requests").mkdir()
    (first.stage / "requests" / "first.parquet").write_text("first")
    assert kwsniff("read", str(KP), "-o", str(out), "-q").returncode == 0
    with pytest.raises(OutputError, match=r"another run wrote .*requests.* meanwhile; nothing was written$"):
        first.commit()
    first.close()
    assert version(out)["requests"][0] == 46
    assert leftovers(out) == []


@pytest.mark.parametrize("kind", ["cwd", "mount"])
def test_an_out_a_swap_cannot_replace_is_refused(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "t"
    out.mkdir()
    if kind == "mount":
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(out)], check=True)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "kwsniff", "read", str(KP), "-o", "." if kind == "cwd" else str(out)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=out if kind == "cwd" else tmp_path,
        )
    finally:
        if kind == "mount":
            subprocess.run(["umount", str(out)], check=True)
    expected = {
        "cwd": "--out .: is (or holds) the working directory; name a directory for the tables",
        "mount": f"--out {out}: is a mount point; name a directory inside it for the tables",
    }[kind]
    assert (proc.returncode, proc.stdout, proc.stderr) == (1, "", f"kwsniff: error: {expected}\n")
    assert list(out.iterdir()) == []


# --- names --------------------------------------------------------------------------------------

STDIN_NAME = r"stdin-\d{8}T\d{6}Z-[0-9a-f]{6}"


def test_each_stdin_run_gets_its_own_name_so_append_adds(tmp_path: Path) -> None:
    out = tmp_path / "t"
    for extra in ((), ("--append",)):
        with KP.open("rb") as f:
            proc = kwsniff("read", "-", "-o", str(out), "-q", *extra, stdin=f)
        assert proc.returncode == 0, proc.stderr
    names = sorted(p.name for p in (out / "requests").iterdir())
    assert len(names) == 2 and all(re.fullmatch(STDIN_NAME + r"\.parquet", n) for n in names), names
    captures = ds.dataset(out / "requests").to_table().column("capture").to_pylist()
    assert sorted(set(captures)) == [n.removesuffix(".parquet") for n in names]
    assert len(captures) == 2 * 46


def test_two_concurrent_stdin_reads_into_one_out_both_land(tmp_path: Path) -> None:
    out = tmp_path / "t"
    procs: list[subprocess.Popen[bytes]] = []
    with all_exit_0(procs):
        for _ in range(2):
            read_end, write_end = os.pipe()
            fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 1 << 20)
            os.write(write_end, KP.read_bytes())
            os.close(write_end)
            procs.append(start("read", "-", "-o", str(out), "--append", "-q", stdin=read_end))
            os.close(read_end)
    for table in DEFAULT_TABLES:
        assert len(list((out / table).iterdir())) == 2, table
    assert version(out)["requests"][0] == 2 * 46
    assert leftovers(out) == [] and hidden_files(out) == []


def test_same_file_name_in_two_directories_across_appended_runs_gets_two_capture_keys(tmp_path: Path) -> None:
    for sub, src in (("a", ACKS), ("b", KP)):
        (tmp_path / sub).mkdir()
        shutil.copy(src, tmp_path / sub / "cap.pcap")
    out = tmp_path / "t"
    assert kwsniff("read", str(tmp_path / "a" / "cap.pcap"), "-o", str(out), "-q").returncode == 0
    assert kwsniff("read", str(tmp_path / "b" / "cap.pcap"), "-o", str(out), "-q", "--append").returncode == 0
    captures = ds.dataset(out / "requests").to_table().column("capture").to_pylist()
    # The first keeps its plain file name (as every single input does); the second, whose file name
    # the dataset already holds, gets the hash of its path that its file names carry.
    b = "cap.pcap-" + output_name(tmp_path / "b" / "cap.pcap").rsplit("-", 1)[1]
    assert {c: captures.count(c) for c in set(captures)} == {"cap.pcap": 103, b: 46}


def test_two_live_captures_started_together_have_their_own_names(tmp_path: Path) -> None:
    out = tmp_path / "live"
    # Two workers each: two fanout groups on one interface, one per run.
    args = ("capture", "lo", "-o", str(out), "--append", "--filter", "tcp port 1", "--duration", "1.5", "-q")
    with all_exit_0([]) as procs:
        procs += [start(*args, "--workers", "2") for _ in range(2)]
    stats = ds.dataset(out / "capture_stats").to_table().column("capture").to_pylist()
    assert len(set(stats)) == 2 and sorted(stats.count(c) for c in set(stats)) == [2, 2]  # a row per worker
    assert all(re.fullmatch(r"lo-\d{8}T\d{6}Z-[0-9a-f]{6}", c) for c in stats), stats
    # A live capture writes no `captures` table: its periods are in `capture_stats`.
    for table in (*(t for t in DEFAULT_TABLES if t != "captures"), "capture_stats"):
        assert sorted(p.name for p in (out / table).iterdir()) == sorted(
            f"{c}-w{w}-000001.parquet" for c in set(stats) for w in (0, 1)
        )
    assert leftovers(out) == []


# --- signals, a full disk, long names ------------------------------------------------------------


def wait_blocked_on_stdin(proc: subprocess.Popen[bytes], pipe: int) -> None:
    """Until the pipe is empty and the process sleeps reading it: all it was given is decoded."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        unread = fcntl.ioctl(pipe, termios.FIONREAD, b"\0\0\0\0")
        wchan = Path(f"/proc/{proc.pid}/wchan").read_text()
        if int.from_bytes(unread, sys.byteorder) == 0 and "pipe_read" in wchan:
            return
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.05)
    raise AssertionError("kwsniff never waited for more input")


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_ends_read_stdin_and_commits_what_was_read(tmp_path: Path, signum: int, status: int) -> None:
    out, reference = tmp_path / "t", tmp_path / "ref"
    assert kwsniff("read", str(KP), "-o", str(reference), "-q").returncode == 0
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 1 << 20)  # the whole capture fits: no writer thread
    proc = start("read", "-", "-o", str(out), stdin=read_end)
    os.close(read_end)
    try:
        os.write(write_end, KP.read_bytes())  # and the pipe stays open, as tcpdump's would
        wait_blocked_on_stdin(proc, write_end)
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=WAIT_S)
    finally:
        os.close(write_end)
        proc.kill()
        proc.wait()
    assert proc.returncode == status, stderr
    assert stderr == b""
    # The summary counts the bytes read from the pipe: the whole capture, 131.7 KB.
    assert re.fullmatch(STDIN_NAME + r": 158 packets, 131\.7 KB in .*", stdout.decode().splitlines()[0])
    rows = tuple(t for t in DEFAULT_TABLES if t != "captures")
    assert version(out, rows) == version(reference, rows)
    (row,) = ds.dataset(out / "captures").to_table().to_pylist()
    assert (row["path"], row["bytes"], row["packets"], row["status"]) == ("-", 131_687, 158, "ok")
    assert leftovers(out) == [] and hidden_files(out) == []


def big_input(tmp_path: Path, copies: int = 6) -> list[str]:
    """Several inputs that together take a few seconds to decode."""
    paths = []
    for n in range(copies):
        path = tmp_path / "in" / f"codecs-{n}.pcap"
        path.parent.mkdir(exist_ok=True)
        shutil.copy(CODECS, path)
        paths.append(str(path))
    return paths


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_during_a_file_read_leaves_the_old_dataset_and_no_staging(
    tmp_path: Path, signum: int, status: int
) -> None:
    out = tmp_path / "t"
    assert kwsniff("read", str(ACKS), "-o", str(out)).returncode == 0
    before = version(out)
    proc = start("read", *big_input(tmp_path), "-o", str(out), "--overwrite", "--records")
    try:
        deadline = time.monotonic() + WAIT_S
        # Until the run is writing its first files in its staging directory.
        while not any(p.name.endswith(".tmp") for p in out.parent.glob(f".{out.name}.kwsniff-stage-*/*/.*")):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.02)
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=WAIT_S)
    finally:
        proc.kill()
        proc.wait()
    assert (proc.returncode, stdout, stderr) == (status, b"", b"")
    assert version(out) == before
    assert leftovers(out) == [] and hidden_files(out) == []


@pytest.fixture
def small_disk(tmp_path: Path) -> Any:
    disk = tmp_path / "small"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_a_full_disk_is_one_line_and_leaves_the_old_dataset_and_no_temporary_file(small_disk: Path) -> None:
    out = small_disk / "t"
    assert kwsniff("read", str(ACKS), "-o", str(out), "-q").returncode == 0
    before = version(out)
    proc = kwsniff("read", str(CODECS), "-o", str(out), "--overwrite", "--record-payloads")
    assert (proc.returncode, proc.stdout) == (1, "")
    assert re.fullmatch(
        rf"kwsniff: error: {CODECS}: writing {out}: .*No space left on device\n", proc.stderr
    ), proc.stderr
    assert version(out) == before
    assert sorted(p.name for p in small_disk.iterdir()) == ["t"]
    assert hidden_files(out) == []


def test_a_file_name_too_long_for_out_is_refused_before_decoding(tmp_path: Path) -> None:
    long = tmp_path / ("k" * 245 + ".pcap")  # 250 bytes: fine here, too long with kwsniff's suffixes
    shutil.copy(KP, long)
    out = tmp_path / "t"
    proc = kwsniff("read", str(long), "-o", str(out))
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == (
        f"kwsniff: error: {long}: file name too long for --out (272 bytes with kwsniff's suffixes, "
        "the filesystem allows 255); rename or link the capture under a shorter name\n"
    )
    assert not out.exists() and leftovers(out) == []
