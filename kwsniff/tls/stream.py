"""One TLS connection, both directions: records in, plaintext and gaps out. No I/O.

Records are read from the reassembled bytes (RFC 8446 section 5.1; RFC 5246 section 6.2). The
hellos give the client random (the key log's key), the server random, the version and the cipher
suite; the key log gives the secrets. TLS 1.3 switches each direction from its handshake secret to
its traffic secret after that side's Finished, and to the next secret after each KeyUpdate; TLS 1.2
starts protection on each side's ChangeCipherSpec. Every byte fed in ends up in exactly one of
``overhead`` (headers, nonces, tags, padding, handshake, alerts, ChangeCipherSpec), ``decrypted``
(handed to ``on_plain``) and ``undecryptable``, per direction.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from functools import partial
from typing import Any

from cryptography.exceptions import InvalidTag

from kwsniff.tls.keylog import KeyLog
from kwsniff.tls.schedule import (
    SUITES,
    Suite,
    decrypt_into,
    tls12_keys,
    tls13_keys,
    tls13_next_secret,
)

# The compiled record loop (_records.c: one OpenSSL cipher context per direction), unless
# KWSNIFF_PURE_PYTHON=1 asks for the loop on `cryptography` below, or it was not built or finds no
# libcrypto. Both give the same results (tests/test_tls_records.py).
Opener: Any = None
Feeder: Any = None
if os.environ.get("KWSNIFF_PURE_PYTHON", "") != "1":
    with contextlib.suppress(ImportError):
        from kwsniff.tls._records import Feeder, Opener  # type: ignore[import-not-found,no-redef]


CHANGE_CIPHER_SPEC = 20
ALERT = 21
HANDSHAKE = 22
APPLICATION_DATA = 23
CLIENT_HELLO = 1
SERVER_HELLO = 2
FINISHED = 20
KEY_UPDATE = 24
EXT_SUPPORTED_VERSIONS = 43
TLS13 = 0x0304
# A protected record's length is at most 2^14 + 256 (RFC 8446 section 5.2; RFC 5246 allows 2^14 + 2048
# for TLS 1.2, which no AEAD suite needs).
MAX_RECORD = (1 << 14) + 256
# A ServerHello with this random is a HelloRetryRequest (RFC 8446 section 4.1.3).
HRR_RANDOM = bytes.fromhex("cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c")
# Handshake messages are a few KB (a certificate chain); a longer one is not a handshake we can read.
MAX_HANDSHAKE = 256 * 1024
# Protected records held while a live capture waits for its key log to gain this connection's keys.
MAX_PENDING = 4 * 1024 * 1024
# After a gap, how many lost records a candidate record's sequence number is tried against.
MAX_SEQ_TRIES = 512

TLS13_LABELS = (
    "CLIENT_HANDSHAKE_TRAFFIC_SECRET",
    "SERVER_HANDSHAKE_TRAFFIC_SECRET",
    "CLIENT_TRAFFIC_SECRET_0",
    "SERVER_TRAFFIC_SECRET_0",
)
TLS12_LABELS = ("CLIENT_RANDOM",)

# The `connections.tls_state` values (README "TLS"): what became of a TLS connection's bytes.
TLS_STATES = (
    "decrypted",  # every protected record decrypted
    "no_key",  # the key log has no secrets for this connection's client random
    "no_handshake",  # the capture began after the handshake: no client random to look up
    "bad_key",  # records failed their tag check (a wrong key, or damage)
    "gap",  # decrypted, but records were lost to gaps in the capture
    "unsupported",  # a cipher suite that is not AEAD (CBC, NULL): not decrypted
)

PlainHandler = Callable[[int, int, bytes | memoryview], None]
GapHandler = Callable[[int, int], None]
Sink = Callable[[int, bytes | memoryview], None]


class _Protection:
    """One direction's current record protection: AEAD, IV and sequence number."""

    __slots__ = ("aead", "decrypt_into", "iv", "iv_int", "seq", "secret", "opener", "bulk")

    def __init__(self, suite: Suite, key: bytes, iv: bytes, secret: bytes = b"") -> None:
        self.aead = suite.aead(key)
        self.decrypt_into = decrypt_into(self.aead)
        self.iv = iv
        self.iv_int = int.from_bytes(iv, "big")
        self.seq = 0
        self.secret = secret  # TLS 1.3 traffic secret, for KeyUpdate
        # Whether runs of application data go through _application_run: TLS 1.3 under a traffic
        # secret (not the handshake's), and TLS 1.2 when the compiled loop is there to run them.
        bulk = bool(secret) if suite.tls13 else Opener is not None
        self.opener = Opener(suite.evp_name, key, iv, suite.tls13) if bulk and Opener is not None else None
        self.bulk = bulk


