"""The same packet delivered twice (two mirror sessions, two tunnel ids, SPAN of both ports): seen once.

A copy has the same addresses, IP id and TCP header, checksum and options included; a TCP
retransmission differs in the IP id (IPv4) or in its TCP timestamps. Keys are held for a short window
of capture time, and never more than a fixed number of them.
"""

from __future__ import annotations

DUPLICATE_WINDOW_US = 500_000
MAX_KEYS = 65536


class DuplicateFilter:
    def __init__(self, window_us: int = DUPLICATE_WINDOW_US, max_keys: int = MAX_KEYS) -> None:
        self.window_us = window_us
        self.max_keys = max_keys
        self.evicted = 0  # keys dropped to stay under max_keys before their window ended
        # Insertion order is capture order: the oldest key is first.
        self._seen: dict[bytes, int] = {}

    def seen(self, ts: int, key: bytes) -> bool:
        """Whether a packet with this key came within the window before ``ts``; remembers it if not."""
        seen = self._seen
        first = seen.get(key)
        if first is not None and 0 <= ts - first <= self.window_us:
            return True
        if first is not None:
            del seen[key]
        seen[key] = ts
        horizon = ts - self.window_us
        while seen:
            oldest = next(iter(seen))
            if seen[oldest] >= horizon and len(seen) <= self.max_keys:
                break
            if seen[oldest] >= horizon:
                self.evicted += 1
            del seen[oldest]
        return False
