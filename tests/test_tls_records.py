"""The compiled record loop (kwsniff/tls/_records.c) against records sealed by `cryptography`.

Every AEAD suite kwsniff decrypts, TLS 1.3 and 1.2: a run of application-data records opens to the
plaintext, and the loop stops, without consuming it, at the first record that is incomplete, fails
its tag, is not application data, or (TLS 1.3) holds padding or another inner content type, so the
careful Python path sees exactly that record. The real-traffic comparison of both loops is in
tests/test_tls_decrypt.py (both_record_loops).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from kwsniff.tls._records import LIBCRYPTO, Opener

from kwsniff.tls import stream as stream_module
from kwsniff.tls.schedule import SUITES, Suite, tls13_keys, tls13_next_secret

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fuzz"))
from tls_wire import SUITE_CODES, keyed_stream, seal  # noqa: E402  (fuzz/tls_wire.py: records sealed by cryptography)


def keys(suite: Suite) -> tuple[bytes, bytes]:
    iv_len = 4 if suite.aead is AESGCM and not suite.tls13 else 12
    return bytes(range(1, suite.key_len + 1)), bytes(range(100, 100 + iv_len))


@pytest.mark.parametrize("code", SUITE_CODES, ids=lambda c: SUITES[c].name)
def test_a_run_of_records_opens_to_its_plaintext_and_stops_at_the_first_it_cannot_take(code: int) -> None:
    suite = SUITES[code]
    key, iv = keys(suite)
    contents = [b"kafka" * 400, b"", b"x", os.urandom(16384)]
    records = [seal(suite, key, iv, 7 + i, c) for i, c in enumerate(contents)]
    run = b"".join(records)
    opener = Opener(suite.evp_name, key, iv, suite.tls13)
    # Two bytes before, and half of the next record after: neither is read.
    tail = seal(suite, key, iv, 11, b"next")
    buf = bytearray(b"..") + run + tail[: len(tail) // 2]
    assert opener.run(buf, 2, len(buf), 7) == (2 + len(run), 11, b"".join(contents))
    assert opener.records() == 4
    # Where the loop stops, the record is untouched and the sequence number is the one it needs.
    damaged = bytearray(tail)
    damaged[-1] ^= 1
    not_data = seal(suite, key, iv, 11, b"\x01alert", typ=21)
    for stopper in (bytes(damaged), not_data, tail[:-1]):
        buf = bytearray(run + stopper)
        assert opener.run(buf, 0, len(buf), 7) == (len(run), 11, b"".join(contents))
    # The wrong sequence number (the nonce, and TLS 1.2's additional data) opens nothing.
    assert opener.run(bytearray(run), 0, len(run), 8) == (0, 8, b"")


@pytest.mark.parametrize("code", [0x1301, 0x1302, 0x1303], ids=lambda c: SUITES[c].name)
def test_tls13_records_with_padding_or_another_inner_type_are_left_to_the_careful_path(code: int) -> None:
    suite = SUITES[code]
    key, iv = keys(suite)
    first = seal(suite, key, iv, 0, b"data")
    opener = Opener(suite.evp_name, key, iv, True)
    for odd in (
        seal(suite, key, iv, 1, b"data" + b"\x17", inner=0),  # zero padding after the inner type
        seal(suite, key, iv, 1, b"\x18\x00\x00\x01\x00", inner=22),  # a KeyUpdate
        seal(suite, key, iv, 1, b"\x01\x00", inner=21),  # an alert
    ):
        buf = bytearray(first + odd)
        assert opener.run(buf, 0, len(buf), 0) == (len(first), 1, b"data")


def test_an_opener_refuses_keys_of_the_wrong_length_and_unknown_ciphers() -> None:
    with pytest.raises(ValueError, match="wrong length"):
        Opener("aes-128-gcm", bytes(32), bytes(12), True)
    with pytest.raises(ValueError, match="wrong length"):
        Opener("aes-256-gcm", bytes(32), bytes(12), False)  # TLS 1.2 AES-GCM: a 4-byte fixed IV
    with pytest.raises(ValueError, match="unknown AEAD rc4"):
        Opener("rc4", bytes(16), bytes(12), True)
    opener = Opener("aes-128-gcm", bytes(16), bytes(12), True)
    with pytest.raises(ValueError, match="outside the buffer"):
        opener.run(bytearray(10), 0, 11, 0)


def test_the_loop_uses_the_libcrypto_pythons_ssl_module_links() -> None:
    import _ssl

    linked = subprocess.run(["ldd", _ssl.__file__], capture_output=True, text=True, check=True).stdout
    assert LIBCRYPTO in linked


def test_kwsniff_pure_python_turns_the_compiled_loop_off() -> None:
    code = "from kwsniff.tls import stream; print(stream.Opener)"
    env = dict(os.environ, KWSNIFF_PURE_PYTHON="1")
    pure = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    env["KWSNIFF_PURE_PYTHON"] = "0"
    compiled = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert (pure.stdout, compiled.stdout) == ("None\n", "<class 'kwsniff.tls._records.Opener'>\n")


def feed_both_ways(
    monkeypatch: pytest.MonkeyPatch, suite: Suite, secret: bytes, wire: bytes, piece: int
) -> list[tuple[bytes, list[int]]]:
    """TLS 1.3 client records (``wire``, under traffic ``secret``) fed in ``piece``-byte segments
    through the stream's feeders, compiled and then pure Python: (plaintext, counters) of each."""
    results = []
    for compiled in (True, False):
        with monkeypatch.context() as m:
            if not compiled:
                m.setattr(stream_module, "Opener", None)
                m.setattr(stream_module, "Feeder", None)
            plain = bytearray()
            stream = keyed_stream(suite, lambda d, ts, data, plain=plain: plain.extend(data), secret)
            side = stream.dirs[0]
            assert (side.protection.opener is not None) is compiled
            for i in range(0, len(wire), piece):
                stream.feeders[0](i, wire[i : i + piece])
            stream.finish()
            results.append(
                (bytes(plain), [side.overhead, side.decrypted, side.undecryptable, side.records, side.failed])
            )
    return results


