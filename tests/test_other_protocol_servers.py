"""Real servers of other protocols on loopback, captured with tcpdump: never Kafka (issue 10, item 1).

HTTP (Python's http.server), SOCKS5 (a relay written here on Python sockets, in front of that HTTP
server), redis-server, memcached (text and binary protocols) and PostgreSQL (whose startup message
reads as a Kafka Metadata v0 header) from Debian, installed by tools/install-test-deps.sh. Each runs
on a free port nobody names as a broker port; every capture must give zero Kafka connections and
pass `--strict`.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import shutil
import socket
import socketserver
import struct
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import dpkt_connections
import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner
from realparts import LOOPBACK, free_port, stop_process, tcpdump_capture, wait_for_port

from kwsniff.cli import main

TIMEOUT_S = 10.0
# A daemon's start (PostgreSQL's above all) can take longer on a loaded machine than one exchange.
START_TIMEOUT_S = 60.0


def exchange(port: int, *messages: bytes, expect: int = 1) -> bytes:
    """Send each message on one connection and read what comes back (bounded in time)."""
    with socket.create_connection((LOOPBACK, port), timeout=TIMEOUT_S) as sock:
        got = b""
        for message in messages:
            sock.sendall(message)
            got += sock.recv(65536)
        return got


@contextlib.contextmanager
def serving(server: socketserver.BaseServer) -> Iterator[int]:
    """Run a socketserver on a thread; yields its port, shuts it down by the end."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]  # type: ignore[index]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(TIMEOUT_S)


class QuietHttp(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def http_server() -> contextlib.AbstractContextManager[int]:
    return serving(socketserver.TCPServer((LOOPBACK, 0), QuietHttp))


class Socks5Relay(socketserver.BaseRequestHandler):
    """RFC 1928 without authentication, CONNECT to an IPv4 address only, relaying one exchange."""

    def handle(self) -> None:
        sock = self.request
        sock.settimeout(TIMEOUT_S)
        sock.recv(3)  # version 5, 1 method, no authentication
        sock.sendall(b"\x05\x00")
        head = sock.recv(10)
        ip, port = socket.inet_ntoa(head[4:8]), struct.unpack(">H", head[8:10])[0]
        with socket.create_connection((ip, port), timeout=TIMEOUT_S) as upstream:
            sock.sendall(b"\x05\x00\x00\x01" + head[4:10])
            upstream.sendall(sock.recv(65536))
            while chunk := upstream.recv(65536):
                sock.sendall(chunk)


def socks5_server() -> contextlib.AbstractContextManager[int]:
    return serving(socketserver.ThreadingTCPServer((LOOPBACK, 0), Socks5Relay))


@contextlib.contextmanager
def daemon(command: list[str], port: int, user: str | None = None) -> Iterator[int]:
    prefix = ["runuser", "-u", user, "--"] if user and os.geteuid() == 0 else []
    proc = subprocess.Popen([*prefix, *command], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc, None, START_TIMEOUT_S)
        yield port
    finally:
        stop_process(proc)


def http_workload(port: int) -> None:
    for path in ("/", "/missing"):
        exchange(port, f"GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n".encode())


def socks_workload(port: int) -> None:
    with http_server() as web:
        target = socket.inet_aton(LOOPBACK) + struct.pack(">H", web)
        for _ in range(2):
            exchange(port, b"\x05\x01\x00", b"\x05\x01\x00\x01" + target, b"GET / HTTP/1.0\r\n\r\n")


def redis_workload(port: int) -> None:
    for _ in range(2):
        exchange(
            port,
            b"*1\r\n$4\r\nPING\r\n",
            b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n",
            b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n",
        )


def memcached_workload(port: int) -> None:
    exchange(port, b"set greeting 0 0 5\r\nhello\r\n", b"get greeting\r\n", b"version\r\n")
    # Binary protocol: magic 0x80, opcode GET (0), key length, extras, data type, vbucket, body...
    key = b"greeting"
    get = struct.pack(">BBHBBHIIQ", 0x80, 0, len(key), 0, 0, 0, len(key), 7, 0) + key
    exchange(port, get)


@pytest.fixture(scope="module")
def postgres_dir() -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="kwsniff-pg-"))
    data = base / "data"
    if os.geteuid() == 0:  # initdb refuses root: the cluster belongs to Debian's postgres user
        shutil.chown(base, "postgres", "postgres")
    initdb = [pg_bin("initdb"), "-D", str(data), "-A", "trust", "-U", "app", "--no-sync"]
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    subprocess.run([*prefix, *initdb], check=True, capture_output=True, timeout=120)
    try:
        yield data
    finally:
        shutil.rmtree(base, ignore_errors=True)


