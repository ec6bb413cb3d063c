"""Recognising what is not plain Kafka at the start of a connection: TLS, HTTP, SSH. No I/O.

A TLS connection opens with a handshake record (RFC 8446 section 5.1: content type 22, legacy
version 0x03 0x0X) holding a ClientHello; the server answers with a ServerHello. Both are sent in
the clear, so the server name (SNI, RFC 6066 section 3) and the negotiated version
(``supported_versions``, RFC 8446 section 4.2.1) are visible even though nothing after them is.
"""

from __future__ import annotations

HANDSHAKE = 22
CLIENT_HELLO = 1
SERVER_HELLO = 2
EXT_SERVER_NAME = 0
EXT_SUPPORTED_VERSIONS = 43
# A hello is one handshake message, at most a few records long; stop looking after this much.
MAX_HELLO_BYTES = 64 * 1024

VERSION_NAMES = {0x0300: "SSLv3", 0x0301: "TLSv1.0", 0x0302: "TLSv1.1", 0x0303: "TLSv1.2", 0x0304: "TLSv1.3"}
_HTTP_METHODS = (
    b"GET ",
    b"POST ",
    b"HEAD ",
    b"PUT ",
    b"DELETE ",
    b"OPTIONS ",
    b"PATCH ",
    b"CONNECT ",
    b"TRACE ",
)


def looks_like_tls(view: memoryview | bytes) -> bool:
    """Does a stream start with a TLS handshake record (needs 3 bytes)?"""
    return len(view) >= 3 and view[0] == HANDSHAKE and view[1] == 3 and view[2] <= 4


def looks_like_tls_record(view: memoryview | bytes) -> bool:
    """Does a stream caught mid-connection start with a TLS record header (needs 5 bytes)? Types 20
    to 23 with version 3.x; as a Kafka size prefix those bytes would announce more than 335 MB, so a
    Kafka stream never starts this way."""
    return (
        len(view) >= 5
        and 20 <= view[0] <= 23
        and view[1] == 3
        and view[2] <= 4
        and (view[3] << 8 | view[4]) <= (1 << 14) + 2048
    )


def guess_protocol(client: bytes, server: bytes) -> str:
    """What a connection that is not Kafka probably speaks: "tls", "http", "ssh" or "unknown"."""
    if looks_like_tls(client):
        return "tls"
    if client.startswith(_HTTP_METHODS) or server.startswith(b"HTTP/"):
        return "http"
    if client.startswith(b"SSH-") or server.startswith(b"SSH-"):
        return "ssh"
    return "unknown"


class TlsHellos:
    """Reads the ClientHello (direction 0) and ServerHello (direction 1) out of the first records."""

    __slots__ = ("_buf", "_done", "pending", "sni", "version", "client_versions")

    def __init__(self) -> None:
        self._buf = (bytearray(), bytearray())
        self._done = [False, False]
        # A hello not read yet: an attribute, not a property, as it is asked for every segment.
        self.pending = True
        self.sni: str | None = None
        self.version: str | None = None  # negotiated, from the ServerHello
        self.client_versions: list[str] = []  # offered, from the ClientHello

    def feed(self, direction: int, chunk: memoryview | bytes) -> None:
        if self._done[direction]:
            return
        buf = self._buf[direction]
        buf += chunk[: MAX_HELLO_BYTES - len(buf)]
        msg = _handshake_message(bytes(buf))
        if msg is None:
            if len(buf) >= MAX_HELLO_BYTES:
                self._finish(direction)
            return
        if direction == 0 and msg[0] == CLIENT_HELLO:
            self._client_hello(msg[1])
        elif direction == 1 and msg[0] == SERVER_HELLO:
            self._server_hello(msg[1])
        self._finish(direction)

    def _finish(self, direction: int) -> None:
        self._done[direction] = True
        self.pending = not (self._done[0] and self._done[1])
        self._buf[direction].clear()

    def _client_hello(self, body: bytes) -> None:
        for ext, data in _extensions(body, server=False):
            if ext == EXT_SERVER_NAME and len(data) >= 5 and data[2] == 0:
                n = int.from_bytes(data[3:5], "big")
                self.sni = data[5 : 5 + n].decode("ascii", "replace")
            elif ext == EXT_SUPPORTED_VERSIONS and data:
                versions = data[1 : 1 + data[0]]
                self.client_versions = [
                    VERSION_NAMES[v]
                    for i in range(0, len(versions) - 1, 2)
                    if (v := int.from_bytes(versions[i : i + 2], "big")) in VERSION_NAMES
                ]

    def _server_hello(self, body: bytes) -> None:
        if len(body) < 2:
            return
        version = int.from_bytes(body[0:2], "big")
        for ext, data in _extensions(body, server=True):
            if ext == EXT_SUPPORTED_VERSIONS and len(data) == 2:
                version = int.from_bytes(data, "big")  # TLS 1.3 keeps 0x0303 in the legacy field
        self.version = VERSION_NAMES.get(version, f"0x{version:04x}")


def _handshake_message(buf: bytes) -> tuple[int, bytes] | None:
    """The first handshake message, joined from as many handshake records as it spans."""
    payload = bytearray()
    p = 0
    while len(buf) - p >= 5 and buf[p] == HANDSHAKE:
        n = int.from_bytes(buf[p + 3 : p + 5], "big")
        if len(buf) - p - 5 < n:
            break
        payload += buf[p + 5 : p + 5 + n]
        p += 5 + n
        if len(payload) >= 4:
            size = int.from_bytes(payload[1:4], "big")
            if len(payload) >= 4 + size:
                return payload[0], bytes(payload[4 : 4 + size])
    return None


def _extensions(body: bytes, server: bool) -> list[tuple[int, bytes]]:
    """A hello's extensions as (type, data); empty if the hello is malformed."""
    p = 2 + 32  # legacy_version, random
    if len(body) < p + 1:
        return []
    p += 1 + body[p]  # session id
    if server:
        p += 2 + 1  # cipher suite, compression method
    else:
        if len(body) < p + 2:
            return []
        p += 2 + int.from_bytes(body[p : p + 2], "big")  # cipher suites
        if len(body) < p + 1:
            return []
        p += 1 + body[p]  # compression methods
    if len(body) < p + 2:
        return []
    end = min(len(body), p + 2 + int.from_bytes(body[p : p + 2], "big"))
    p += 2
    out = []
    while end - p >= 4:
        ext = int.from_bytes(body[p : p + 2], "big")
        n = int.from_bytes(body[p + 2 : p + 4], "big")
        out.append((ext, body[p + 4 : p + 4 + n]))
        p += 4 + n
    return out