@pytest.mark.parametrize("piece", [1, 1448, 65536])
def test_feeders_compiled_and_pure_python_agree_on_tags_padding_and_key_updates(
    monkeypatch: pytest.MonkeyPatch, piece: int
) -> None:
    """The compiled feeder reads runs of records itself and hands what it stops at to the Python
    path: a failed tag, padding, a KeyUpdate (after which the next secret's keys apply)."""
    suite = SUITES[0x1302]
    secret = bytes(range(48))
    key, iv = tls13_keys(suite, secret)
    new_key, new_iv = tls13_keys(suite, tls13_next_secret(suite, secret))
    damaged = bytearray(seal(suite, key, iv, 3, b"lost"))
    damaged[-1] ^= 1
    wire = b"".join(
        [seal(suite, key, iv, i, b"%d" % i * 700) for i in range(3)]
        + [bytes(damaged)]
        + [
            seal(suite, key, iv, 4, b"padded"),
            seal(suite, key, iv, 5, b"x\x17", inner=0),
        ]  # then zero padding
        + [seal(suite, key, iv, 6, b"\x18\x00\x00\x01\x00", inner=22)]  # KeyUpdate, update_not_requested
        + [seal(suite, new_key, new_iv, i, b"new%d" % i * 300) for i in range(4)]
    )
    expected = (
        b"".join(b"%d" % i * 700 for i in range(3))
        + b"padded"
        + b"x"
        + b"".join(b"new%d" % i * 300 for i in range(4))
    )
    compiled, pure = feed_both_ways(monkeypatch, suite, secret, wire, piece)
    assert compiled == pure
    assert compiled[0] == expected
    # overhead: every header, tag and inner type, the padding, the KeyUpdate record; one failed tag
    assert compiled[1][1:] == [len(expected), len(damaged), 10, 1]
    assert compiled[1][0] + compiled[1][1] + compiled[1][2] == len(wire)