class _Direction:
    __slots__ = (
        "buf",
        "hs",
        "protection",
        "app_secret",
        "next_protection",
        "overhead",
        "decrypted",
        "undecryptable",
        "records",
        "failed",
        "lost_gaps",
        "resync",
        "seq_tries",
        "pending",
        "pending_bytes",
        "need",
    )

    def __init__(self) -> None:
        self.buf = bytearray()
        self.hs = bytearray()  # handshake bytes not yet a whole message
        self.protection: _Protection | None = None
        self.app_secret = b""  # TLS 1.3: the traffic secret to switch to after Finished
        self.next_protection: _Protection | None = None  # TLS 1.2: active from ChangeCipherSpec on
        self.overhead = 0
        self.decrypted = 0
        self.undecryptable = 0
        self.records = 0  # protected records decrypted
        self.failed = 0  # records whose tag check failed
        self.lost_gaps = 0  # gaps that cost records
        self.resync = False
        self.seq_tries = 1
        self.pending: list[tuple[int, int, bytes]] = []  # (ts, type, record) waiting for keys
        self.pending_bytes = 0
        # How many bytes ``buf`` must hold before a record can be read: 5 + the length of the record
        # it starts with (5 while the header is incomplete or after a gap). Most segments of a
        # record that spans several end at this comparison.
        self.need = 5


