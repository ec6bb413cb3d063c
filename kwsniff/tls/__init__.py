"""TLS decryption from key logs, between TCP reassembly and the Kafka frame splitter. No I/O.

A connection's reassembled bytes go in (:class:`TlsStream`), plaintext and gaps come out, and every
ciphertext byte is accounted as TLS overhead (record headers, nonces, tags, handshake), decrypted
(handed on as plaintext) or undecryptable (no key, no handshake, a failed tag, lost to a gap).
Secrets come from an NSS key log (:class:`KeyLog`), as Wireshark reads them.
"""

from kwsniff.tls.keylog import KeyLog
from kwsniff.tls.stream import TLS_STATES, TlsStream

__all__ = ["TLS_STATES", "KeyLog", "TlsStream"]
