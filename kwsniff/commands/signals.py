"""How a signal ends a kwsniff command: the one rule, stated in docs/datasets.md ("How runs end").

- `kwsniff capture` is meant to be stopped by Ctrl-C or SIGTERM: the signal ends the capture
  cleanly (the last period's rows committed, the summary printed) and, when everything was
  committed, the run succeeded: exit status 0 (:func:`stop_on_signals`).
- Every other command stopped by SIGINT (Ctrl-C) or SIGTERM before it finished exits with 128 + the
  signal, 130 or 143, as a shell reports a process the signal ended (`read` commits what it read
  from standard input first, and abandons a file it was reading: kwsniff/commands/read.py).
  The process's SIGTERM handler (kwsniff/entry.py) raises :class:`Interrupted`, which unwinds the
  command as Ctrl-C's KeyboardInterrupt does (its ``finally`` blocks remove staging folders and
  temporary files), and the command group (kwsniff/cli.py) turns either into the exit status
  (:func:`exit_status`).
"""

from __future__ import annotations

import signal
import threading
from types import FrameType


class Interrupted(BaseException):
    """SIGTERM ended a command before it finished. A BaseException, like KeyboardInterrupt, so that
    no ``except Exception`` takes it for a failure of the work it interrupted."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def exit_status(stopped: BaseException) -> int:
    """128 + the signal that ``stopped`` the command: KeyboardInterrupt is SIGINT's (Python's own
    handler raises it, and PySpark's, which first cancels the running Spark jobs)."""
    signum = stopped.signum if isinstance(stopped, Interrupted) else signal.SIGINT
    return 128 + signum


def stop_on_signals() -> threading.Event:
    """`kwsniff capture`: an event that SIGINT and SIGTERM set from now on (the handlers replace
    Python's own), so that the capture stops cleanly and exits 0."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    return stop
