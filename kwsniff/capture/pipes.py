"""Named pipes given where a file is expected (a capture, a key log): opened without blocking, and
waited on for a writer a bounded time, so a FIFO nobody writes to is one line, not a hang."""

from __future__ import annotations

import os
import select

# How long a FIFO may take to get a writer, or its writer its first bytes, before kwsniff decides.
WRITER_WAIT_MS = 1000


def first_bytes(fd: int, size: int, wait_ms: int = WRITER_WAIT_MS) -> bytes | None:
    """What the pipe open on ``fd`` (non-blocking) holds now, at most ``size`` bytes: None when it has
    no writer. A pipe with no writer reads as its end at once; one whose writer has written nothing
    yet says so (EAGAIN, b""). A writer started with us may not have opened it yet, so wait for it a
    little (poll, bounded), never for ever."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    poller.poll(wait_ms)
    try:
        first = os.read(fd, size)
    except BlockingIOError:
        return b""  # a writer holds it open and has written nothing yet
    return first or None
