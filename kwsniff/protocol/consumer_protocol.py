"""The consumer protocol embedded in classic group messages: a JoinGroup protocol's `metadata`
(ConsumerProtocolSubscription) and a SyncGroup `assignment` (ConsumerProtocolAssignment) are opaque
bytes to the broker, encoded by the client (Kafka's clients/.../message/ConsumerProtocol*.json,
versions 0-3, never flexible). Only groups of protocol type "consumer" use them.

Both start with an int16 version; a reader of an older version reads the fields it knows, so any
version is read up to what is used here. Bad bytes give None, not an exception: they belong to a
client, and the exchange around them is still a good row.
"""

from __future__ import annotations

import struct

_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")
TopicPartitions = list[tuple[str, list[int]]]


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, size: int) -> bytes:
        if size < 0 or self.pos + size > len(self.data):
            raise ValueError("short")
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return chunk

    def i16(self) -> int:
        return int(_I16.unpack(self.take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self.take(4))[0])

    def string(self) -> str | None:
        size = self.i16()
        return None if size < 0 else self.take(size).decode("utf-8", "replace")

    def count(self, item_size: int) -> int:
        """An array length, checked against the bytes left before anything is allocated."""
        n = self.i32()
        if n > (len(self.data) - self.pos) // item_size:
            raise ValueError("array longer than its bytes")
        return max(n, 0)

    def topic_partitions(self) -> TopicPartitions:
        out = []
        for _ in range(self.count(6)):
            topic = self.string() or ""
            out.append((topic, [self.i32() for _ in range(self.count(4))]))
        return out

    def skip_bytes(self) -> None:
        size = self.i32()
        if size > 0:
            self.take(size)


def subscription(data: bytes | None) -> tuple[list[str], TopicPartitions | None, str | None] | None:
    """(topics, owned partitions (v1+), rack (v3+)) of a JoinGroup protocol's metadata."""
    if not data:
        return None
    try:
        r = _Reader(bytes(data))
        version = r.i16()
        topics = [r.string() or "" for _ in range(r.count(2))]
        if version < 1:
            return topics, None, None
        r.skip_bytes()  # user data
        owned = r.topic_partitions()
        if version < 3:
            return topics, owned, None
        r.i32()  # generation id (v2+)
        return topics, owned, r.string()
    except (ValueError, struct.error):
        return None


def assignment(data: bytes | None) -> TopicPartitions | None:
    """The partitions of a SyncGroup assignment."""
    if not data:
        return None
    try:
        r = _Reader(bytes(data))
        r.i16()
        return r.topic_partitions()
    except (ValueError, struct.error):
        return None
