"""How `kwsniff capture` is stopped: SIGINT (Ctrl-C) and SIGTERM end the capture cleanly, the last
period's rows committed and the summary printed, instead of killing the process mid-write."""

from __future__ import annotations

import signal
import threading
from types import FrameType


def stop_on_signals() -> threading.Event:
    """An event that SIGINT and SIGTERM set from now on (the handlers replace Python's own)."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    return stop
