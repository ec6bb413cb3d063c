"""Which side of a connection caught mid-stream is the client: a run of Kafka request frames on
one side whose correlation ids come back at the start of the other side's frames. No I/O."""

from __future__ import annotations

from kwsniff.kafka.pairing import plausible_request


def frames_at_start(buf: bytes) -> list[memoryview]:
    """The run of size-prefixed frames at the start of ``buf`` (the last may be incomplete)."""
    view, out, p = memoryview(buf), [], 0
    while len(view) - p >= 8:
        size = int.from_bytes(view[p : p + 4], "big", signed=True)
        if size < 4:
            break
        out.append(view[p : p + 4 + size])
        p += 4 + size
    return out


def request_ids(buf: bytes) -> set[int]:
    ids = set()
    for frame in frames_at_start(buf):
        if not plausible_request(frame):
            break
        ids.add(int.from_bytes(frame[8:12], "big", signed=True))
    return ids


def answers(request_ids: set[int], buf: bytes) -> bool:
    return bool(request_ids) and any(
        int.from_bytes(f[4:8], "big", signed=True) in request_ids for f in frames_at_start(buf)
    )
