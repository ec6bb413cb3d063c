"""TLS decryption, suite by suite, against tshark's decryption of the same capture.

The traffic is real: `openssl s_server -keylogfile` and `openssl s_client` on 127.0.0.1 (typing
``K`` in s_client makes both sides send a KeyUpdate), or Python's ssl module. The capture is read
twice, independently: by kwsniff's TlsStream fed from dpkt's view of each direction, and by
``tshark -o tls.keylog_file:``; both must give the text the two programs typed.
"""

from __future__ import annotations

import fcntl
import os
import pickle
import select
import signal
import socket
import ssl
import struct
import subprocess
import sys
import termios
import threading
import time
from functools import partial
from pathlib import Path
from typing import IO

import dpkt
import pytest
from realparts import (
    LOOPBACK,
    free_port,
    free_ports,
    ip_certificate,
    pcap_packet_count,
    stop_process,
    tcpdump_capture,
    wait_for_captured_packets,
    wait_for_listener,
    wait_until,
)

from kwsniff.pipeline.connection import accounting_difference
from kwsniff.pipeline.keylogs import KeyLogFollower, load_keylog
from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink
from kwsniff.tls import KeyLog, TlsStream, schedule
from kwsniff.tls import stream as stream_module

CLIENT_LINES = [b"hello from the client\n", b"after K\n"]
SERVER_LINES = [b"hello from the server\n", b"after the key updates\n"]
TIMEOUT_S = 20


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return ip_certificate(tmp_path_factory.mktemp("cert"))


def printed(out: IO[bytes], wanted: bytes) -> None:
    """Wait until `out` prints `wanted` (openssl writes what it receives unbuffered)."""
    seen, deadline = b"", time.monotonic() + TIMEOUT_S
    while wanted not in seen:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([out], [], [], max(left, 0))
        chunk = os.read(out.fileno(), 65536) if ready else b""
        if not chunk:
            raise AssertionError(f"openssl did not print {wanted!r} within {TIMEOUT_S} s: {seen[-300:]!r}")
        seen += chunk


