"""IP fragment reassembly, IPv4 and IPv6 alike, under a byte cap. Pure; no I/O.

Overlaps are resolved as Linux resolves them (net/ipv4/inet_fragment.c, inet_frag_queue_insert,
since Linux 4.19 for IPv4 and RFC 5722 for IPv6): a fragment wholly inside one already held is a
duplicate and dropped, the datagram kept; any other overlap discards the whole datagram. Datagrams
that stay incomplete for the timeout (Linux's ipfrag_time, 30 s) are dropped and counted by capture
time; when the held bytes pass the cap, the oldest datagrams are evicted and counted (Suricata's
defrag memcap).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

FRAGMENT_TIMEOUT_US = 30_000_000
FRAGMENT_BYTES = 32 * 1024 * 1024
# No IP datagram (jumbograms aside, which are never fragmented) is longer than this (RFC 791, RFC 8200).
MAX_DATAGRAM = 65535
# Bookkeeping charged per held fragment besides its bytes, so a flood of tiny fragments meets the cap too.
FRAGMENT_OVERHEAD = 64

FragmentKey = tuple[bytes, bytes, int, int]  # (src, dst, id, protocol or IP version)
# Makes the header of a reassembled packet from the first fragment's header and the payload length.
HeaderRebuild = Callable[[bytes, int], bytes]


@dataclass
class FragmentStats:
    fragments: int = 0  # fragments taken in
    reassembled: int = 0  # datagrams made whole
    timed_out: int = 0  # incomplete datagrams dropped after the timeout (or at the end of capture)
    evicted: int = 0  # incomplete datagrams dropped because the byte cap was reached
    evicted_bytes: int = 0
    overlaps: int = 0  # datagrams discarded for overlapping fragments
    duplicates: int = 0  # fragments dropped as copies of bytes already held
    oversized: int = 0  # datagrams discarded for reaching past 65535 bytes
    held_bytes_peak: int = 0

    def as_dict(self) -> dict[str, int]:
        return {k: v for k, v in self.__dict__.items() if v}


@dataclass
class _Datagram:
    first_ts: int
    pieces: list[tuple[int, int, bytes]] = field(default_factory=list)  # (start, end, bytes), sorted
    header: bytes | None = None  # the offset-0 fragment's IP header
    total: int = -1  # payload length, known once the last fragment arrived
    cost: int = 0


class Defragmenter:
    """Feed fragments with :meth:`add`; it returns the reassembled IP packet when one is complete."""

    def __init__(self, max_bytes: int = FRAGMENT_BYTES, timeout_us: int = FRAGMENT_TIMEOUT_US) -> None:
        self.max_bytes = max_bytes
        self.timeout_us = timeout_us
        self.stats = FragmentStats()
        self.held_bytes = 0
        # Arrival order of each datagram's first fragment, the oldest first (an OrderedDict: taking
        # the first key of a plain dict after deleting at its front walks every deleted slot).
        self._pending: OrderedDict[FragmentKey, _Datagram] = OrderedDict()

    def add(
        self,
        ts: int,
        key: FragmentKey,
        offset: int,
        more: bool,
        payload: bytes,
        header: bytes,
        rebuild: HeaderRebuild,
    ) -> bytes | None:
        """Take one fragment: ``offset`` in bytes, ``more`` the more-fragments flag, ``header`` its
        IP header. Returns the whole packet (rebuilt header + payload) when this completed it."""
        st = self.stats
        st.fragments += 1
        self.expire(ts)
        end = offset + len(payload)
        dgram = self._pending.get(key)
        if dgram is None:
            dgram = self._pending[key] = _Datagram(ts)
        if end > MAX_DATAGRAM or (
            dgram.total >= 0 and (end > dgram.total or (not more and end != dgram.total))
        ):
            st.oversized += end > MAX_DATAGRAM
            st.overlaps += end <= MAX_DATAGRAM
            self._drop(key)
            return None
        if not more:
            if any(e > end for _, e, _ in dgram.pieces):
                st.overlaps += 1
                self._drop(key)
                return None
            dgram.total = end
        at = _place(dgram.pieces, offset, end)
        if at == _DUPLICATE:
            st.duplicates += 1
            return None
        if at == _OVERLAP:
            st.overlaps += 1
            self._drop(key)
            return None
        cost = len(payload) + FRAGMENT_OVERHEAD
        # Room first, so the held bytes never pass the cap: the oldest other datagrams go.
        while self.held_bytes + cost > self.max_bytes and len(self._pending) > 1:
            oldest = next(iter(self._pending))
            if oldest == key:  # this datagram is the oldest: move it behind the others
                self._pending.move_to_end(key)
                continue
            self._evict(oldest)
        if self.held_bytes + cost > self.max_bytes:
            self._evict(key)  # a datagram bigger than the whole cap
            return None
        dgram.pieces.insert(at, (offset, end, payload))
        if offset == 0:
            dgram.header = header
        dgram.cost += cost
        self.held_bytes += cost
        if self.held_bytes > st.held_bytes_peak:
            st.held_bytes_peak = self.held_bytes
        if dgram.total >= 0 and dgram.header is not None and _complete(dgram.pieces, dgram.total):
            self._drop(key)
            st.reassembled += 1
            return rebuild(dgram.header, dgram.total) + b"".join(p for _, _, p in dgram.pieces)
        return None

    def expire(self, now: int) -> None:
        """Drop the datagrams whose first fragment came more than the timeout before ``now``."""
        pending = self._pending
        while pending:
            key = next(iter(pending))
            if now - pending[key].first_ts <= self.timeout_us:
                break
            self.stats.timed_out += 1
            self._drop(key)

    def finish(self) -> None:
        """End of capture: whatever is still incomplete never will be."""
        self.stats.timed_out += len(self._pending)
        for key in list(self._pending):
            self._drop(key)

    def _evict(self, key: FragmentKey) -> None:
        self.stats.evicted += 1
        self.stats.evicted_bytes += self._pending[key].cost
        self._drop(key)

    def _drop(self, key: FragmentKey) -> None:
        dgram = self._pending.pop(key)
        self.held_bytes -= dgram.cost


_DUPLICATE = -1
_OVERLAP = -2


def _place(pieces: list[tuple[int, int, bytes]], start: int, end: int) -> int:
    """Where [start, end) goes in the sorted pieces, or _DUPLICATE (wholly inside one) or _OVERLAP."""
    for i, (s, e, _) in enumerate(pieces):  # a datagram has a few dozen fragments at most
        if end <= s:
            return i
        if start >= e:
            continue
        if s <= start and end <= e:
            return _DUPLICATE
        return _OVERLAP
    return len(pieces)


def _complete(pieces: list[tuple[int, int, bytes]], total: int) -> bool:
    pos = 0
    for s, e, _ in pieces:
        if s != pos:
            return False
        pos = e
    return pos == total
