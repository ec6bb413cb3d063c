"""The driver's JVM is stopped when the session never started.

PySpark starts the JVM (``spark-submit pyspark-shell``) as a child of the driver, with Ctrl-C
ignored there, and the JVM exits when the driver's end of its stdin closes, but only once its
gateway is up. A driver stopped while the JVM starts (Ctrl-C, SIGTERM, a failure) would leave it
running, orphaned, holding the driver's stdout and stderr open: so on the way out the driver
sends SIGTERM, by PID, to the child processes the session's start made (`spark-submit`, a shell
script until it execs the JVM).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def jvm_stopped_unless_started() -> Iterator[None]:
    """The block starts a Spark session; if it raises (an interrupt included), the JVMs it started
    are stopped before the exception goes on."""
    before = set(children())
    try:
        yield
    except BaseException:
        for pid in set(children()) - before:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        raise


def children() -> list[int]:
    """PIDs of this process's child processes (Linux /proc; elsewhere none)."""
    found = []
    with contextlib.suppress(OSError):
        for task in Path("/proc/self/task").iterdir():
            found += [int(pid) for pid in (task / "children").read_text().split()]
    return found
