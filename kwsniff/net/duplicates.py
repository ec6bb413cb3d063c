"""The same packet delivered twice (two mirror sessions, two tunnel ids, SPAN of both ports): seen once.

Plain frames (no tunnel, not fragments: SPAN of both switch ports) are checked in the session's hot
path, per direction of each connection: a frame whose bytes up to its TCP payload (link, IP and TCP
headers: IP id, sequence and ack numbers, TCP options and the checksum, which covers the payload)
equal those of one of the last RECENT_FRAMES frames of that direction is a copy, if its connection
had a packet less than COPY_WITHIN_US before. This is the rule of Wireshark's `editcap -d` (a frame
whose length and MD5 equal one of the previous four frames), kept per flow so that other
connections' traffic between the two copies does not hide them, and it errs as editcap does: a
retransmission identical to its original byte for byte (an IPv6 packet, or an IPv4 stack that
repeats the IP id, without TCP timestamps) within RECENT_FRAMES frames of its direction and
COPY_WITHIN_US of the connection's previous packet (a fast retransmission after duplicate ACKs) is
taken for a copy. A copy that comes later than that, or whose link header or TTL a router rewrote,
is counted as a retransmission (`duplicate_bytes`), as tshark's TCP analysis counts every copy. The
cost is a slice of the header bytes, a tuple of four and up to four comparisons per packet.

Tunnelled and fragmented packets go through DuplicateFilter. A copy there has the same addresses,
IP id and TCP header, checksum and options included; a TCP retransmission differs in the IP id
(IPv4) or in its TCP timestamps. Keys are held in two generations of one window of capture time
each (a copy is recognised from one to two windows after the original), and never more than a
fixed number per generation, so the cost per packet is a set lookup and an insert. Keys are held as
their 64-bit hashes (about 60 bytes each rather than 200; a collision within one second of traffic
is vanishingly unlikely and would drop one packet).
"""

from __future__ import annotations

# Frames of one direction of one connection a plain copy is looked for in: the session keeps their
# keys as a tuple of this many, newest first, built by hand on its hot path.
RECENT_FRAMES = 4
NO_FRAMES: tuple[bytes, ...] = (b"",) * RECENT_FRAMES  # a key is never empty
# A plain frame equal to a recent one is a copy only if its connection had a packet less than this
# long before: a mirror's two deliveries of one packet are microseconds to milliseconds apart, while
# a retransmission comes after a retransmission timeout of the quiet connection (200 ms or more in
# Linux, 1 s in RFC 6298), so an identical retransmission after a silence stays one.
COPY_WITHIN_US = 50_000
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
