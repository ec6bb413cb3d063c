"""The byte format the tls fuzz target reads: one TLS connection's client bytes, as operations.

Random bytes almost never pass an AEAD tag check, so the input does not hold records: it says which
to make, and this module seals them with fixed keys (cryptography's AEAD, independent of kwsniff's
record loop). Byte 0 picks the suite (``SUITE_CODES[b % 6]``), byte 1 the TCP segment size (1 + 7·b
bytes); then operations, each a byte and its arguments:

    0 n        an application-data record of 9·n bytes of content
    1 t p      TLS 1.3: a record whose inner content type is t, with p % 4 bytes of zero padding;
               TLS 1.2: a record whose header type is 20 + t % 5
    2          TLS 1.3: a KeyUpdate (the records after it use the next traffic secret);
               TLS 1.2: a record sealed with the wrong sequence number (its tag fails)
    3 n ...    n % 32 raw bytes, taken from the input
    4 n        a gap of 11·n bytes (the capture lost them: the stream is told, as TCP reassembly tells it)
    5 k        byte k of the bytes made so far flipped (damage)

A missing argument reads as 0.
"""

from __future__ import annotations

from collections.abc import Callable

from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

from kwsniff.tls import stream as tls_stream
from kwsniff.tls.schedule import SUITES, Suite, tls13_keys, tls13_next_secret

SUITE_CODES = (0x1301, 0x1302, 0x1303, 0xC02F, 0xC030, 0xCCA8)
SECRET = bytes(range(48))  # TLS 1.3 traffic secret (HKDF gives the key and IV)
HEADER_VERSION = b"\x03\x03"
KEY_UPDATE = b"\x18\x00\x00\x01\x00"  # update_not_requested

# (offset where a gap of n bytes is reported, n), after the bytes before it
Gap = tuple[int, int]


def keys_12(suite: Suite) -> tuple[bytes, bytes]:
    """TLS 1.2 record keys: the key and the fixed IV (4 bytes for AES-GCM, 12 for ChaCha20)."""
    iv_len = 4 if suite.aead is AESGCM else 12
    return bytes(range(1, suite.key_len + 1)), bytes(range(100, 100 + iv_len))


def keyed_stream(
    suite: Suite, on_plain: Callable[[int, int, bytes], object], secret: bytes = SECRET
) -> tls_stream.TlsStream:
    """A TlsStream whose client direction (0) is already under ``suite`` with this module's fixed keys
    (TLS 1.3: those of traffic ``secret``), its plaintext to ``on_plain(direction, ts, chunk)``. The
    compiled Opener and Feeder are used when kwsniff.tls.stream has them at the time of the call."""
    stream = tls_stream.TlsStream(None, on_plain, lambda d, ts: None)
    stream.suite = suite
    keys = (*tls13_keys(suite, secret), secret) if suite.tls13 else keys_12(suite)
    stream.dirs[0].protection = tls_stream._Protection(suite, *keys)
    return stream


def seal(
    suite: Suite,
    key: bytes,
    iv: bytes,
    seq: int,
    content: bytes,
    inner: int = 23,
    typ: int = 23,
    padding: int = 0,
) -> bytes:
    """One protected record as RFC 8446 section 5.2 (TLS 1.3: the content, the inner content type
    ``inner``, ``padding`` zero bytes) or RFC 5246/5288/7905 (TLS 1.2, header type ``typ``) has it."""
    aead = AESGCM(key) if suite.aead is AESGCM else ChaCha20Poly1305(key)
    if suite.tls13:
        inner_plain = content + bytes([inner]) + bytes(padding)
        header = bytes([typ]) + HEADER_VERSION + (len(inner_plain) + 16).to_bytes(2, "big")
        nonce = (int.from_bytes(iv, "big") ^ seq).to_bytes(12, "big")
        return header + aead.encrypt(nonce, inner_plain, header)
    explicit = seq.to_bytes(8, "big") if suite.aead is AESGCM else b""
    nonce = iv + explicit if explicit else (int.from_bytes(iv, "big") ^ seq).to_bytes(12, "big")
    aad = seq.to_bytes(8, "big") + bytes([typ]) + HEADER_VERSION + len(content).to_bytes(2, "big")
    body = explicit + aead.encrypt(nonce, content, aad)
    return bytes([typ]) + HEADER_VERSION + len(body).to_bytes(2, "big") + body


def wire(data: bytes) -> tuple[Suite, int, bytes, list[Gap]]:
    """(suite, segment size, the client's bytes, the gaps) the input describes."""
    suite = SUITES[SUITE_CODES[data[0] % len(SUITE_CODES)]] if data else SUITES[0x1301]
    piece = 1 + 7 * (data[1] if len(data) > 1 else 200)
    if suite.tls13:
        secret = SECRET
        key, iv = tls13_keys(suite, secret)
    else:
        key, iv = keys_12(suite)
    out = bytearray()
    gaps: list[Gap] = []
    seq = 0
    i = 2

    def arg(k: int) -> int:
        return data[i + k] if i + k < len(data) else 0

    while i < len(data):
        op = data[i] % 6
        if op == 0:
            content = bytes((i + k) & 0xFF for k in range(9 * arg(1)))
            out += seal(suite, key, iv, seq, content)
            seq += 1
            i += 2
        elif op == 1:
            if suite.tls13:
                out += seal(suite, key, iv, seq, b"x", inner=arg(1), padding=arg(2) % 4)
            else:
                out += seal(suite, key, iv, seq, b"x", typ=20 + arg(1) % 5)
            seq += 1
            i += 3
        elif op == 2:
            if suite.tls13:
                out += seal(suite, key, iv, seq, KEY_UPDATE, inner=22)
                secret = tls13_next_secret(suite, secret)
                key, iv = tls13_keys(suite, secret)
                seq = 0
            else:
                out += seal(suite, key, iv, seq + 1, b"wrong sequence number")
                seq += 1
            i += 1
        elif op == 3:
            n = arg(1) % 32
            out += data[i + 2 : i + 2 + n]
            i += 2 + n
        elif op == 4:
            gaps.append((len(out), 11 * arg(1)))
            i += 2
        else:
            if out:
                out[arg(1) * 37 % len(out)] ^= 0x40
            i += 2
    return suite, piece, bytes(out), gaps
