"""Key log files for TLS decryption (`--keylog`): read once for a file, followed as they grow for a
live capture, where clients append a connection's secrets as it opens."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from kwsniff.tls import KeyLog

# A live capture looks at its key log files again at most this often (on a key it has not seen).
FOLLOW_INTERVAL_S = 0.05


class KeyLogError(Exception):
    """A key log file that cannot be read (one line for the user)."""


def load_keylog(paths: Sequence[str | Path]) -> KeyLog | None:
    """The secrets of every file, or None when no file was named."""
    if not paths:
        return None
    keys = KeyLog()
    for path in paths:
        try:
            keys.add_text(Path(path).read_bytes())
        except OSError as exc:
            raise KeyLogError(f"--keylog {path}: {exc.strerror or exc}") from None
        keys.end()
    return keys


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
                with path.open("rb") as f:
                    size = f.seek(0, 2)
                    if size < self.offsets[i]:
                        self.offsets[i] = 0  # replaced or truncated: read it anew
                    f.seek(self.offsets[i])
                    data = f.read()
            except OSError:
                continue  # removed while a capture runs: keep what was read
            self.offsets[i] += len(data)
            if data:
                self.keys.add_text(data)


def follow_keylog(paths: Sequence[str | Path]) -> KeyLog | None:
    """A key log that re-reads its files when a connection's keys are not known yet."""
    if not paths:
        return None
    keys = KeyLog()
    follower = KeyLogFollower(paths, keys)
    keys.refresh = follower
    return keys
