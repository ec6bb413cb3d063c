"""TLS on a Kafka port: recognised from its handshake, SNI and version read, every byte counted as
encrypted (never garbage, skipped or gaps)."""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
import threading
from pathlib import Path

from kafkawire import LINKTYPE_RAW_IPV4, Flow
from realparts import LOOPBACK, free_port, tcpdump_capture

from kwsniff.kafka.tls import TlsHellos, guess_protocol, looks_like_tls
from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import Session, SessionOptions, accounting_difference
from kwsniff.rows import ListSink

SNI = "broker-1.kafka.test"
TIMEOUT_S = 10.0


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={SNI}"]
        + ["-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def tls_exchange(port: int, cert: Path, key: Path, payload: bytes) -> bytes:
    """One TLS 1.3 connection on loopback: the client sends ``payload``, the server echoes it."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
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

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.load_verify_locations(cert)
    client_ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    try:
        with (
            socket.create_connection((LOOPBACK, port), timeout=TIMEOUT_S) as raw,
            client_ctx.wrap_socket(raw, server_hostname=SNI) as tls,
        ):
            tls.sendall(payload)
            echoed = b""
            while len(echoed) < len(payload):
                echoed += tls.recv(65536)
    finally:
        server.join(TIMEOUT_S)
        listener.close()
    return echoed


def test_a_real_tls_connection_on_a_broker_port_is_counted_as_encrypted(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    port = free_port()
    pcap = tmp_path / "tls.pcap"
    payload = bytes(range(256)) * 40
    with tcpdump_capture(pcap, port):
        assert tls_exchange(port, cert, key, payload) == payload
    sink = ListSink()
    result = run_capture(pcap, sink, SessionOptions(broker_ports=frozenset({port})))
    (conn,) = sink.tables["connections"]
    assert (conn["tls"], conn["tls_sni"], conn["tls_version"], conn["protocol_guess"]) == (
        True,
        SNI,
        "TLSv1.3",
        "tls",
    )
    assert conn["kafka"] is True
    # No key log: the connection is marked, its records stay encrypted, the hellos are overhead.
    assert (conn["tls_state"], conn["tls_cipher"]) == ("no_key", "TLS_AES_256_GCM_SHA384")
    for d in ("to_broker", "to_client"):
        # Every payload byte the wire carried (handshake, records, alerts) and nothing else.
        assert conn[f"tls_overhead_bytes_{d}"] + conn[f"encrypted_bytes_{d}"] == conn[f"stream_bytes_{d}"]
        assert conn[f"stream_bytes_{d}"] == conn[f"bytes_{d}"]
        assert conn[f"decrypted_bytes_{d}"] == 0
        assert accounting_difference(conn, d) == 0
    assert conn["encrypted_bytes_to_broker"] > len(payload)
    assert (conn["gap_bytes"], conn["skipped_bytes"], conn["not_kafka_bytes"], conn["frames_to_broker"]) == (
        0,
        0,
        0,
        0,
    )
    assert "requests" not in sink.tables
    assert result.decode_errors == {}


def client_hello(sni: str) -> bytes:
    """The first record of a real ClientHello made by Python's ssl module, without any network."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname=sni)
    with contextlib.suppress(ssl.SSLWantReadError):
        obj.do_handshake()
    return outgoing.read()


def test_client_hello_split_byte_by_byte_still_gives_the_sni() -> None:
    hello = client_hello("kafka.example.org")
    assert looks_like_tls(hello)
    hellos = TlsHellos()
    for i in range(len(hello)):
        hellos.feed(0, hello[i : i + 1])
    assert (hellos.sni, "TLSv1.3" in hellos.client_versions, hellos.version) == (
        "kafka.example.org",
        True,
        None,
    )


def test_tls_on_a_port_nobody_named_is_not_kafka_but_still_tls() -> None:
    hello = client_hello("db.example.org")
    f = Flow(broker=(bytes([10, 0, 0, 2]), 5432)).handshake()
    f.send(0, hello)
    f.send(1, b"\x16\x03\x03\x00\x04" + b"\x0e\x00\x00\x00")  # not a ServerHello: version unknown
    f.close()
    sink = ListSink()
    session = Session("t.pcap", sink, SessionOptions())
    for ts, data in f.packets:
        session.packet(ts, LINKTYPE_RAW_IPV4, data)
    session.finish()
    (conn,) = sink.tables["connections"]
    assert (conn["kafka"], conn["tls"], conn["tls_sni"], conn["tls_version"]) == (
        False,
        True,
        "db.example.org",
        None,
    )
    # Both records are handshake records in the clear: TLS overhead, nothing left encrypted.
    assert (conn["tls_overhead_bytes_to_broker"], conn["tls_overhead_bytes_to_client"]) == (len(hello), 9)
    assert (conn["encrypted_bytes_to_broker"], conn["encrypted_bytes_to_client"]) == (0, 0)
    assert conn["tls_state"] == "no_key"


def test_guess_protocol_names_tls_http_and_ssh() -> None:
    assert guess_protocol(b"\x16\x03\x01\x02\x00", b"") == "tls"
    assert guess_protocol(b"GET /health HTTP/1.1\r\n", b"") == "http"
    assert guess_protocol(b"", b"HTTP/1.1 400 Bad Request\r\n") == "http"
    assert guess_protocol(b"SSH-2.0-OpenSSH_9.6\r\n", b"") == "ssh"
    assert guess_protocol(b"\xde\xad\xbe\xef", b"") == "unknown"
