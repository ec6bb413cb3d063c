"""Record keys from secrets: TLS 1.3's HKDF-Expand-Label (RFC 8446 section 7.1, 7.3) and TLS 1.2's
PRF (RFC 5246 section 5, 6.3), and the AEAD cipher suites a Kafka client negotiates. No I/O."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand


@dataclass(frozen=True)
class Suite:
    name: str
    aead: type  # AESGCM or ChaCha20Poly1305
    key_len: int
    hash_name: str  # "sha256" or "sha384"
    tls13: bool

    @property
    def evp_name(self) -> str:
        """The AEAD's name for the compiled record loop (kwsniff/tls/_records.c)."""
        if self.aead is ChaCha20Poly1305:
            return "chacha20-poly1305"
        return f"aes-{self.key_len * 8}-gcm"

    @property
    def explicit_nonce(self) -> int:
        """Bytes of explicit nonce at the front of each TLS 1.2 record: 8 for AES-GCM (RFC 5288
        section 3), none for ChaCha20-Poly1305 (RFC 7905 section 2) and TLS 1.3."""
        return 8 if self.aead is AESGCM and not self.tls13 else 0

    @property
    def hash_len(self) -> int:
        return 48 if self.hash_name == "sha384" else 32


def _suites() -> dict[int, Suite]:
    table = {
        0x1301: Suite("TLS_AES_128_GCM_SHA256", AESGCM, 16, "sha256", True),
        0x1302: Suite("TLS_AES_256_GCM_SHA384", AESGCM, 32, "sha384", True),
        0x1303: Suite("TLS_CHACHA20_POLY1305_SHA256", ChaCha20Poly1305, 32, "sha256", True),
    }
    # TLS 1.2 AEAD suites: every key exchange derives the record keys the same way from the
    # master secret, so ECDHE (Java's and OpenSSL's default), DHE and RSA are alike here.
    for code, name, aead, key_len, hash_name in (
        (0xC02B, "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", AESGCM, 16, "sha256"),
        (0xC02C, "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", AESGCM, 32, "sha384"),
        (0xC02F, "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", AESGCM, 16, "sha256"),
        (0xC030, "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", AESGCM, 32, "sha384"),
        (0xCCA8, "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", ChaCha20Poly1305, 32, "sha256"),
        (0xCCA9, "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", ChaCha20Poly1305, 32, "sha256"),
        (0x009E, "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256", AESGCM, 16, "sha256"),
        (0x009F, "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384", AESGCM, 32, "sha384"),
        (0xCCAA, "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256", ChaCha20Poly1305, 32, "sha256"),
        (0x009C, "TLS_RSA_WITH_AES_128_GCM_SHA256", AESGCM, 16, "sha256"),
        (0x009D, "TLS_RSA_WITH_AES_256_GCM_SHA384", AESGCM, 32, "sha384"),
    ):
        table[code] = Suite(name, aead, key_len, hash_name, False)
    return table


SUITES = _suites()


def hkdf_expand_label(secret: bytes, label: str, context: bytes, length: int, hash_name: str) -> bytes:
    """HKDF-Expand-Label (RFC 8446 section 7.1)."""
    full = b"tls13 " + label.encode("ascii")
    info = length.to_bytes(2, "big") + bytes([len(full)]) + full + bytes([len(context)]) + context
    algorithm = hashes.SHA384() if hash_name == "sha384" else hashes.SHA256()
    return HKDFExpand(algorithm, length, info).derive(secret)


def tls13_keys(suite: Suite, secret: bytes) -> tuple[bytes, bytes]:
    """(key, 12-byte IV) of one traffic secret (RFC 8446 section 7.3)."""
    key = hkdf_expand_label(secret, "key", b"", suite.key_len, suite.hash_name)
    iv = hkdf_expand_label(secret, "iv", b"", 12, suite.hash_name)
    return key, iv


def tls13_next_secret(suite: Suite, secret: bytes) -> bytes:
    """The traffic secret after a KeyUpdate (RFC 8446 section 7.2)."""
    return hkdf_expand_label(secret, "traffic upd", b"", suite.hash_len, suite.hash_name)


DecryptInto = Callable[[bytes, memoryview, memoryview, memoryview], None]


def decrypt_into(aead: Any) -> DecryptInto:
    """``aead.decrypt_into(nonce, data, associated_data, out)``: the plaintext written into ``out``
    (exactly its length) with no bytes object made. cryptography has it from version 47 on; before,
    this decrypts and copies."""
    method = getattr(aead, "decrypt_into", None)
    if method is not None:
        return method  # type: ignore[no-any-return]
    decrypt = aead.decrypt

    def copying(nonce: bytes, data: memoryview, associated_data: memoryview, out: memoryview) -> None:
        out[:] = decrypt(nonce, data, associated_data)  # ValueError when the lengths differ

    return copying


def tls12_prf(secret: bytes, label: bytes, seed: bytes, length: int, hash_name: str) -> bytes:
    """PRF(secret, label, seed) = P_hash(secret, label + seed) (RFC 5246 section 5)."""
    digest = getattr(hashlib, hash_name)
    seed = label + seed
    out = bytearray()
    a = seed
    while len(out) < length:
        a = hmac.new(secret, a, digest).digest()
        out += hmac.new(secret, a + seed, digest).digest()
    return bytes(out[:length])


def tls12_keys(
    suite: Suite, master: bytes, client_random: bytes, server_random: bytes
) -> tuple[tuple[bytes, bytes], tuple[bytes, bytes]]:
    """((client key, IV), (server key, IV)) from the key block (RFC 5246 section 6.3): AEAD suites
    have no MAC keys; the fixed IV is 4 bytes for AES-GCM (RFC 5288) and 12 for ChaCha20 (RFC 7905)."""
    iv_len = 4 if suite.aead is AESGCM else 12
    block = tls12_prf(
        master, b"key expansion", server_random + client_random, 2 * (suite.key_len + iv_len), suite.hash_name
    )
    k = suite.key_len
    client_key, server_key = block[:k], block[k : 2 * k]
    client_iv, server_iv = block[2 * k : 2 * k + iv_len], block[2 * k + iv_len :]
    return (client_key, client_iv), (server_key, server_iv)
