"""SASL on a Kafka connection: what was negotiated and how it ended, never the secret. No I/O.

Kafka protocol guide, "SASL Authentication Sequence": the client sends SaslHandshake (api key 17)
naming a mechanism. After a v0 handshake the SASL tokens travel as bare int32-size-prefixed blobs,
not Kafka requests (KIP-43); from v1 on they travel inside SaslAuthenticate (api key 36) requests
and responses (KIP-152), which also carry an error code when authentication fails. Kafka 0.9
clients skipped the handshake and opened with a GSSAPI token straight away.
"""

from __future__ import annotations

import base64
import contextlib
import json
from typing import Any

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36

OK = "ok"
UNFINISHED = "unfinished"
CLOSED_BY_BROKER = "closed by broker"

# SaslAuthenticate round trips a mechanism needs before the broker has accepted the client.
_ROUNDS = {"PLAIN": 1, "OAUTHBEARER": 1, "SCRAM-SHA-256": 2, "SCRAM-SHA-512": 2}
# GSS-API InitialContextToken: [APPLICATION 0] tag (RFC 2743 section 3.1).
_GSSAPI_TAG = 0x60
# Fields that carry credentials, per API key: SaslAuthenticate tokens (PLAIN password, SCRAM proof),
# AlterUserScramCredentials salted passwords, delegation token HMACs.
SECRET_FIELDS = {
    SASL_AUTHENTICATE: ("auth_bytes",),
    38: ("hmac",),  # CreateDelegationToken response
    39: ("hmac",),  # RenewDelegationToken request
    40: ("hmac",),  # ExpireDelegationToken request
    41: ("hmac",),  # DescribeDelegationToken response
    51: ("salted_password",),  # AlterUserScramCredentials request
}


# The SaslAuthenticate fields that never carry a credential (SaslAuthenticateResponse.json).
SAFE_AUTHENTICATE_FIELDS = frozenset({"error_code", "error_message", "session_lifetime_ms"})
UNKNOWN_TAGS = "_unknown_tags"  # where the decoder keeps tagged fields the schema does not know


def looks_like_gssapi_token(view: memoryview | bytes, max_size: int = 64 * 1024) -> bool:
    """A size-prefixed GSS-API initial token (Kafka 0.9 clients sent one before any request)."""
    if len(view) < 5:
        return False
    size = int.from_bytes(view[0:4], "big", signed=True)
    return 1 <= size <= max_size and view[4] == _GSSAPI_TAG


def redact(api_key: int, msg: Any) -> Any:
    """``msg`` with every credential replaced by ``{"redacted": <byte count>}`` (in place).

    SaslAuthenticate is an authentication message through and through: every field but the known
    safe ones (error code and message, session lifetime) is redacted, unknown tagged fields (KIP-482)
    included, as a client or broker newer than our schema may put a credential in one. Other
    messages that carry credentials lose their secret fields and every unknown tagged field."""
    if api_key == SASL_AUTHENTICATE:
        for key, item in msg.items():
            if key not in SAFE_AUTHENTICATE_FIELDS:
                msg[key] = {"redacted": _size(item)}
        return msg
    fields = SECRET_FIELDS.get(api_key)
    if fields:
        _redact(msg, fields)
    return msg


def _size(value: Any) -> int:
    """Bytes a redacted value held (unknown tags: their raw values together)."""
    if isinstance(value, (bytes, bytearray, memoryview, str)):
        return len(value)
    if isinstance(value, dict):
        return sum(_size(v) for v in value.values())
    if isinstance(value, list):
        return sum(_size(v) for v in value)
    return 0


