"""The same packet delivered twice (two mirror sessions, two tunnel ids, SPAN of both ports): seen once.

A copy has the same addresses, IP id and TCP header, checksum and options included; a TCP
retransmission differs in the IP id (IPv4) or in its TCP timestamps. Keys are held in two
generations of one window of capture time each (a copy is recognised from one to two windows after
the original), and never more than a fixed number per generation, so the cost per packet is a set
lookup and an insert. Keys are held as their 64-bit hashes (about 60 bytes each rather than 200; a
collision within one second of traffic is vanishingly unlikely and would drop one packet).
"""

from __future__ import annotations

DUPLICATE_WINDOW_US = 500_000
MAX_KEYS = 32768  # per generation: two generations hold at most ~4 MB


class DuplicateFilter:
    def __init__(self, window_us: int = DUPLICATE_WINDOW_US, max_keys: int = MAX_KEYS) -> None:
        self.window_us = window_us
        self.max_keys = max_keys
        self.early_rotations = 0  # generations retired before their window ended (max_keys reached)
        self._current: set[int] = set()
        self._previous: set[int] = set()
        self._since = -1 << 62

    def seen(self, ts: int, key: tuple[bytes, int]) -> bool:
        """Whether a packet with this key came shortly before; remembers it if not."""
        current = self._current
        h = hash(key)
        if h in current or h in self._previous:
            return True
        if ts - self._since > self.window_us or len(current) >= self.max_keys:
            if len(current) >= self.max_keys:
                self.early_rotations += 1
            self._previous, self._current, self._since = current, {h}, ts
            return False
        current.add(h)
        return False
