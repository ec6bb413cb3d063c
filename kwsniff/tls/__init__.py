"""TLS decryption from key logs, between TCP reassembly and the Kafka frame splitter. No I/O.

A connection's reassembled bytes go in (:class:`TlsStream`), plaintext and gaps come out, and every
ciphertext byte is accounted as TLS overhead (record headers, nonces, tags, handshake), decrypted
(handed on as plaintext) or undecryptable (no key, no handshake, a failed tag, lost to a gap).
Secrets come from an NSS key log (:class:`KeyLog`), as Wireshark reads them.

:class:`TlsStream` (and with it `cryptography`, about 30 ms to import) loads on first use, when a
run meets its first TLS connection: most runs never do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kwsniff.tls.keylog import KeyLog

if TYPE_CHECKING:
    from kwsniff.tls.stream import TLS_STATES, TlsStream

__all__ = ["TLS_STATES", "KeyLog", "TlsStream"]


def __getattr__(name: str) -> Any:
    if name in ("TLS_STATES", "TlsStream"):
        from kwsniff.tls import stream

        return getattr(stream, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