def _redact(value: Any, fields: tuple[str, ...]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if key == UNKNOWN_TAGS or (key in fields and isinstance(item, (bytes, bytearray, memoryview))):
                value[key] = {"redacted": _size(item)}
            else:
                _redact(item, fields)
    elif isinstance(value, list):
        for item in value:
            _redact(item, fields)


# -- the secrets a client sent, kept out of whatever the broker says back --------------------------
REDACTED_TEXT = "[redacted]"  # a string from the wire that held a client's secret, in its place
MIN_SECRET = 4  # a shorter secret hides only a string that is exactly it, not every string holding it
MAX_SECRET = 4096  # characters kept of one secret: a string holding them is hidden whole
MAX_SECRETS = 16  # forms of secrets kept per connection (a client re-authenticates a few times)


class Secrets:
    """The credentials one connection's client sent in its SASL tokens (a PLAIN password, a SCRAM
    client proof, a bearer token, in their text, base64 and hex forms). A broker or proxy may echo
    them in any string of its answers (SaslAuthenticate's error_message, a SCRAM server-error):
    every such string is replaced by REDACTED_TEXT before any row, `show` line or metric sees it."""

    __slots__ = ("texts",)

    def __init__(self) -> None:
        self.texts: list[str] = []

    def __bool__(self) -> bool:
        return bool(self.texts)

    def learn(self, mechanism: str | None, token: bytes) -> None:
        """The secrets of one client SASL token."""
        if len(token) >= MIN_SECRET:
            self._add(base64.b64encode(token).decode("ascii"))  # an echo of the whole token, encoded
        plain = mechanism == "PLAIN" or (mechanism is None and token.count(b"\0") == 2)
        if plain and token.count(b"\0") == 2:
            self.add(token.split(b"\0")[2])  # RFC 4616: authzid NUL authcid NUL passwd
        elif mechanism is None or mechanism.startswith("SCRAM-"):
            # RFC 5802 client-final-message: c=...,r=...,p=ClientProof (base64), always last.
            proof = token.rpartition(b",p=")[2].split(b",", 1)[0] if b",p=" in token else b""
            if proof:
                self.add(proof)
                self._add(_ascii(proof).rstrip("="))
        if mechanism in (None, "OAUTHBEARER"):
            for pair in token.split(b"\x01"):
                if pair[:12].lower() == b"auth=bearer ":
                    self.add(pair[12:].strip())

    def add(self, secret: bytes) -> None:
        """One secret, in each form an answer might echo it in."""
        if not secret:
            return
        with contextlib.suppress(UnicodeDecodeError):
            self._add(secret.decode("utf-8"))
        self._add(base64.b64encode(secret).decode("ascii"))
        self._add(secret.hex())

    def _add(self, text: str) -> None:
        text = text[:MAX_SECRET]
        if text and text not in self.texts and len(self.texts) < MAX_SECRETS:
            self.texts.append(text)

    def hides(self, text: str) -> bool:
        return any(s == text or (len(s) >= MIN_SECRET and s in text) for s in self.texts)

    def text(self, text: str) -> str:
        """``text``, or REDACTED_TEXT when it holds a secret."""
        return REDACTED_TEXT if self.texts and self.hides(text) else text

    def clean(self, value: Any) -> Any:
        """``value`` (a decoded message, or a part of it) with every string, dict keys included,
        that holds a secret replaced by REDACTED_TEXT; dicts and lists are changed in place."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            for key, item in list(value.items()):
                cleaned = self.clean(item)
                if isinstance(key, str | tuple) and self.clean(key) != key:
                    del value[key]
                    value[self.clean(key)] = cleaned
                elif cleaned is not item:
                    value[key] = cleaned
            return value
        if isinstance(value, list):
            for i, item in enumerate(value):
                cleaned = self.clean(item)
                if cleaned is not item:
                    value[i] = cleaned
            return value
        if isinstance(value, tuple):
            cleaned_items = tuple(self.clean(item) for item in value)
            return value if cleaned_items == value else cleaned_items
        return value


def _ascii(raw: bytes) -> str:
    return raw.decode("ascii", "replace")


# -- the principal a client claims (its first token); never the secret beside it -------------------
MAX_PRINCIPAL = 256  # characters kept of a claimed name


def principal(mechanism: str | None, token: bytes) -> str | None:
    """The identity a client's first SASL token claims, or None where it names none readably.

    PLAIN (RFC 4616): ``authzid NUL authcid NUL passwd``: the authcid, the password never read.
    SCRAM (RFC 5802): client-first ``gs2-header n=USER,r=NONCE``, with ``=2C`` and ``=3D`` unescaped.
    OAUTHBEARER (RFC 7628): the ``sub`` claim of the bearer token when it is a JWT whose payload is
    readable JSON (signature not checked: the broker's word is `sasl_outcome`).
    GSSAPI: None; the Kerberos principal is inside an encrypted ticket."""
    if mechanism == "PLAIN":
        parts = token.split(b"\0")
        return _text(parts[1]) if len(parts) == 3 else None
    if mechanism is not None and mechanism.startswith("SCRAM-"):
        return _scram_user(token)
    if mechanism == "OAUTHBEARER":
        return _jwt_subject(token)
    return None


def _text(raw: bytes) -> str | None:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text[:MAX_PRINCIPAL] if text else None


def _scram_user(token: bytes) -> str | None:
    # gs2-header: a channel-binding flag ("n", "y" or "p=..."), then an optional "a=authzid", then
    # the client-first-message-bare "n=USER,r=NONCE". RFC 5802 escapes "," and "=" in USER as =2C
    # and =3D, but not every client does (kafka-python 2.x sends the name as it is), so the name
    # runs to the nonce attribute, not to the first comma.
    fields = token.split(b",", 2)
    if len(fields) < 3 or not fields[2].startswith(b"n="):
        return None
    bare = fields[2][2:]
    end = bare.find(b",r=")
    user = _text(bare if end < 0 else bare[:end])
    return None if user is None else user.replace("=2C", ",").replace("=3D", "=")


def _jwt_subject(token: bytes) -> str | None:
    # "n,a=authzid,\x01auth=Bearer <token>\x01...\x01\x01"; a JWT is header.payload.signature.
    for pair in token.split(b"\x01"):
        if pair[:12].lower() == b"auth=bearer ":
            parts = pair[12:].strip().split(b".")
            if len(parts) != 3:
                return None
            try:
                claims = json.loads(base64.urlsafe_b64decode(parts[1] + b"=" * (-len(parts[1]) % 4)))
            except (ValueError, UnicodeDecodeError):
                return None
            sub = claims.get("sub") if isinstance(claims, dict) else None
            return sub[:MAX_PRINCIPAL] if isinstance(sub, str) and sub else None
    return None


def authenticate_token(body: memoryview | bytes, version: int) -> bytes | None:
    """The auth_bytes of a SaslAuthenticate request body (SaslAuthenticateRequest.json: BYTES in
    v0-v1, COMPACT_BYTES from the flexible v2); None when cut."""
    return _bytes_at(body, 0, version >= 2)


def authenticate_response_token(body: memoryview | bytes, version: int) -> bytes | None:
    """The auth_bytes of a SaslAuthenticate response body (SaslAuthenticateResponse.json:
    error_code INT16, error_message nullable STRING, then auth_bytes; compact forms from the flexible
    v2); None when cut."""
    compact = version >= 2
    start = 2
    if compact:
        length, start = _uvarint(body, start)
        size = length - 1  # compact lengths are stored plus one; 0 is null
    else:
        size = int.from_bytes(body[2:4], "big", signed=True) if len(body) >= 4 else -2
        start = 4
    if size < -1 or start < 0:
        return None
    return _bytes_at(body, start + max(size, 0), compact)


def _uvarint(body: memoryview | bytes, start: int) -> tuple[int, int]:
    """An unsigned varint at ``start`` and the offset after it; (0, -1) when cut or too long."""
    value, shift = 0, 0
    for pos in range(start, min(len(body), start + 5)):
        value |= (body[pos] & 0x7F) << shift
        shift += 7
        if not body[pos] & 0x80:
            return value, pos + 1
    return 0, -1


def _bytes_at(body: memoryview | bytes, start: int, compact: bool) -> bytes | None:
    if compact:
        size, start = _uvarint(body, start)
        size -= 1
    elif len(body) >= start + 4:
        size, start = int.from_bytes(body[start : start + 4], "big", signed=True), start + 4
    else:
        return None
    if start < 0 or size < 0 or start + size > len(body):
        return None
    return bytes(body[start : start + size])


# RFC 5802 section 7: server-final-message = (server-error / verifier) ["," extensions], with
# server-error = "e=" server-error-value (invalid-proof, unknown-user, other-error...).
MAX_SCRAM_ERROR = 64  # characters kept of a server-error-value


def scram_server_final(token: bytes) -> tuple[str, str] | None:
    """("e", server-error-value) or ("v", "") for a SCRAM server-final message, else None (the
    server-first message starts with "r=", and the verifier itself is not kept)."""
    if token.startswith(b"e="):
        value = token[2:].split(b",", 1)[0].decode("utf-8", "replace")[:MAX_SCRAM_ERROR]
        return "e", value or "other-error"
    if token.startswith(b"v="):
        return "v", ""
    return None


class SaslProgress:
    """The SASL exchange of one connection, from its handshake to the first request after it."""

    __slots__ = (
        "mechanism",
        "handshake_version",
        "error",
        "rounds_ok",
        "tokens",
        "token_count",
        "token_bytes",
        "authenticated",
        "started",
        "principal",
        "claimed",
        "verified",
        "secrets",
    )

    def __init__(self) -> None:
        self.mechanism: str | None = None
        self.handshake_version: int | None = None
        self.error: str | None = None  # error name of the first failing SASL response
        self.rounds_ok = 0  # SaslAuthenticate responses without error
        self.tokens = 0  # bare tokens (after a v0 handshake, or a 0.9 GSSAPI opening)
        self.token_count = [0, 0]  # the same, per direction
        self.token_bytes = [0, 0]  # per direction (client to broker, broker to client), prefixes included
        self.authenticated = False
        self.started = False
        self.principal: str | None = None  # the identity the first client token claims
        self.claimed = False  # the first client token was read
        self.verified = False  # a SCRAM server-final verifier ("v=") was seen
        self.secrets = Secrets()  # what the client's tokens held, kept out of the broker's answers

    def client_token(self, token: bytes | None) -> None:
        """A client's SASL token: the first names the principal (later ones are proofs); every one
        teaches the connection's secrets."""
        if token is None:
            return
        self.secrets.learn(self.mechanism, token)
        if not self.claimed:
            self.claimed = True
            self.principal = principal(self.mechanism, token)

    def server_token(self, token: bytes | None) -> None:
        """A broker's SASL token. SCRAM brokers may refuse inside it: the server-final message says
        ``e=unknown-user`` while the SaslAuthenticate error code is 0 (tansu 0.6 does), and after a
        v0 handshake there is no error code at all (RFC 5802 section 7; KIP-43)."""
        if token is None or self.mechanism is None or not self.mechanism.startswith("SCRAM-"):
            return
        final = scram_server_final(token)
        if final is None:
            return
        if final[0] == "e":
            self.failed(self.secrets.text(final[1]))
        else:
            self.verified = True

    def broker_closed(self) -> None:
        """The broker closed the connection first. While a client's raw token (after a v0
        handshake) waits for its answer, that is how a broker refuses it: there is no error code
        to send outside SaslAuthenticate (KIP-43, KIP-152)."""
        if self.error is None and not self.authenticated and self.token_count[0] > self.token_count[1]:
            self.failed(CLOSED_BY_BROKER)

    def handshake_request(self, version: int, mechanism: str | None) -> None:
        self.started = True
        self.handshake_version = version
        self.mechanism = mechanism

    def failed(self, error: str) -> None:
        if self.error is None:
            self.error = error

    def token(self, direction: int, nbytes: int) -> None:
        self.started = True
        self.tokens += 1
        self.token_count[direction] += 1
        self.token_bytes[direction] += nbytes

    def request_after(self) -> None:
        """A request other than the SASL ones: the client is past authentication."""
        if self.error is None:
            self.authenticated = True

    @property
    def outcome(self) -> str | None:
        if not self.started:
            return None
        if self.error is not None:
            return f"failed: {self.error}"
        if self.authenticated or self.verified:
            return OK
        if self.rounds_ok >= _ROUNDS.get(self.mechanism or "", 1 << 30):
            return OK
        return UNFINISHED
