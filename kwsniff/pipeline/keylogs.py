"""Key log files for TLS decryption (`--keylog`): read once for a file, followed as they grow for a
live capture, where clients append a connection's secrets as it opens."""

from __future__ import annotations

import fcntl
import os
import stat
import time
from collections.abc import Sequence
from pathlib import Path

from kwsniff.capture import pipes
from kwsniff.tls import KeyLog

# A live capture looks at its key log files again at most this often (on a key it has not seen).
FOLLOW_INTERVAL_S = 0.05
# Key log text is read this much at a time: the KeyLog holds what fits its cap, never the file.
READ_PIECE = 64 * 1024
# How long a FIFO named by --keylog may take to get a writer before it is refused.
WRITER_WAIT_MS = pipes.WRITER_WAIT_MS


class KeyLogError(Exception):
    """A key log file that cannot be read (one line for the user)."""


def load_keylog(paths: Sequence[str | Path], cap: int | None = None) -> KeyLog | None:
    """The secrets of every file, or None when no file was named; at most ``cap`` bytes of them
    are held (the oldest go first, counted). A regular file, or a pipe something writes into
    (`--keylog <(...)`); anything else (a device, a FIFO nobody writes to) is refused."""
    if not paths:
        return None
    keys = KeyLog(cap=cap)
    for path in paths:
        try:
            fd, first = _open_keylog(str(path))
            keys.add_text(first)
            with os.fdopen(fd, "rb", buffering=0) as f:
                while data := f.read(READ_PIECE):
                    keys.add_text(data)
        except OSError as exc:
            raise KeyLogError(f"--keylog {path}: {exc.strerror or exc}") from None
        keys.end()
    return keys


def _open_keylog(path: str) -> tuple[int, bytes]:
    """A descriptor of a regular file or of a pipe with a writer, set to blocking reads, and the
    bytes already read from a pipe to learn whether it has a writer."""
    # Non-blocking, so that opening a FIFO nobody has opened for writing does not wait for ever.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        first = b""
        if stat.S_ISFIFO(mode):
            first = _first_bytes(fd, path)
        elif not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "a device or socket"
            raise KeyLogError(f"--keylog {path}: {kind}, not a key log file")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd, first


def _first_bytes(fd: int, path: str) -> bytes:
    """What a pipe holds now (kwsniff.capture.pipes: a bounded wait for its writer)."""
    first = pipes.first_bytes(fd, READ_PIECE, WRITER_WAIT_MS)
    if first is None:
        raise KeyLogError(f"--keylog {path}: a pipe nobody writes to")
    return first


class KeyLogFollower:
    """Reads what was appended to key log files since the last look (KeyLog.refresh)."""

    def __init__(
        self, paths: Sequence[str | Path], keys: KeyLog, interval: float = FOLLOW_INTERVAL_S
    ) -> None:
        self.paths = [Path(p) for p in paths]
        self.keys = keys
        self.interval = interval
        self.offsets = [0] * len(self.paths)
        self.last = 0.0
        self.read_now()

    def __call__(self) -> None:
        if time.monotonic() - self.last >= self.interval:
            self.read_now()

    def read_now(self) -> None:
        self.last = time.monotonic()
        for i, path in enumerate(self.paths):
            try:
                if not stat.S_ISREG(path.stat().st_mode):
                    continue  # replaced by something that is not a file: keep what was read
                with path.open("rb") as f:
                    size = f.seek(0, 2)
                    if size < self.offsets[i]:
                        self.offsets[i] = 0  # replaced or truncated: read it anew
                    f.seek(self.offsets[i])
                    while data := f.read(READ_PIECE):
                        self.offsets[i] += len(data)
                        self.keys.add_text(data)
            except OSError:
                continue  # removed while a capture runs: keep what was read


def follow_keylog(paths: Sequence[str | Path], cap: int | None = None) -> KeyLog | None:
    """A key log that re-reads its files when a connection's keys are not known yet (regular files
    only: a client appends to them); at most ``cap`` bytes of secrets are held."""
    if not paths:
        return None
    for path in paths:
        try:
            mode = os.stat(path).st_mode
        except OSError:
            continue  # not there yet: a client creates it when it connects
        if not stat.S_ISREG(mode):
            raise KeyLogError(
                f"--keylog {path}: not a regular file (a live capture follows a file as it grows)"
            )
    keys = KeyLog(cap=cap)
    follower = KeyLogFollower(paths, keys)
    keys.refresh = follower
    return keys