def pg_bin(name: str) -> str:
    versions = sorted(Path("/usr/lib/postgresql").iterdir())
    return str(versions[-1] / "bin" / name)


def psql_workload(port: int) -> None:
    for sql in ("SELECT 1", "SELECT version()"):
        subprocess.run(
            ["psql", "-h", LOOPBACK, "-p", str(port), "-U", "app", "-d", "postgres", "-c", sql],
            check=True,
            capture_output=True,
            timeout=TIMEOUT_S * 3,
            env={**os.environ, "PGSSLMODE": "disable", "PGCONNECT_TIMEOUT": "5"},
        )


def assert_never_kafka(tmp_path: Path, port: int, workload: Callable[[int], None]) -> None:
    pcap = tmp_path / "other.pcap"
    with tcpdump_capture(pcap, port):
        workload(port)
    out = tmp_path / "t"
    result = CliRunner().invoke(main, ["read", str(pcap), "-o", str(out), "--strict", "-q"])
    assert (result.exit_code, result.stderr) == (0, "")
    connections = sorted(ds.dataset(out / "connections").to_table().to_pylist(), key=lambda c: c["conn_id"])
    flows = dpkt_connections.flows(pcap, port)
    assert len(connections) == len(flows) >= 1
    assert [c["kafka"] for c in connections] == [False] * len(connections)
    answered = 0
    for c, flow in zip(connections, flows, strict=True):
        # Every byte either way is counted as not Kafka, and each connection the capture saw open
        # carried the server's answer. (A connection whose start is not in the capture is the tail of
        # the readiness probe: its closing packets, no payload.)
        if flow.syn:
            assert flow.payload["to_broker"] > 0 and flow.payload["to_client"] > 0, flow
            answered += 1
        else:
            assert flow.payload == {"to_broker": 0, "to_client": 0}, flow
        assert (c["not_kafka_bytes_to_broker"], c["not_kafka_bytes_to_client"]) == (
            flow.payload["to_broker"],
            flow.payload["to_client"],
        )
    assert answered >= 1
    assert ds.dataset(out / "requests").count_rows() == 0


def test_python_http_server_is_not_kafka(tmp_path: Path) -> None:
    with http_server() as port:
        assert_never_kafka(tmp_path, port, http_workload)


def test_socks5_relay_is_not_kafka(tmp_path: Path) -> None:
    with socks5_server() as port:
        assert_never_kafka(tmp_path, port, socks_workload)


def test_redis_server_is_not_kafka(tmp_path: Path) -> None:
    port = free_port()
    command = ["redis-server", "--port", str(port), "--bind", LOOPBACK, "--save", "", "--appendonly", "no"]
    with daemon(command, port):
        assert_never_kafka(tmp_path, port, redis_workload)


def test_memcached_is_not_kafka(tmp_path: Path) -> None:
    port = free_port()
    with daemon(["memcached", "-l", LOOPBACK, "-p", str(port), "-U", "0"], port, user="memcache"):
        assert_never_kafka(tmp_path, port, memcached_workload)


def test_postgres_is_not_kafka(tmp_path: Path, postgres_dir: Path) -> None:
    port = free_port()
    command = [
        pg_bin("postgres"),
        "-D",
        str(postgres_dir),
        "-p",
        str(port),
        "-c",
        "listen_addresses=127.0.0.1",
    ]
    command += ["-k", str(postgres_dir)]
    with daemon(command, port, user="postgres"):
        assert_never_kafka(tmp_path, port, psql_workload)