def openssl_session(
    tmp: Path, cert: tuple[Path, Path], protocol: list[str], key_update: bool
) -> tuple[Path, Path, int]:
    """One s_client/s_server conversation: each side types its lines; between them the client types
    ``K`` (a KeyUpdate that asks the server for one too). Returns (pcap, key log, port)."""
    port = free_port()
    pcap, keylog = tmp / "openssl.pcap", tmp / "keys.log"
    server = subprocess.Popen(
        ["openssl", "s_server", "-quiet", "-accept", f"{LOOPBACK}:{port}", "-cert", str(cert[0])]
        + ["-key", str(cert[1]), "-keylogfile", str(keylog), *protocol],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    client = None
    try:
        wait_for_listener(port, TIMEOUT_S)
        with tcpdump_capture(pcap, port):
            client = subprocess.Popen(
                ["openssl", "s_client", "-connect", f"{LOOPBACK}:{port}", *protocol],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            assert client.stdin is not None and client.stdout is not None and client.stderr is not None
            assert server.stdin is not None and server.stdout is not None
            # Each step waits until the other side has printed what was typed, not a fixed time: under
            # load the handshake can outlast any sleep, and then nothing is left for tshark to decrypt.
            # "after K" reaches the server after the client's KeyUpdate, so the server's own KeyUpdate
            # goes out before its second line.
            for i in range(2):
                if i and key_update:  # s_client takes "K" only as a read of its own, and says so
                    client.stdin.write(b"K\n")
                    client.stdin.flush()
                    printed(client.stderr, b"KEYUPDATE")
                client.stdin.write(CLIENT_LINES[i])
                client.stdin.flush()
                printed(server.stdout, CLIENT_LINES[i])
                server.stdin.write(SERVER_LINES[i])
                server.stdin.flush()
                printed(client.stdout, SERVER_LINES[i])
    finally:
        if client is not None:
            stop_process(client)  # type: ignore[arg-type]
        stop_process(server)  # type: ignore[arg-type]
    return pcap, keylog, port


def directions(pcap: Path, server_port: int) -> list[tuple[int, float, bytes]]:
    """(direction, time, payload) of each direction's bytes in order, read by dpkt: loopback delivers
    in order, but retransmits now and then, so bytes before the next expected sequence number are
    dropped."""
    out = []
    expected: dict[int, int] = {}
    with pcap.open("rb") as f:
        for ts, buf in dpkt.pcap.Reader(f):
            tcp = dpkt.ethernet.Ethernet(buf).data.data
            if not isinstance(tcp, dpkt.tcp.TCP):
                continue
            d = 0 if tcp.dport == server_port else 1
            if tcp.flags & dpkt.tcp.TH_SYN:
                expected[d] = tcp.seq + 1
                continue
            data = bytes(tcp.data)
            skip = expected.get(d, tcp.seq) - tcp.seq
            if data[skip:]:
                out.append((d, ts, data[skip:]))
                expected[d] = tcp.seq + len(data)
    return out


def decrypt_with_kwsniff(pcap: Path, keylog: KeyLog | None, port: int) -> tuple[list[bytes], TlsStream]:
    plain = [b"", b""]

    def on_plain(d: int, ts: int, data: bytes) -> None:
        plain[d] += data

    stream = TlsStream(keylog, on_plain, lambda d, ts: None)
    for d, ts, data in directions(pcap, port):
        stream.feeders[d](int(ts * 1e6), data)  # as a connection feeds it (compiled: _records.c)
    stream.finish()
    return plain, stream


def both_record_loops(
    pcap: Path, keylog: Path, port: int, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[bytes], TlsStream]:
    """decrypt_with_kwsniff, with the compiled record loop (kwsniff/tls/_records.c) and then with the
    pure-Python loop on cryptography: the same plaintext and the same counters."""
    plain, stream = decrypt_with_kwsniff(pcap, load_keylog([keylog]), port)
    opened = [s.protection.opener.records() for s in stream.dirs if s.protection and s.protection.opener]
    assert len(opened) == 2 and min(opened) >= 1  # the compiled loop ran both ways
    with monkeypatch.context() as m:
        m.setattr(stream_module, "Opener", None)
        m.setattr(stream_module, "Feeder", None)
        again, python = decrypt_with_kwsniff(pcap, load_keylog([keylog]), port)
        assert type(python.feeders[0]) is partial
    assert again == plain
    counters = [
        [(s.overhead, s.decrypted, s.undecryptable, s.records, s.failed) for s in t.dirs]
        for t in (stream, python)
    ]
    assert counters[0] == counters[1]
    assert all(s.protection is None or s.protection.opener is None for s in python.dirs)
    return plain, stream


def decrypt_with_tshark(pcap: Path, keylog: Path, port: int) -> list[bytes]:
    done = subprocess.run(
        ["tshark", "-r", str(pcap), "-o", f"tls.keylog_file:{keylog}", "-T", "fields"]
        + ["-e", "tcp.dstport", "-e", "data.data", "-Y", "data"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    plain = [b"", b""]
    for line in done.stdout.splitlines():
        dport, _, data = line.partition("\t")
        plain[0 if int(dport) == port else 1] += bytes.fromhex(data.replace(":", ""))
    return plain


def key_updates_seen_by_tshark(pcap: Path, keylog: Path) -> int:
    done = subprocess.run(
        ["tshark", "-r", str(pcap), "-o", f"tls.keylog_file:{keylog}", "-Y", "tls.handshake.type == 24"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return len(done.stdout.splitlines())


TLS13_SUITES = ["TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"]
TLS12_SUITES = {
    "ECDHE-RSA-AES128-GCM-SHA256": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "ECDHE-RSA-AES256-GCM-SHA384": "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "ECDHE-RSA-CHACHA20-POLY1305": "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
}


@pytest.mark.parametrize("suite", TLS13_SUITES)
def test_tls13_suite_with_key_updates_both_ways_decrypts_as_tshark_does(
    suite: str, certificate: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pcap, keylog, port = openssl_session(tmp_path, certificate, ["-ciphersuites", suite], key_update=True)
    assert key_updates_seen_by_tshark(pcap, keylog) == 2  # the client's, and the one it asked for
    expected = [b"".join(CLIENT_LINES), b"".join(SERVER_LINES)]
    assert decrypt_with_tshark(pcap, keylog, port) == expected
    plain, stream = both_record_loops(pcap, keylog, port, monkeypatch)
    assert plain == expected
    assert (stream.state, stream.cipher, stream.version) == ("decrypted", suite, 0x0304)
    assert [(s.failed, s.undecryptable) for s in stream.dirs] == [(0, 0), (0, 0)]


@pytest.mark.parametrize("cipher", sorted(TLS12_SUITES))
def test_tls12_suite_decrypts_as_tshark_does(
    cipher: str, certificate: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pcap, keylog, port = openssl_session(
        tmp_path, certificate, ["-tls1_2", "-cipher", cipher], key_update=False
    )
    expected = [b"".join(CLIENT_LINES), b"".join(SERVER_LINES)]
    assert decrypt_with_tshark(pcap, keylog, port) == expected
    plain, stream = both_record_loops(pcap, keylog, port, monkeypatch)
    assert plain == expected
    assert (stream.state, stream.cipher, stream.version) == ("decrypted", TLS12_SUITES[cipher], 0x0303)


def test_hello_retry_request_and_a_resumed_session_decrypt_as_tshark_does(
    certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    """The server takes only P-256 while the clients offer an X25519 key share first: each handshake
    goes through a HelloRetryRequest. The second client resumes the first one's session (PSK)."""
    port = free_port()
    pcap, keylog, session = tmp_path / "hrr.pcap", tmp_path / "keys.log", tmp_path / "session.pem"
    server = subprocess.Popen(
        ["openssl", "s_server", "-quiet", "-accept", f"{LOOPBACK}:{port}", "-cert", str(certificate[0])]
        + ["-key", str(certificate[1]), "-keylogfile", str(keylog), "-groups", "P-256"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    reused = []
    try:
        wait_for_listener(port, TIMEOUT_S)
        with tcpdump_capture(pcap, port):
            for line, sess in ((b"first\n", "-sess_out"), (b"second\n", "-sess_in")):
                client = subprocess.Popen(
                    ["openssl", "s_client", "-connect", f"{LOOPBACK}:{port}", "-groups", "X25519:P-256"]
                    + [sess, str(session)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                )
                assert client.stdin is not None
                client.stdin.write(line)
                client.stdin.flush()
                # The line has crossed, and the first client holds the session its ticket gave (it
                # writes -sess_out when the ticket comes): only then may it close.
                assert server.stdout is not None
                printed(server.stdout, line)
                if sess == "-sess_out":
                    wait_until(
                        lambda: (
                            b"END SSL SESSION PARAMETERS" in session.read_bytes()
                            if session.exists()
                            else False
                        ),
                        "s_client writing its session",
                        TIMEOUT_S,
                    )
                out, _ = client.communicate(timeout=TIMEOUT_S)  # end of input: s_client closes
                reused.append(b"Reused, TLSv1.3" in out)
    finally:
        stop_process(server)  # type: ignore[arg-type]
    assert reused == [False, True]
    done = subprocess.run(
        [
            "tshark",
            "-r",
            str(pcap),
            "-Y",
            "tls.handshake.type == 2",
            "-T",
            "fields",
            "-e",
            "tls.handshake.random",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    randoms = done.stdout.split()
    assert randoms.count("cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c") == 2  # two HRRs
    sink = ListSink()
    run_capture(pcap, sink, SessionOptions(broker_ports=frozenset({port}), keylog=load_keylog([keylog])))
    conns = sorted(sink.tables["connections"], key=lambda c: c["ts_first"])
    assert [(c["tls_state"], c["decrypted_bytes_to_broker"]) for c in conns] == [
        ("decrypted", 6),
        ("decrypted", 7),
    ]
    assert [accounting_difference(c, d) for c in conns for d in ("to_broker", "to_client")] == [0, 0, 0, 0]
    tshark_plain = decrypt_with_tshark(pcap, keylog, port)
    assert tshark_plain == [b"first\nsecond\n", b""]


def echo_over_tls(
    tmp: Path, certificate: tuple[Path, Path], payload: bytes, keylog: Path, piece: int = 0, port: int = 0
) -> tuple[Path, int]:
    """Python's ssl on both ends (TLS 1.3): the client sends ``payload`` (in writes of ``piece``
    bytes, each its own record and segment), the server echoes it."""
    port = port or free_port()
    pcap = tmp / "echo.pcap"
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(*certificate)
    server_ctx.keylog_filename = str(keylog)
    listener = socket.create_server((LOOPBACK, port))
    listener.settimeout(TIMEOUT_S)

    def serve() -> None:
        conn, _ = listener.accept()
        with server_ctx.wrap_socket(conn, server_side=True) as tls:
            tls.settimeout(TIMEOUT_S)
            got = b""
            while len(got) < len(payload):
                got += tls.recv(65536)
            tls.sendall(got)

    with tcpdump_capture(pcap, port):
        server = threading.Thread(target=serve, daemon=True)
        server.start()
        client_ctx = ssl.create_default_context(cafile=str(certificate[0]))
        with socket.create_connection((LOOPBACK, port), timeout=TIMEOUT_S) as raw:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with client_ctx.wrap_socket(raw, server_hostname=LOOPBACK) as tls:
                step = piece or len(payload)
                for i in range(0, len(payload), step):
                    tls.sendall(payload[i : i + step])
                    if piece:  # its own segment: the next write waits until this one is acknowledged
                        wait_until(
                            lambda: unacknowledged(tls) == 0, "the piece acknowledged", TIMEOUT_S, 0.001
                        )
                echoed = b""
                while len(echoed) < len(payload):
                    echoed += tls.recv(65536)
        server.join(TIMEOUT_S)
        listener.close()
    assert echoed == payload
    return pcap, port


def unacknowledged(sock: socket.socket) -> int:
    """Bytes in the socket's send queue, not yet acknowledged by the peer (SIOCOUTQ)."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]


def read_connection(pcap: Path, port: int, keylog: KeyLog | None) -> dict:
    sink = ListSink()
    result = run_capture(pcap, sink, SessionOptions(broker_ports=frozenset({port}), keylog=keylog))
    assert result.decode_errors == {}
    (conn,) = sink.tables["connections"]
    for d in ("to_broker", "to_client"):
        assert accounting_difference(conn, d) == 0
    return conn


PAYLOAD = bytes(range(256)) * 40


def test_no_key_for_the_connection_marks_it_and_counts_its_records_undecrypted(
    certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    keylog = tmp_path / "keys.log"
    pcap, port = echo_over_tls(tmp_path, certificate, PAYLOAD, keylog)
    conn = read_connection(pcap, port, KeyLog("# a key log with nothing for this connection\n"))
    assert (conn["tls_state"], conn["tls_cipher"], conn["tls_failed_records"]) == (
        "no_key",
        "TLS_AES_256_GCM_SHA384",
        0,
    )
    for d in ("to_broker", "to_client"):
        assert conn[f"decrypted_bytes_{d}"] == 0
        # Protected records stay encrypted; the hellos are overhead.
        assert conn[f"encrypted_bytes_{d}"] > len(PAYLOAD)
        assert conn[f"tls_overhead_bytes_{d}"] + conn[f"encrypted_bytes_{d}"] == conn[f"stream_bytes_{d}"]


def test_wrong_key_counts_every_record_as_a_failed_tag_check(
    certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    keylog = tmp_path / "keys.log"
    pcap, port = echo_over_tls(tmp_path, certificate, PAYLOAD, keylog)
    wrong = "\n".join(
        f"{label} {random} {'55' * (len(secret) // 2)}"
        for label, random, secret in (
            line.split() for line in keylog.read_text().splitlines() if not line.startswith("#")
        )
    )
    conn = read_connection(pcap, port, KeyLog(wrong + "\n"))
    assert conn["tls_state"] == "bad_key"
    assert conn["decrypted_bytes_to_broker"] == conn["decrypted_bytes_to_client"] == 0
    # Every protected record of TLS 1.3 (outer type application_data: the encrypted handshake, the
    # tickets, the data, the closing alerts) fails, counted in dpkt's view of both directions.
    protected = [types.count(APPLICATION_DATA) for types in record_types(pcap, port)]
    assert min(protected) >= 2  # each side's Finished and its data at least
    assert conn["tls_failed_records"] == sum(protected)
    assert conn["requests"] == 0


APPLICATION_DATA = 23


def record_types(pcap: Path, port: int) -> list[list[int]]:
    """The content type of each TLS record (RFC 8446 5.1: type, version, 16-bit length, fragment)
    of each direction (to the server, to the client), from dpkt's view of the bytes."""
    stream = [b"", b""]
    for d, _, data in directions(pcap, port):
        stream[d] += data
    types: list[list[int]] = [[], []]
    for d, data in enumerate(stream):
        at = 0
        while at + 5 <= len(data):
            types[d].append(data[at])
            at += 5 + int.from_bytes(data[at + 3 : at + 5], "big")
        assert at == len(data), (d, at, len(data))
    return types


def test_right_key_recovers_exactly_the_payload(certificate: tuple[Path, Path], tmp_path: Path) -> None:
    keylog = tmp_path / "keys.log"
    pcap, port = echo_over_tls(tmp_path, certificate, PAYLOAD, keylog)
    conn = read_connection(pcap, port, load_keylog([keylog]))
    assert conn["tls_state"] == "decrypted"
    assert conn["decrypted_bytes_to_broker"] == conn["decrypted_bytes_to_client"] == len(PAYLOAD)
    # Not Kafka (the payload's first bytes are no request), so the plaintext is not-Kafka bytes.
    assert conn["not_kafka_bytes_to_broker"] == conn["not_kafka_bytes_to_client"] == len(PAYLOAD)


def rewrite_pcap(src: Path, dst: Path, keep: list[bool]) -> None:
    with src.open("rb") as f, dst.open("wb") as out:
        reader = dpkt.pcap.Reader(f)
        writer = dpkt.pcap.Writer(out, linktype=reader.datalink())
        for (ts, buf), wanted in zip(reader, keep, strict=True):
            if wanted:
                writer.writepkt(buf, ts)


def test_a_capture_that_starts_mid_connection_has_no_handshake(
    certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    keylog = tmp_path / "keys.log"
    pcap, port = echo_over_tls(tmp_path, certificate, PAYLOAD, keylog, piece=1024)
    segments = directions(pcap, port)
    # Drop everything up to the client's third data record: no SYN, no hellos.
    with pcap.open("rb") as f:
        n = sum(1 for _ in dpkt.pcap.Reader(f))
    first_data = [i for i, _ in enumerate(_payload_flags(pcap)) if _][:8][-1]
    cut = tmp_path / "mid.pcap"
    rewrite_pcap(pcap, cut, [i >= first_data for i in range(n)])
    conn = read_connection(cut, port, load_keylog([keylog]))
    assert conn["syn_seen"] is False
    assert conn["tls_state"] == "no_handshake"
    assert conn["decrypted_bytes_to_broker"] == conn["decrypted_bytes_to_client"] == 0
    assert conn.get("decode_errors", 0) == 0 and conn["requests"] == 0
    assert segments  # the original had data both ways


def _payload_flags(pcap: Path) -> list[bool]:
    with pcap.open("rb") as f:
        return [bool(dpkt.ethernet.Ethernet(buf).data.data.data) for _, buf in dpkt.pcap.Reader(f)]


def test_a_gap_in_the_middle_of_a_record_loses_that_record_only(
    certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    keylog = tmp_path / "keys.log"
    payload = bytes(range(256)) * 160  # 40 records of 1024 bytes
    pcap, port = echo_over_tls(tmp_path, certificate, payload, keylog, piece=1024)
    flags = _payload_flags(pcap)
    client_data = [
        i
        for i, (has, (_ts, buf)) in enumerate(zip(flags, _packets(pcap), strict=True))
        if has and dpkt.ethernet.Ethernet(buf).data.data.dport == port
    ]
    dropped = client_data[len(client_data) // 2]
    lost_bytes = len(dpkt.ethernet.Ethernet(_packets(pcap)[dropped][1]).data.data.data)
    cut = tmp_path / "gap.pcap"
    rewrite_pcap(pcap, cut, [i != dropped for i in range(len(flags))])
    conn = read_connection(cut, port, load_keylog([keylog]))
    assert conn["tls_state"] == "gap"
    assert conn["gap_bytes_to_broker"] == lost_bytes
    lost_plain = len(payload) - conn["decrypted_bytes_to_broker"]
    # Each write was one record (1024 bytes of plaintext, 22 of overhead): one segment, one record,
    # unless the kernel joined two writes into one segment.
    assert lost_bytes % (1024 + 22) == 0
    assert lost_plain == lost_bytes // (1024 + 22) * 1024
    assert conn["decrypted_bytes_to_client"] == len(payload)
    assert conn["tls_failed_records"] == 0


def _packets(pcap: Path) -> list[tuple[float, bytes]]:
    with pcap.open("rb") as f:
        return list(dpkt.pcap.Reader(f))


def test_key_log_lines_comments_labels_and_partial_lines() -> None:
    random = "ab" * 32
    keys = KeyLog()
    keys.add_text(f"# comment\nCLIENT_RANDOM {random} {'01' * 48}\nEXPORTER_SECRET {random} {'02' * 48}\n")
    keys.add_text(f"CLIENT_TRAFFIC_SECRET_0 {random} {'03' * 24}")  # no newline yet: a file being written
    assert keys.secrets(bytes.fromhex(random), ("CLIENT_TRAFFIC_SECRET_0",)) is None
    keys.add_text(f"{'03' * 24}\nCLIENT_RANDOM nothex {'01' * 48}\n")
    assert keys.secrets(bytes.fromhex(random), ("CLIENT_RANDOM", "CLIENT_TRAFFIC_SECRET_0")) == (
        bytes([1]) * 48,
        bytes([3]) * 48,
    )
    assert (keys.lines, keys.ignored_lines) == (2, 2)
    assert "01" not in repr(keys) and repr(keys) == "KeyLog(1 client randoms)"


def test_a_key_log_travels_to_spark_executors_without_its_file_follower(tmp_path: Path) -> None:
    path = tmp_path / "keys.log"
    path.write_text(f"CLIENT_RANDOM {'cd' * 32} {'09' * 48}\n")
    keys = KeyLog()
    keys.refresh = KeyLogFollower([path], keys)
    copy = pickle.loads(pickle.dumps(keys))
    assert copy.refresh is None
    assert copy.secrets(bytes.fromhex("cd" * 32), ("CLIENT_RANDOM",)) == (bytes([9]) * 48,)


def test_live_capture_decrypts_connections_whose_keys_are_appended_later(
    certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    keylog = tmp_path / "keys.log"
    keylog.write_text("")  # empty when the capture starts; the server appends as it handshakes
    port, metrics_port = free_ports(2)
    out = tmp_path / "tables"
    err_path = tmp_path / "capture.err"
    with err_path.open("wb") as err:
        capture = subprocess.Popen(
            [sys.executable, "-m", "kwsniff", "capture", "lo", "--out", str(out), "-p", str(port)]
            + ["--keylog", str(keylog), "--metrics-port", str(metrics_port)],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while b"capturing on lo" not in err_path.read_bytes() and time.monotonic() < deadline:
            assert capture.poll() is None, err_path.read_text()
            time.sleep(0.05)
        pcap, _ = echo_over_tls(tmp_path, certificate, PAYLOAD, keylog, port=port)
        # Stopped once it has decoded every packet tcpdump saw of the conversation.
        wait_for_captured_packets(metrics_port, pcap_packet_count(pcap), timeout_s=TIMEOUT_S)
    finally:
        capture.send_signal(signal.SIGINT)
        try:
            capture.wait(TIMEOUT_S)
        finally:
            stop_process(capture)  # type: ignore[arg-type]
    import pyarrow.dataset as ds

    assert capture.returncode == 0, err_path.read_text()
    conns = ds.dataset(out / "connections").to_table().to_pylist()
    (conn,) = [c for c in conns if c["broker_port"] == port]
    assert conn["tls_state"] == "decrypted"
    assert conn["decrypted_bytes_to_broker"] == conn["decrypted_bytes_to_client"] == len(PAYLOAD)


def test_keys_that_arrive_after_the_server_hello_decrypt_the_records_held_for_them(
    certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    """A live key log that gains the connection's secrets between the ServerHello and the server's
    first protected record: that record waits, is replayed once the keys come, and the client side,
    with nothing waiting, is left as it was."""
    keylog = tmp_path / "keys.log"
    pcap, port = echo_over_tls(tmp_path, certificate, PAYLOAD, keylog)
    keys = KeyLog()
    lookups = []

    def refresh() -> None:
        lookups.append(len(keys))
        if len(lookups) == 2:  # the first miss is the ServerHello's; the keys come on the second
            keys.add_text(keylog.read_bytes())

    keys.refresh = refresh
    plain, stream = decrypt_with_kwsniff(pcap, keys, port)
    assert lookups == [0, 0]
    assert plain == [PAYLOAD, PAYLOAD]
    assert stream.state == "decrypted"
    assert [d.decrypted for d in stream.dirs] == [len(PAYLOAD), len(PAYLOAD)]
    assert [d.undecryptable for d in stream.dirs] == [0, 0]


class DecryptOnly:
    """An AEAD as cryptography before 47 has it: decrypt, and no decrypt_into."""

    def __init__(self, aead: object) -> None:
        self.decrypt = aead.decrypt  # type: ignore[attr-defined]


def test_without_decrypt_into_records_decrypt_the_same_by_copying(
    certificate: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keylog = tmp_path / "keys.log"
    pcap, port = echo_over_tls(tmp_path, certificate, PAYLOAD, keylog, piece=1000)
    monkeypatch.setattr(stream_module, "Opener", None)  # the loop on cryptography, not the compiled one
    monkeypatch.setattr(stream_module, "decrypt_into", lambda aead: schedule.decrypt_into(DecryptOnly(aead)))
    plain, stream = decrypt_with_kwsniff(pcap, load_keylog([keylog]), port)
    assert plain == [PAYLOAD, PAYLOAD]
    assert stream.state == "decrypted"
    assert stream.dirs[0].records >= len(PAYLOAD) // 1000  # a record per write, and the handshake's
    protection = stream.dirs[0].protection
    assert protection is not None and protection.decrypt_into.__name__ == "copying"
    sealed = protection.aead.encrypt(bytes(12), b"twelve bytes", b"aad")  # type: ignore[attr-defined]
    out = bytearray(14)
    protection.decrypt_into(bytes(12), memoryview(sealed), memoryview(b"aad"), memoryview(out)[1:13])
    assert out == b"\0twelve bytes\0"
    with pytest.raises(ValueError):
        protection.decrypt_into(bytes(12), memoryview(sealed), memoryview(b"aad"), memoryview(out))


def test_records_cut_anywhere_decrypt_to_the_same_bytes_and_counters(
    certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    """The stream waits for the bytes the record at its front needs before reading anything: fed
    one byte at a time, or each segment whole, through ``feed`` or through its ``feeders`` (compiled:
    kwsniff/tls/_records.c), it gives the payload and the same counters."""
    keylog = tmp_path / "keys.log"
    pcap, port = echo_over_tls(tmp_path, certificate, PAYLOAD, keylog, piece=1000)
    keys = load_keylog([keylog])
    pieces = directions(pcap, port)
    counters = []
    for one_byte_at_a_time in (False, True):
        for through_feeders in (False, True):
            plain = [bytearray(), bytearray()]
            stream = TlsStream(
                keys, lambda d, ts, data, plain=plain: plain[d].extend(data), lambda d, ts: None
            )
            assert type(stream.feeders[0]).__name__ == "Feeder"
            feeders = (
                stream.feeders if through_feeders else (partial(stream.feed, 0), partial(stream.feed, 1))
            )
            for d, _ts, data in pieces:
                if one_byte_at_a_time:
                    for i in range(len(data)):
                        feeders[d](0, data[i : i + 1])
                else:
                    feeders[d](0, data)
            stream.finish()
            assert plain == [PAYLOAD, PAYLOAD]
            assert stream.state == "decrypted"
            counters.append(
                [(s.overhead, s.decrypted, s.undecryptable, s.records, s.failed) for s in stream.dirs]
            )
    assert counters[0] == counters[1] == counters[2] == counters[3]
    assert counters[0][0][1] == counters[0][1][1] == len(PAYLOAD)
    assert counters[0][0][2] == counters[0][1][2] == 0
