"""The same packet delivered twice (two mirror sessions, two tunnel ids, SPAN of both ports): seen once.

A copy has the same addresses, IP id and TCP header, checksum and options included; a TCP
retransmission differs in the IP id (IPv4) or in its TCP timestamps. Keys are held in two
generations of one window of capture time each (a copy is recognised from one to two windows after
the original), and never more than a fixed number per generation, so the cost per packet is a set
lookup and an insert.
"""

from __future__ import annotations

DUPLICATE_WINDOW_US = 500_000
MAX_KEYS = 65536


class DuplicateFilter:
    def __init__(self, window_us: int = DUPLICATE_WINDOW_US, max_keys: int = MAX_KEYS) -> None:
        self.window_us = window_us
        self.max_keys = max_keys
        self.early_rotations = 0  # generations retired before their window ended (max_keys reached)
        self._current: set[tuple[bytes, int]] = set()
        self._previous: set[tuple[bytes, int]] = set()
        self._since = -1 << 62

    def seen(self, ts: int, key: tuple[bytes, int]) -> bool:
        """Whether a packet with this key came shortly before; remembers it if not."""
        current = self._current
        if key in current or key in self._previous:
            return True
        if ts - self._since > self.window_us or len(current) >= self.max_keys:
            if len(current) >= self.max_keys:
                self.early_rotations += 1
            self._previous, self._current, self._since = current, {key}, ts
            return False
        current.add(key)
        return False