class TlsStream:
    """Decrypts one TLS connection (direction 0: client to server, 1: server to client)."""

    __slots__ = (
        "keys",
        "on_plain",
        "on_gap",
        "dirs",
        "handshake_seen",
        "client_random",
        "server_random",
        "version",
        "suite",
        "hrr",
        "keys_missing",
        "gave_up",
        "cipher_code",
        "_out",
        "sinks",
        "feeders",
    )

    def __init__(
        self, keys: KeyLog | None, on_plain: PlainHandler, on_gap: GapHandler, *, handshake_seen: bool = True
    ) -> None:
        self.keys = keys
        self.on_plain = on_plain
        self.on_gap = on_gap
        self.dirs = (_Direction(), _Direction())
        self.handshake_seen = handshake_seen
        self.client_random = b""
        self.server_random = b""
        self.version = 0
        self.suite: Suite | None = None
        self.cipher_code = 0
        self.hrr = False
        self.keys_missing = False  # the ServerHello came and the key log had nothing (yet)
        self.gave_up = False  # stopped waiting for keys
        # Plaintext decrypted during one feed, handed on in one piece: far fewer calls into the
        # frame splitter than one per record (Python's ssl writes a record per send()).
        self._out: tuple[list[bytes | memoryview], list[bytes | memoryview]] = ([], [])
        # Where each direction's plaintext goes: ``on_plain`` with the direction bound, or a caller's
        # own pair (the connection's frame splitters, once it has them: no call in between).
        self.sinks: tuple[Sink, Sink] = (partial(on_plain, 0), partial(on_plain, 1))
        # ``feed`` with the direction bound, for a caller that hands each direction's bytes straight;
        # compiled, the bytes of a record not complete yet are kept with no Python call.
        self.feeders: tuple[Sink, Sink] = (
            (partial(self.feed, 0), partial(self.feed, 1))
            if Feeder is None
            else (
                Feeder(self, 0, partial(self._drain, 0)),
                Feeder(self, 1, partial(self._drain, 1)),
            )
        )

    # -- results -------------------------------------------------------------------------------------
    @property
    def state(self) -> str:
        if not self.handshake_seen or (not self.client_random and not self.suite):
            return "no_handshake"
        if self.cipher_code and self.suite is None:
            return "unsupported"
        if self.keys_missing or self.gave_up or not self.suite:
            return "no_key"
        records = sum(d.records for d in self.dirs)
        failed = sum(d.failed for d in self.dirs)
        if failed:
            return "bad_key"
        if sum(d.lost_gaps for d in self.dirs) or not records and sum(d.undecryptable for d in self.dirs):
            return "gap"
        return "decrypted"

    @property
    def cipher(self) -> str | None:
        if self.suite is not None:
            return self.suite.name
        return f"0x{self.cipher_code:04x}" if self.cipher_code else None

    # -- input ---------------------------------------------------------------------------------------
    def feed(self, d: int, ts: int, chunk: memoryview | bytes) -> None:
        side = self.dirs[d]
        side.buf += chunk
        if len(side.buf) >= side.need:  # else the rest of a record that began in an earlier segment
            self._drain(d, ts)

    def _drain(self, d: int, ts: int) -> None:
        """Read the records ``buf`` holds (``feed``'s work once a record at its front is whole)."""
        side = self.dirs[d]
        buf = side.buf
        n = len(buf)
        view = memoryview(buf)
        try:
            pos = 0
            waiting = False
            protection = side.protection
            if (
                buf[0] == APPLICATION_DATA
                and protection is not None
                and protection.bulk
                and not side.app_secret
                and not side.resync
            ):
                pos = self._application_run(d, side, protection, buf, view, 0, n)
                # Nearly always it stops at the start of a record not complete yet: wait for it.
                if n - pos < 5 or (
                    buf[pos] == APPLICATION_DATA
                    and buf[pos + 1] == 3
                    and n < pos + 5 + ((buf[pos + 3] << 8) | buf[pos + 4]) <= pos + 5 + MAX_RECORD
                ):
                    waiting = True
            if not waiting:
                pos = self._records(d, ts, side, buf, view, pos, n)
        finally:
            view.release()
        if pos:
            del buf[:pos]
            n = len(buf)
        side.need = 5 if n < 5 or side.resync else 5 + ((buf[3] << 8) | buf[4])
        # Only this direction's records were read (keys that arrive late flush their own replay).
        out = self._out[d]
        if out:
            data = out[0] if len(out) == 1 else b"".join(out)
            out.clear()
            self.sinks[d](ts, data)

    def _flush(self, ts: int) -> None:
        for d, out in enumerate(self._out):
            if out:
                data = out[0] if len(out) == 1 else b"".join(out)
                out.clear()
                self.sinks[d](ts, data)

    def _records(
        self, d: int, ts: int, side: _Direction, buf: bytearray, view: memoryview, pos: int, n: int
    ) -> int:
        while n - pos >= 5:
            if side.resync:
                found = self._resync(d, ts, pos)
                if found < 0:
                    # Keep the last 4 bytes: a header may begin there.
                    keep = max(pos, n - 4)
                    side.undecryptable += keep - pos
                    pos = keep
                    break
                pos = found
                if side.resync:
                    break  # a candidate whose record is not complete yet
                continue
            typ = buf[pos]
            if typ == APPLICATION_DATA:
                protection = side.protection
                if protection is not None and protection.bulk and not side.app_secret:
                    pos = self._application_run(d, side, protection, buf, view, pos, n)
                    if n - pos < 5:
                        break
                    typ = buf[pos]
            length = (buf[pos + 3] << 8) | buf[pos + 4]
            end = pos + 5 + length
            if not (
                CHANGE_CIPHER_SPEC <= typ <= APPLICATION_DATA and buf[pos + 1] == 3 and length <= MAX_RECORD
            ):
                # Not a record header where one must be: step lost (damage, or the capture began
                # inside a record). Look for the next record that decrypts.
                side.resync = True
                side.seq_tries = MAX_SEQ_TRIES
                continue
            if end > n:
                break
            # Everything else, and a record the run below stopped at (a failed tag, padding, or a
            # handshake message such as KeyUpdate inside: decrypted again here, which is rare),
            # takes the careful path.
            self._record(d, ts, typ, view[pos:end])
            pos = end
        return pos

    def _application_run(
        self,
        d: int,
        side: _Direction,
        protection: _Protection,
        buf: bytearray,
        view: memoryview,
        pos: int,
        n: int,
    ) -> int:
        """The common case, inline: TLS 1.3 records under a traffic secret holding application data
        without padding, from ``pos`` on, decrypted straight into one buffer back to back (each
        record's inner content type is overwritten by the next one's plaintext). Returns where it
        stopped: at a record that is incomplete or not that case, for the careful path. The
        compiled loop does the same, and TLS 1.2's application data too."""
        opener = protection.opener
        if opener is not None:
            first = protection.seq
            end, seq, content = opener.run(buf, pos, n, first)
            if seq != first:
                protection.seq = seq
                side.records += seq - first
                side.decrypted += len(content)
                side.overhead += end - pos - len(content)
                if content:
                    self._out[d].append(content)
            return end  # type: ignore[no-any-return]
        decrypt_into = protection.decrypt_into
        iv = protection.iv_int
        seq = first = protection.seq
        start = pos
        plain = bytearray(n - pos)  # at most the records' bytes; trimmed to the plaintext below
        into = memoryview(plain)
        o = 0
        while n - pos >= 5 and buf[pos] == APPLICATION_DATA:
            length = (buf[pos + 3] << 8) | buf[pos + 4]
            end = pos + 5 + length
            # 17: a 16-byte tag and at least the inner content type (RFC 8446 section 5.2).
            if end > n or length > MAX_RECORD or length < 17:
                break
            stop = o + length - 16  # the content and the inner content type
            try:
                decrypt_into(
                    (iv ^ seq).to_bytes(12, "big"), view[pos + 5 : end], view[pos : pos + 5], into[o:stop]
                )
            except (InvalidTag, ValueError):
                break
            if plain[stop - 1] != APPLICATION_DATA:
                break  # padding, or a handshake message or an alert inside
            o = stop - 1
            seq += 1
            pos = end
        into.release()
        if seq != first:
            protection.seq = seq
            side.records += seq - first
            side.decrypted += o
            side.overhead += pos - start - o  # per record: its header, tag and inner content type
            if o:
                del plain[o:]
                self._out[d].append(memoryview(plain).toreadonly())
        return pos

    def gap(self, d: int, ts: int, nbytes: int) -> None:
        """The capture lost ``nbytes`` of direction ``d``: the record they fell in is gone."""
        self._flush(ts)
        side = self.dirs[d]
        side.undecryptable += len(side.buf)
        side.buf.clear()
        side.need = 5
        side.hs.clear()
        if side.protection is not None or side.pending:
            side.lost_gaps += 1
            side.resync = True
            # Each lost record took at least a header and a tag: this bounds how many were lost.
            side.seq_tries = min(MAX_SEQ_TRIES, nbytes // 22 + 2)
        self.on_gap(d, ts)

    def finish(self) -> None:
        """End of the connection: what is still buffered or waiting for keys was not decrypted."""
        for side in self.dirs:
            side.undecryptable += len(side.buf) + side.pending_bytes
            side.buf.clear()
            side.need = 5
            side.pending.clear()
            side.pending_bytes = 0

    # -- records -------------------------------------------------------------------------------------
    def _record(self, d: int, ts: int, typ: int, rec: memoryview | bytes) -> None:
        side = self.dirs[d]
        protection = side.protection
        if protection is None:
            self._clear_record(d, ts, typ, rec)
        elif typ == CHANGE_CIPHER_SPEC:
            side.overhead += len(rec)  # TLS 1.3's compatibility ChangeCipherSpec (RFC 8446 section D.4)
        elif self.suite is not None and self.suite.tls13:
            self._tls13_record(d, ts, typ, rec, protection)
        else:
            self._tls12_record(d, ts, typ, rec, protection)

    def _clear_record(self, d: int, ts: int, typ: int, rec: memoryview | bytes) -> None:
        side = self.dirs[d]
        if typ == HANDSHAKE and (not self.suite or not self._protected_from_now(d)):
            side.overhead += len(rec)
            self._handshake(d, bytes(rec[5:]), encrypted=False)
        elif typ == CHANGE_CIPHER_SPEC:
            side.overhead += len(rec)
            if side.next_protection is not None:  # TLS 1.2: this side protects its records from now on
                side.protection, side.next_protection = side.next_protection, None
        elif typ == ALERT and not self._protected_from_now(d):
            side.overhead += len(rec)
        elif (
            self.keys_missing and not self.gave_up and self.keys is not None and self.keys.refresh is not None
        ):
            # A live capture: the client may not have appended this connection's keys yet.
            side.pending.append((ts, typ, bytes(rec)))
            side.pending_bytes += len(rec)
            self._setup_keys()
            if self.keys_missing and sum(s.pending_bytes for s in self.dirs) > MAX_PENDING:
                self.gave_up = True
                for s in self.dirs:
                    s.undecryptable += s.pending_bytes
                    s.pending.clear()
                    s.pending_bytes = 0
        else:
            side.undecryptable += len(rec)

    def _protected_from_now(self, d: int) -> bool:
        """TLS 1.3 protects everything after the ServerHello (both sides); TLS 1.2 only after each
        side's ChangeCipherSpec, which _clear_record handles."""
        return self.suite is not None and self.suite.tls13

    def _open(
        self, protection: _Protection, typ: int, rec: memoryview | bytes, tls13: bool, explicit: int
    ) -> bytes | None:
        seq = protection.seq
        if tls13:
            nonce = (protection.iv_int ^ seq).to_bytes(12, "big")
            body = rec[5:]
            aad = rec[:5]
        else:
            if explicit:
                nonce = protection.iv + rec[5 : 5 + explicit]
                body = rec[5 + explicit :]
            else:
                nonce = (protection.iv_int ^ seq).to_bytes(12, "big")
                body = rec[5:]
            if len(body) < 16:
                return None  # shorter than a tag (damage, or not a record): it fails as a bad tag would
            # RFC 5246 section 6.2.3.3: seq_num + type + version + the plaintext's length.
            aad = seq.to_bytes(8, "big") + rec[:3] + (len(body) - 16).to_bytes(2, "big")
        try:
            plain = protection.aead.decrypt(nonce, body, aad)  # type: ignore[attr-defined]
        except (InvalidTag, ValueError):
            return None
        protection.seq = seq + 1
        return plain

    def _failed(self, d: int, rec: memoryview | bytes, protection: _Protection) -> None:
        side = self.dirs[d]
        side.failed += 1
        side.undecryptable += len(rec)
        protection.seq += 1  # the sender spent a sequence number on it

    def _tls13_record(
        self, d: int, ts: int, typ: int, rec: memoryview | bytes, protection: _Protection
    ) -> None:
        side = self.dirs[d]
        if typ != APPLICATION_DATA:
            side.overhead += len(rec)  # an alert sent in the clear
            return
        plain = self._open(protection, typ, rec, True, 0)
        if plain is None and side.app_secret and side.records == 0:
            # The handshake records before were lost or are not ours: try the traffic secret.
            assert self.suite is not None
            trial = _Protection(self.suite, *tls13_keys(self.suite, side.app_secret), side.app_secret)
            plain = self._open(trial, typ, rec, True, 0)
            if plain is not None:
                side.protection = protection = trial
                side.app_secret = b""
        if plain is None:
            self._failed(d, rec, protection)
            return
        side.records += 1
        if plain[-1:] == b"\x17":  # application data, no padding: nearly every record
            content = plain[:-1]
            inner = APPLICATION_DATA
        else:
            stripped = plain.rstrip(b"\0")  # zero padding after the inner content type
            inner = stripped[-1] if stripped else 0
            content = stripped[:-1]
        if inner == APPLICATION_DATA:
            side.overhead += len(rec) - len(content)
            side.decrypted += len(content)
            if content:
                self._out[d].append(content)
        else:
            side.overhead += len(rec)
            if inner == HANDSHAKE:
                self._handshake(d, content, encrypted=True)

    def _tls12_record(
        self, d: int, ts: int, typ: int, rec: memoryview | bytes, protection: _Protection
    ) -> None:
        side = self.dirs[d]
        assert self.suite is not None
        plain = self._open(protection, typ, rec, False, self.suite.explicit_nonce)
        if plain is None:
            self._failed(d, rec, protection)
            return
        side.records += 1
        if typ == APPLICATION_DATA:
            side.overhead += len(rec) - len(plain)
            side.decrypted += len(plain)
            if plain:
                self._out[d].append(plain)
        else:
            side.overhead += len(rec)  # Finished, alerts, renegotiation

    # -- handshake -----------------------------------------------------------------------------------
    def _handshake(self, d: int, data: bytes, encrypted: bool) -> None:
        side = self.dirs[d]
        side.hs += data
        hs = side.hs
        pos = 0
        while len(hs) - pos >= 4:
            size = int.from_bytes(hs[pos + 1 : pos + 4], "big")
            if size > MAX_HANDSHAKE:
                hs.clear()
                return
            if len(hs) - pos - 4 < size:
                break
            kind = hs[pos]
            body = bytes(hs[pos + 4 : pos + 4 + size])
            pos += 4 + size
            if kind == CLIENT_HELLO and d == 0 and len(body) >= 34:
                self.client_random = body[2:34]
            elif kind == SERVER_HELLO and d == 1 and len(body) >= 38:
                self._server_hello(body)
            elif encrypted and kind == FINISHED:
                self._after_finished(d)
            elif encrypted and kind == KEY_UPDATE:
                self._key_update(d)
        del hs[:pos]

    def _server_hello(self, body: bytes) -> None:
        random = body[2:34]
        if random == HRR_RANDOM:
            self.hrr = True  # a second ClientHello (same random) and the real ServerHello follow
            return
        self.server_random = random
        p = 35 + body[34]  # legacy_session_id
        if len(body) < p + 3:
            return
        self.cipher_code = int.from_bytes(body[p : p + 2], "big")
        version = int.from_bytes(body[0:2], "big")
        q = p + 3
        if len(body) >= q + 2:
            end = min(len(body), q + 2 + int.from_bytes(body[q : q + 2], "big"))
            q += 2
            while end - q >= 4:
                ext = int.from_bytes(body[q : q + 2], "big")
                n = int.from_bytes(body[q + 2 : q + 4], "big")
                if ext == EXT_SUPPORTED_VERSIONS and n == 2:
                    version = int.from_bytes(body[q + 4 : q + 6], "big")
                q += 4 + n
        self.version = version
        suite = SUITES.get(self.cipher_code)
        if suite is None or suite.tls13 != (version == TLS13):
            return
        self.suite = suite
        self._setup_keys()

    def _setup_keys(self) -> None:
        suite = self.suite
        if suite is None or self.keys is None or not self.client_random:
            self.keys_missing = True
            return
        if suite.tls13:
            found = self.keys.secrets(self.client_random, TLS13_LABELS)
            if found is None:
                self.keys_missing = True
                return
            chts, shts, cts, sts = found
            client, server = self.dirs
            client.protection = _Protection(suite, *tls13_keys(suite, chts))
            server.protection = _Protection(suite, *tls13_keys(suite, shts))
            client.app_secret, server.app_secret = cts, sts
        else:
            found = self.keys.secrets(self.client_random, TLS12_LABELS)
            if found is None:
                self.keys_missing = True
                return
            (c_key, c_iv), (s_key, s_iv) = tls12_keys(suite, found[0], self.client_random, self.server_random)
            self.dirs[0].next_protection = _Protection(suite, c_key, c_iv)
            self.dirs[1].next_protection = _Protection(suite, s_key, s_iv)
        was_missing, self.keys_missing = self.keys_missing, False
        if was_missing:
            self._replay_pending()

    def _replay_pending(self) -> None:
        for d, side in enumerate(self.dirs):
            pending, side.pending, side.pending_bytes = side.pending, [], 0
            for ts, typ, rec in pending:
                if side.protection is None and side.next_protection is not None:
                    side.protection, side.next_protection = side.next_protection, None
                self._record(d, ts, typ, rec)
            if pending:  # a side with nothing waiting has no time to flush at
                self._flush(pending[-1][0])

    def _after_finished(self, d: int) -> None:
        """TLS 1.3: this side's records after its Finished use its traffic secret."""
        side = self.dirs[d]
        if side.app_secret and self.suite is not None:
            side.protection = _Protection(
                self.suite, *tls13_keys(self.suite, side.app_secret), side.app_secret
            )
            side.app_secret = b""

    def _key_update(self, d: int) -> None:
        """TLS 1.3 KeyUpdate: the sender's next records use the next traffic secret."""
        side = self.dirs[d]
        current = side.protection
        if current is None or not current.secret or self.suite is None:
            return
        secret = tls13_next_secret(self.suite, current.secret)
        side.protection = _Protection(self.suite, *tls13_keys(self.suite, secret), secret)

    # -- after a gap ---------------------------------------------------------------------------------
    def _resync(self, d: int, ts: int, start: int) -> int:
        """The offset after the next record that decrypts (processed), or of a candidate still
        incomplete (resync stays on), or -1 when none starts before the last 4 bytes. Bytes passed
        over before the offset returned are counted undecryptable here."""
        side = self.dirs[d]
        buf = side.buf
        protection = side.protection
        n = len(buf)
        pos = start
        while n - pos >= 5:
            if buf[pos] == APPLICATION_DATA and buf[pos + 1] == 3 and buf[pos + 2] == 3:
                length = (buf[pos + 3] << 8) | buf[pos + 4]
                if 17 <= length <= MAX_RECORD:
                    if pos + 5 + length > n or protection is None:
                        side.undecryptable += pos - start
                        side.resync = protection is not None
                        return pos
                    rec = bytes(buf[pos : pos + 5 + length])  # buf is not resized while resyncing
                    if self._try_sequences(d, ts, rec, protection):
                        side.undecryptable += pos - start
                        side.resync = False
                        return pos + 5 + length
            pos += 1
        return -1

    def _try_sequences(self, d: int, ts: int, rec: memoryview | bytes, protection: _Protection) -> bool:
        side = self.dirs[d]
        first = protection.seq
        for seq in range(first, first + side.seq_tries):
            protection.seq = seq
            saved = side.failed, side.undecryptable
            self._record(d, ts, APPLICATION_DATA, rec)
            if side.failed == saved[0]:
                return True
            side.failed, side.undecryptable = saved
        protection.seq = first
        return False
