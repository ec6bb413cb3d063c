"""The one decode loop: packets handed to a Session one by one, pausing for a sink that filled."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator, Sized

Packets = Iterator[tuple[int, int, bytes]]  # (ts_us, linktype, frame) as readers give them


def linked(linktype: int, batch: Iterable[tuple[int, bytes]]) -> Packets:
    """A live capture's batch of (ts_us, frame) of one link type as the packets :func:`fed` takes."""
    for ts, data in batch:
        yield ts, linktype, data


def fed(
    packets: Packets, feed: Callable[[int, int, bytes], object], ready: Sized = ()
) -> Generator[None, None, int]:
    """The decode loop of every capture (`read`, `show`, `read --continuous`, the Python API, and the
    live capture's workers, batch by batch: :func:`linked`): each packet to ``feed`` (a Session's packet); it pauses (yields) whenever ``ready`` (an
    ArrowSink's filled batches) holds some, for its owner to take them, and returns the last
    packet's time (-1 for none)."""
    last = -1
    for last, linktype, data in packets:
        feed(last, linktype, data)
        if ready:
            yield
    return last


def to_end(loop: Generator[None, None, int]) -> int:
    """Runs a :func:`fed` loop that has no one to pause for; its return value."""
    while True:
        try:
            next(loop)
        except StopIteration as stop:
            return int(stop.value)


__all__ = ["Packets", "fed", "linked", "to_end"]
