"""SASL on Kafka connections: raw tokens after a v0 handshake, SaslAuthenticate, 0.9 GSSAPI openings,
and secrets that never reach a table (Kafka protocol guide, "SASL Authentication Sequence")."""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner
from kafkawire import (
    ACK,
    API_VERSIONS_V0_RESPONSE,
    FIN,
    LINKTYPE_RAW_IPV4,
    METADATA_V0_REQUEST,
    METADATA_V0_RESPONSE,
    Flow,
    request,
    response,
    string,
    write_pcap,
)
from realparts import (
    CapturedTraffic,
    free_port,
    start_broker,
    stop_process,
    tcpdump_capture,
    wait_for_listener,
)

from kwsniff.cli import main
from kwsniff.kafka.sasl import principal
from kwsniff.pipeline.session import Session, SessionOptions, accounting_difference
from kwsniff.rows import ListSink
from kwsniff.tables.names import SUMMARIES

PASSWORD = "s3cr3t-Pa55word"
PLAIN_TOKEN = b"\x00alice\x00" + PASSWORD.encode()


def run(packets: list[tuple[int, bytes]], **kw: Any) -> ListSink:
    sink = ListSink()
    session = Session("sasl.pcap", sink, SessionOptions(**kw), keep_messages=True)
    for ts, data in packets:
        session.packet(ts, LINKTYPE_RAW_IPV4, data)
    session.finish()
    return sink


def token(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def handshake_response(error: int, *mechanisms: str) -> bytes:
    return struct.pack(">hi", error, len(mechanisms)) + b"".join(string(m) for m in mechanisms)


def authenticate_response_v1(error: int, auth: bytes) -> bytes:
    return struct.pack(">hh", error, -1) + token(auth) + struct.pack(">q", 0)


def statuses(sink: ListSink) -> list[tuple[str, int, str]]:
    return [(r["api_name"], r["correlation_id"], r["status"]) for r in sink.tables["requests"]]


def sasl_columns(conn: dict[str, Any]) -> tuple[Any, ...]:
    return (conn["sasl_mechanism"], conn["sasl_outcome"], conn["sasl_tokens"], conn["sasl_authenticated"])


def v0_session(tokens: list[tuple[int, bytes]], mechanism: str = "PLAIN") -> Flow:
    f = Flow().handshake()
    f.send(0, request(18, 0, 1))
    f.send(1, response(1, API_VERSIONS_V0_RESPONSE))
    f.send(0, request(17, 0, 2, string(mechanism)))
    f.send(1, response(2, handshake_response(0, "PLAIN", "SCRAM-SHA-256")))
    for d, data in tokens:
        f.send(d, token(data))
    f.send(0, request(3, 0, 3, METADATA_V0_REQUEST))
    f.send(1, response(3, METADATA_V0_RESPONSE))
    f.close()
    return f


def test_raw_tokens_after_a_v0_handshake_are_counted_not_decoded_and_later_requests_decode() -> None:
    # PLAIN: one client token, and an empty token from the broker when it accepts.
    sink = run(v0_session([(0, PLAIN_TOKEN), (1, b"")]).packets)
    assert statuses(sink) == [("ApiVersions", 1, "ok"), ("SaslHandshake", 2, "ok"), ("Metadata", 3, "ok")]
    (conn,) = sink.tables["connections"]
    assert sasl_columns(conn) == ("PLAIN", "ok", 2, True)
    assert (conn["sasl_bytes_to_broker"], conn["sasl_bytes_to_client"]) == (4 + len(PLAIN_TOKEN), 4)
    assert (conn["frames_to_broker"], conn["frames_to_client"]) == (3, 3)
    assert (conn["decode_errors"], conn["undecodable_frames"], conn["skipped_bytes"]) == (0, 0, 0)
    assert accounting_difference(conn, "to_broker") == accounting_difference(conn, "to_client") == 0
    assert PASSWORD not in repr(sink.tables)


def test_scram_takes_two_round_trips_of_raw_tokens() -> None:
    tokens = [
        (0, b"n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL"),
        (1, b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096"),
        (0, b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="),
        (1, b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ="),
    ]
    sink = run(v0_session(tokens, "SCRAM-SHA-256").packets)
    (conn,) = sink.tables["connections"]
    assert sasl_columns(conn) == ("SCRAM-SHA-256", "ok", 4, True)
    assert conn["sasl_bytes_to_broker"] == sum(4 + len(t) for d, t in tokens if d == 0)
    assert statuses(sink)[-1] == ("Metadata", 3, "ok")
    assert "p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=" not in repr(sink.tables)


SCRAM_FIRST = b"n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL"
SCRAM_SERVER_FIRST = b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096"
SCRAM_FINAL = b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="


@pytest.mark.parametrize(
    ("server_final", "outcome", "authenticated"),
    [
        (b"e=invalid-proof", "failed: invalid-proof", False),
        (b"e=unknown-user,ext=1", "failed: unknown-user", False),  # extensions after a comma
        (b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=", "ok", True),
    ],
)
def test_a_raw_v0_scram_server_final_message_decides_the_outcome(
    server_final: bytes, outcome: str, authenticated: bool
) -> None:
    # After a SaslHandshake v0 there is no error code: a refusal is only the server-final "e=".
    tokens = [(0, SCRAM_FIRST), (1, SCRAM_SERVER_FIRST), (0, SCRAM_FINAL), (1, server_final)]
    f = Flow().handshake()
    f.send(0, request(17, 0, 2, string("SCRAM-SHA-256")))
    f.send(1, response(2, handshake_response(0, "SCRAM-SHA-256")))
    for d, data in tokens:
        f.send(d, token(data))
    if authenticated:
        f.send(0, request(3, 0, 3, METADATA_V0_REQUEST))
        f.send(1, response(3, METADATA_V0_RESPONSE))
    f.close()
    (conn,) = run(f.packets).tables["connections"]
    assert sasl_columns(conn) == ("SCRAM-SHA-256", outcome, 4, authenticated)


def authenticate_response(version: int, error: int, auth: bytes) -> bytes:
    """SaslAuthenticateResponse.json: v0 error/message/bytes, v1 adds session_lifetime_ms, v2 is
    flexible (compact string and bytes, tagged fields; the response header v1 has its own)."""
    if version == 2:
        # Header tags, error, "NONE" as tansu sends it, auth bytes, lifetime, body tags.
        return b"\x00" + struct.pack(">h", error) + b"\x05NONE" + bytes([len(auth) + 1]) + auth + bytes(9)
    body = struct.pack(">hh", error, -1) + token(auth)
    return body + struct.pack(">q", 0) if version == 1 else body


def authenticate_request(version: int, auth: bytes) -> bytes:
    return b"\x00" + bytes([len(auth) + 1]) + auth + b"\x00" if version == 2 else token(auth)


@pytest.mark.parametrize("version", [0, 1, 2])
@pytest.mark.parametrize(
    ("server_final", "outcome"),
    [(b"e=unknown-user", "failed: unknown-user"), (b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=", "ok")],
)
def test_a_sasl_authenticate_scram_server_final_with_error_code_0_decides_the_outcome(
    version: int, server_final: bytes, outcome: str
) -> None:
    f = Flow().handshake()
    f.send(0, request(17, 1, 1, string("SCRAM-SHA-256"), client_id="c"))
    f.send(1, response(1, handshake_response(0, "SCRAM-SHA-256")))
    for corr, (client, server) in enumerate(
        ((SCRAM_FIRST, SCRAM_SERVER_FIRST), (SCRAM_FINAL, server_final)), 2
    ):
        f.send(0, request(36, version, corr, authenticate_request(version, client), client_id="c"))
        f.send(1, response(corr, authenticate_response(version, 0, server)))
    f.close()  # no request after: only the server-final message tells
    sink = run(f.packets)
    (conn,) = sink.tables["connections"]
    assert sasl_columns(conn) == ("SCRAM-SHA-256", outcome, 0, False)
    assert conn["sasl_principal"] == "alice"
    assert statuses(sink) == [
        ("SaslHandshake", 1, "ok"),
        ("SaslAuthenticate", 2, "ok"),
        ("SaslAuthenticate", 3, "ok"),
    ]
    assert "p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=" not in repr(sink.tables)


def test_an_error_code_outranks_the_server_final_message() -> None:
    f = Flow().handshake()
    f.send(0, request(17, 1, 1, string("SCRAM-SHA-512")))
    f.send(1, response(1, handshake_response(0, "SCRAM-SHA-512")))
    f.send(0, request(36, 1, 2, token(SCRAM_FIRST)))
    f.send(1, response(2, authenticate_response(1, 58, b"e=other-error")))
    f.close()
    (conn,) = run(f.packets).tables["connections"]
    assert sasl_columns(conn) == ("SCRAM-SHA-512", "failed: SASL_AUTHENTICATION_FAILED", 0, False)


@pytest.mark.parametrize(
    ("closer", "tokens", "outcome"),
    [
        # The client gave up (or the capture ended): no verdict.
        (0, [(0, PLAIN_TOKEN)], "unfinished"),
        # A v0 broker refuses credentials by closing the connection: no error code exists there.
        (1, [(0, PLAIN_TOKEN)], "failed: closed by broker"),
        # ... also after the SCRAM client-final message, instead of a server-final "e=".
        (1, [(0, SCRAM_FIRST), (1, SCRAM_SERVER_FIRST), (0, SCRAM_FINAL)], "failed: closed by broker"),
        # The broker answered the last token, then closed: not a refusal (nor, without a request
        # after it, proof of success: raw tokens carry no verdict but SCRAM's server-final).
        (1, [(0, PLAIN_TOKEN), (1, b"")], "unfinished"),
    ],
)
def test_a_connection_that_ends_during_the_token_exchange(
    closer: int, tokens: list[tuple[int, bytes]], outcome: str
) -> None:
    mechanism = "PLAIN" if tokens[0][1] == PLAIN_TOKEN else "SCRAM-SHA-256"
    f = Flow().handshake()
    f.send(0, request(17, 0, 2, string(mechanism)))
    f.send(1, response(2, handshake_response(0, mechanism)))
    for d, data in tokens:
        f.send(d, token(data))
    f.emit(closer, FIN | ACK)
    f.emit(1 - closer, FIN | ACK)
    f.emit(closer, ACK)
    (conn,) = run(f.packets).tables["connections"]
    assert sasl_columns(conn) == (mechanism, outcome, len(tokens), False)


def test_sasl_authenticate_tokens_are_redacted_in_kept_messages() -> None:
    f = Flow().handshake()
    f.send(0, request(17, 1, 1, string("PLAIN")))
    f.send(1, response(1, handshake_response(0, "PLAIN")))
    f.send(0, request(36, 1, 2, token(PLAIN_TOKEN)))
    f.send(1, response(2, authenticate_response_v1(0, b"")))
    f.send(0, request(3, 0, 3, METADATA_V0_REQUEST))
    f.send(1, response(3, METADATA_V0_RESPONSE))
    f.close()
    sink = run(f.packets)
    assert statuses(sink) == [
        ("SaslHandshake", 1, "ok"),
        ("SaslAuthenticate", 2, "ok"),
        ("Metadata", 3, "ok"),
    ]
    auth = sink.tables["requests"][1]
    assert auth["request"] == {"auth_bytes": {"redacted": len(PLAIN_TOKEN)}}
    assert auth["response"]["auth_bytes"] == {"redacted": 0}
    (conn,) = sink.tables["connections"]
    assert sasl_columns(conn) == ("PLAIN", "ok", 0, True)
    assert PASSWORD not in repr(sink.tables)


def _flexible_authenticate(tmp_path: Path) -> Path:
    """SaslAuthenticate v2 (flexible, KIP-482) whose request and response each carry an unknown
    tagged field holding the password, as a client newer than the schema might send."""
    secret = PASSWORD.encode()

    def tag(number: int, data: bytes) -> bytes:
        return bytes([1, number, len(data)]) + data

    f = Flow().handshake()
    f.send(0, request(17, 1, 1, string("PLAIN")))
    f.send(1, response(1, handshake_response(0, "PLAIN")))
    header = struct.pack(">hhih", 36, 2, 2, 1) + b"c" + b"\x00"  # request header v2
    body = bytes([len(PLAIN_TOKEN) + 1]) + PLAIN_TOKEN + tag(7, secret)
    f.send(0, struct.pack(">i", len(header + body)) + header + body)
    # response header v1; error 0, null message, empty auth bytes, lifetime 3600000, unknown tag 9
    answer = struct.pack(">i", 2) + b"\x00" + struct.pack(">hBB", 0, 0, 1) + struct.pack(">q", 3_600_000)
    answer += tag(9, b"pw=" + secret)
    f.send(1, struct.pack(">i", len(answer)) + answer)
    f.send(0, request(3, 0, 3, METADATA_V0_REQUEST))
    f.send(1, response(3, METADATA_V0_RESPONSE))
    f.close()
    return write_pcap(tmp_path / "sasl_tagged.pcap", f.packets)


def test_unknown_tagged_fields_of_sasl_authenticate_are_redacted_everywhere(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from kwsniff.cli import main

    capture = _flexible_authenticate(tmp_path)
    runner = CliRunner()
    text = runner.invoke(main, ["show", str(capture)])
    as_json = runner.invoke(main, ["show", "--json", str(capture)])
    read = runner.invoke(main, ["read", str(capture), "--out", str(tmp_path / "t"), "--summaries", "always"])
    assert (text.exit_code, as_json.exit_code, read.exit_code) == (0, 0, 0)
    auth = json.loads(as_json.output.splitlines()[1])
    assert (auth["api_name"], auth["status"]) == ("SaslAuthenticate", "ok")
    assert auth["request"] == {
        "auth_bytes": {"redacted": len(PLAIN_TOKEN)},
        "_unknown_tags": {"redacted": 15},
    }
    assert auth["response"] == {
        "error_code": 0,
        "error_message": None,
        "auth_bytes": {"redacted": 0},
        "session_lifetime_ms": 3_600_000,
        "_unknown_tags": {"redacted": 18},
    }
    for output in (text.output, as_json.output, read.output):
        assert PASSWORD not in output and PASSWORD.encode().hex() not in output
    files = list((tmp_path / "t").rglob("*.parquet"))
    # One file per default table (`captures` included) and per summary of the report.
    assert len(files) == 6 + len(SUMMARIES)
    for file in files:
        assert PASSWORD.encode() not in file.read_bytes()
        assert PASSWORD not in repr(ds.dataset(file).to_table().to_pylist())


def test_a_rejected_sasl_authenticate_is_a_failed_outcome() -> None:
    f = Flow().handshake()
    f.send(0, request(17, 1, 1, string("PLAIN")))
    f.send(1, response(1, handshake_response(0, "PLAIN")))
    f.send(0, request(36, 1, 2, token(PLAIN_TOKEN)))
    f.send(1, response(2, authenticate_response_v1(58, b"")))
    f.close()
    sink = run(f.packets)
    (conn,) = sink.tables["connections"]
    assert sasl_columns(conn) == ("PLAIN", "failed: SASL_AUTHENTICATION_FAILED", 0, False)
    assert sink.tables["requests"][1]["error_name"] == "SASL_AUTHENTICATION_FAILED"


def test_a_first_packet_that_is_a_gssapi_token_is_sasl_not_garbage() -> None:
    # Kafka 0.9 clients opened with a GSSAPI token (tag 0x60) before any Kafka request.
    f = Flow().handshake()
    f.send(0, token(b"\x60\x82\x02\x10\x06\x09\x2a\x86\x48\x86\xf7\x12\x01\x02\x02" + bytes(40)))
    f.send(1, token(b"\x60\x81\x90\x06\x09" + bytes(20)))
    f.send(0, request(3, 0, 7, METADATA_V0_REQUEST))
    f.send(1, response(7, METADATA_V0_RESPONSE))
    f.close()
    sink = run(f.packets)
    assert statuses(sink) == [("Metadata", 7, "ok")]
    (conn,) = sink.tables["connections"]
    assert (conn["kafka"], conn["not_kafka_bytes"], conn["skipped_bytes"]) == (True, 0, 0)
    assert sasl_columns(conn) == ("GSSAPI", "ok", 2, True)
    assert (conn["sasl_bytes_to_broker"], conn["sasl_bytes_to_client"]) == (4 + 55, 4 + 25)


# --- real clients against the real broker ------------------------------------------------------


def log_in_with_confluent(mechanism: str, user: str, bootstrap: str) -> None:
    """An AdminClient that logs in as ``user`` with ``mechanism``; tansu refuses it (PLAIN: an
    unsupported mechanism; SCRAM: an unknown user), so it never gets metadata."""
    log_in_with_confluent_password(mechanism, user, PASSWORD, bootstrap)


def log_in_with_confluent_password(mechanism: str, user: str, password: str, bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": password,
            "reconnect.backoff.ms": 500,
            "reconnect.backoff.max.ms": 500,
            "log_level": 0,
        }
    )
    with contextlib.suppress(Exception):
        admin.list_topics(timeout=1.5)


def log_in_with_kafka_python(mechanism: str, user: str, bootstrap: str) -> None:
    from kafka import KafkaAdminClient

    with contextlib.suppress(Exception):
        KafkaAdminClient(
            bootstrap_servers=bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism=mechanism,
            sasl_plain_username=user,
            sasl_plain_password=PASSWORD,
            bootstrap_timeout_ms=1500,
            reconnect_backoff_ms=500,
        ).close()


sasl_with_confluent = functools.partial(log_in_with_confluent, "PLAIN", "alice")
sasl_with_kafka_python = functools.partial(log_in_with_kafka_python, "PLAIN", "alice")


def read_tables(traffic: CapturedTraffic, out: Path) -> tuple[dict[str, list[dict[str, Any]]], str]:
    args = ["read", str(traffic.pcap), "--out", str(out), "--broker-port", str(traffic.port)]
    done = subprocess.run(
        [sys.executable, "-m", "kwsniff", *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    tables = {
        name: ds.dataset(out / name).to_table().to_pylist() for name in ("requests", "connections", "errors")
    }
    show = subprocess.run(
        [sys.executable, "-m", "kwsniff", "show", "--json", str(traffic.pcap), "-p", str(traffic.port)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert show.returncode == 0, show.stderr
    return tables, show.stdout


def check_refused_plain(
    capture_traffic: Callable[..., CapturedTraffic], workload: Callable[[str], None], tmp_path: Path
) -> None:
    traffic = capture_traffic(workload)
    tables, shown = read_tables(traffic, tmp_path / "tables")
    # tansu 0.6 answers SaslHandshake v1 with UNSUPPORTED_SASL_MECHANISM (while listing PLAIN), so the
    # client never sends its credentials and gives up on each connection after the handshake.
    sasl_conns = [c for c in tables["connections"] if c["sasl_mechanism"] is not None]
    assert sasl_conns
    assert {sasl_columns(c) for c in sasl_conns} == {
        ("PLAIN", "failed: UNSUPPORTED_SASL_MECHANISM", 0, False)
    }
    handshakes = [r for r in tables["requests"] if r["api_name"] == "SaslHandshake"]
    assert {(r["api_version"], r["status"], r["error_name"]) for r in handshakes} == {
        (1, "ok", "UNSUPPORTED_SASL_MECHANISM")
    }
    assert len(handshakes) == len(sasl_conns)
    assert sum(c["decode_errors"] + c["undecodable_frames"] + c["skipped_bytes"] for c in sasl_conns) == 0
    assert {(e["api_name"], e["error_name"]) for e in tables["errors"]} == {
        ("SaslHandshake", "UNSUPPORTED_SASL_MECHANISM")
    }
    # No check that PASSWORD stays out of the tables here: the broker refuses before the client sends
    # it, so such a check could not fail. Redaction of credentials that do cross the wire is
    # test_sasl_authenticate_tokens_are_redacted_in_kept_messages, with hand-built tokens.
    shown_handshakes = [json.loads(line) for line in shown.splitlines() if '"SaslHandshake"' in line]
    assert len(shown_handshakes) == len(handshakes)


def test_confluent_kafka_sasl_plain_against_the_real_broker(
    capture_traffic: Callable[..., CapturedTraffic], tmp_path: Path
) -> None:
    check_refused_plain(capture_traffic, sasl_with_confluent, tmp_path)


def test_kafka_python_sasl_plain_against_the_real_broker(
    capture_traffic: Callable[..., CapturedTraffic], tmp_path: Path
) -> None:
    check_refused_plain(capture_traffic, sasl_with_kafka_python, tmp_path)


# --- the principal a client claims ---------------------------------------------------------------
SCRAM_USER = "ops,team=1"  # RFC 5802 escapes "," and "=" in the user name as =2C and =3D


scram_with_confluent = functools.partial(log_in_with_confluent, "SCRAM-SHA-256", SCRAM_USER)
scram_with_kafka_python = functools.partial(log_in_with_kafka_python, "SCRAM-SHA-256", SCRAM_USER)


@pytest.fixture(scope="module")
def scram_broker() -> Iterator[Any]:
    """tansu requiring SASL (it speaks SCRAM only, and knows no user until one is created)."""
    with start_broker(extra=["--authentication"]) as running:
        yield running


@pytest.mark.parametrize(
    ("workload", "outcome"),
    [
        # librdkafka escapes the name (=2C, =3D); tansu then answers the client-final message with
        # error code 0 and the refusal inside the SCRAM server-final message: "e=unknown-user".
        (scram_with_confluent, "failed: unknown-user"),
        # kafka-python sends the name unescaped; tansu rejects the client-first message outright.
        (scram_with_kafka_python, "failed: SASL_AUTHENTICATION_FAILED"),
    ],
)
def test_real_clients_scram_user_is_the_connections_principal(
    scram_broker: Any, workload: Callable[[str], None], outcome: str, tmp_path: Path
) -> None:
    pcap = tmp_path / "scram.pcap"
    with tcpdump_capture(pcap, scram_broker.port) as stats:
        workload(scram_broker.bootstrap)
    traffic = CapturedTraffic(pcap=pcap, port=scram_broker.port, result=None, tcpdump=stats)
    tables, shown = read_tables(traffic, tmp_path / "tables")
    sasl_conns = [c for c in tables["connections"] if c["sasl_mechanism"] is not None]
    assert sasl_conns
    # The broker turns the unknown user away; what the principal says is who the client claimed to
    # be, whatever the broker made of it.
    assert {
        (c["sasl_mechanism"], c["sasl_principal"], c["sasl_outcome"], c["sasl_authenticated"])
        for c in sasl_conns
    } == {("SCRAM-SHA-256", SCRAM_USER, outcome, False)}
    auths = [r for r in tables["requests"] if r["api_name"] == "SaslAuthenticate"]
    # Both clients reconnect (their count depends on timing); each connection sends one
    # SaslAuthenticate per round it reached: two for librdkafka, one for kafka-python.
    assert len(auths) == len(sasl_conns) * (2 if outcome == "failed: unknown-user" else 1)
    assert PASSWORD not in shown


# --- PLAIN with a real client: tansu refuses PLAIN, so a kio-encoded proxy answers the SASL keys ---
PLAIN_USER, PLAIN_PASSWORD = "ops-team", "pl41n-Pa55-Zq7"


@contextlib.contextmanager
def plain_proxy_process(broker: str, *flags: str) -> Iterator[int]:
    """tests/sasl_plain_proxy.py in front of the session's tansu; yields the port it listens on."""
    port = free_port()
    script = Path(__file__).resolve().parent / "sasl_plain_proxy.py"
    command = [sys.executable, str(script), str(port), broker.rsplit(":", 1)[1], PLAIN_USER, PLAIN_PASSWORD]
    proxy = subprocess.Popen([*command, *flags], stdout=subprocess.DEVNULL)
    try:
        wait_for_listener(port)
        yield port
    finally:
        stop_process(proxy)


@pytest.fixture(scope="module")
def plain_proxy(broker: str) -> Iterator[int]:
    with plain_proxy_process(broker) as port:
        yield port


@pytest.fixture(scope="module")
def echoing_proxy(broker: str) -> Iterator[int]:
    """The PLAIN proxy that repeats the refused password in its error_message."""
    with plain_proxy_process(broker, "echo") as port:
        yield port


def test_confluent_kafka_sasl_plain_principal_and_no_password_in_any_table(
    plain_proxy: int, tmp_path: Path
) -> None:
    from confluent_kafka.admin import AdminClient

    pcap = tmp_path / "plain.pcap"
    with tcpdump_capture(pcap, plain_proxy) as stats:
        admin = AdminClient(
            {
                "bootstrap.servers": f"127.0.0.1:{plain_proxy}",
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": PLAIN_USER,
                "sasl.password": PLAIN_PASSWORD,
                "log_level": 0,
            }
        )
        # Metadata comes back through the proxy only once PLAIN was accepted. (tansu advertises its own
        # port, so librdkafka's later connections go there, outside this capture.)
        assert admin.list_topics(timeout=10).brokers
    out = tmp_path / "tables"
    tables, shown = read_tables(CapturedTraffic(pcap=pcap, port=plain_proxy, result=None, tcpdump=stats), out)
    # librdkafka may reconnect to the bootstrap address (how often depends on timing): every
    # connection authenticates the same way, then asks for Metadata.
    sasl_conns = [c for c in tables["connections"] if c["sasl_mechanism"] is not None]
    assert len(sasl_conns) == len(tables["connections"]) >= 1
    assert {
        (c["sasl_mechanism"], c["sasl_principal"], c["sasl_outcome"], c["sasl_authenticated"])
        for c in sasl_conns
    } == {("PLAIN", PLAIN_USER, "ok", True)}
    for conn in sasl_conns:
        names = [r["api_name"] for r in tables["requests"] if r["conn_id"] == conn["conn_id"]]
        assert names[:4] == ["ApiVersions", "SaslHandshake", "SaslAuthenticate", "Metadata"]
    auths = [r for r in tables["requests"] if r["api_name"] == "SaslAuthenticate"]
    assert {(r["api_version"], r["status"], r["error_name"]) for r in auths} == {
        (1, "ok", "NONE")
    }  # librdkafka 2.16 speaks v1
    # The password crossed the wire in the capture, and nowhere else.
    secret = PLAIN_PASSWORD.encode()
    assert secret in pcap.read_bytes()
    files = list(out.rglob("*.parquet"))
    assert len(files) >= 6
    for file in files:
        assert secret not in file.read_bytes()
    assert PLAIN_PASSWORD not in shown


def jwt(claims: dict[str, Any]) -> bytes:
    def part(value: dict[str, Any]) -> bytes:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=")

    return part({"alg": "none"}) + b"." + part(claims) + b".c2ln"


@pytest.mark.parametrize(
    ("mechanism", "first_token", "expected"),
    [
        ("PLAIN", b"\x00alice\x00" + PASSWORD.encode(), "alice"),
        ("PLAIN", b"admin\x00alice\x00" + PASSWORD.encode(), "alice"),  # authzid apart
        ("PLAIN", b"alice" + PASSWORD.encode(), None),  # not the three NUL-separated fields
        ("SCRAM-SHA-256", b"n,,n=ops=2Cteam=3D1,r=fyko+d2lbbFgONRv9qkxdawL", "ops,team=1"),
        ("SCRAM-SHA-512", b"n,a=admin,n=bob,r=abc", "bob"),
        ("SCRAM-SHA-512", b"c=biws,r=abc,p=proof", None),
        (
            "OAUTHBEARER",
            b"n,,\x01auth=Bearer " + jwt({"sub": "svc-orders", "exp": 1}) + b"\x01\x01",
            "svc-orders",
        ),
        ("OAUTHBEARER", b"n,,\x01auth=Bearer opaque-token\x01\x01", None),  # not a JWT
        ("OAUTHBEARER", b"n,,\x01auth=Bearer a.bm90IGpzb24.c\x01\x01", None),  # payload not JSON
        ("GSSAPI", b"\x60\x82\x01\x00kerberos", None),  # the principal is inside an encrypted ticket
    ],
)
def test_the_first_client_token_names_the_principal_and_never_the_secret(
    mechanism: str, first_token: bytes, expected: str | None
) -> None:
    assert principal(mechanism, first_token) == expected


def test_principal_from_raw_v0_tokens_and_from_sasl_authenticate_v1_and_v2() -> None:
    raw = run(v0_session([(0, PLAIN_TOKEN), (1, b"")]).packets)
    assert [c["sasl_principal"] for c in raw.tables["connections"]] == ["alice"]
    for version, body in (
        (1, token(b"n,,n=carol,r=nonce1")),
        # Flexible v2: the header's empty tagged fields, then COMPACT_BYTES (length + 1) and the body's.
        (2, b"\x00" + bytes([len(b"n,,n=carol,r=nonce1") + 1]) + b"n,,n=carol,r=nonce1" + b"\x00"),
    ):
        f = Flow().handshake()
        f.send(0, request(17, 1, 1, string("SCRAM-SHA-256"), client_id="c"))
        f.send(1, response(1, handshake_response(0, "SCRAM-SHA-256")))
        f.send(0, request(36, version, 2, body, client_id="c"))
        f.close()
        assert [c["sasl_principal"] for c in run(f.packets).tables["connections"]] == ["carol"], version


def test_inventory_names_each_client_with_its_sasl_principal(tmp_path: Path) -> None:
    """A PLAIN client (v0 raw tokens) that then lists the groups: an admin in the inventory, under
    the principal it authenticated as."""
    f = Flow().handshake()
    f.send(0, request(17, 0, 1, string("PLAIN"), client_id="ops-tool"))
    f.send(1, response(1, handshake_response(0, "PLAIN")))
    f.send(0, token(PLAIN_TOKEN))
    f.send(1, token(b""))
    f.send(0, request(16, 0, 2, client_id="ops-tool"))  # ListGroups v0
    f.send(1, response(2, struct.pack(">hi", 0, 0)))
    f.close()
    pcap = write_pcap(tmp_path / "plain.pcap", f.packets)
    out = tmp_path / "tables"
    done = CliRunner().invoke(main, ["read", "-q", str(pcap), "--out", str(out)])
    assert done.exit_code == 0, done.output
    report = CliRunner().invoke(main, ["report", str(out), "--section", "inventory", "--format", "json"])
    assert report.exit_code == 0, report.output
    rows = json.loads(report.output)["inventory"]
    assert [(r["client_id"], r["role"], r["sasl_mechanism"], r["sasl_principal"]) for r in rows] == [
        ("ops-tool", "admin", "PLAIN", "alice")
    ]
    assert PASSWORD not in report.output


# --- issue 45, goal 5: a secret the broker echoes is redacted too ---------------------------------
ECHO = f"Authentication failed: invalid credentials for alice ({PASSWORD})"


def authenticate_response_with_message(error: int, message: str) -> bytes:
    """SaslAuthenticate v1 response: error code, error_message, empty auth bytes, session lifetime."""
    return struct.pack(">h", error) + string(message) + token(b"") + struct.pack(">q", 0)


def metadata_v0_response_naming(topic: str) -> bytes:
    """Metadata v0 response: one broker (10.0.0.2:9092, node 1) and ``topic`` with error 3
    (UNKNOWN_TOPIC_OR_PARTITION) and no partitions."""
    broker = struct.pack(">i", 1) + string("10.0.0.2") + struct.pack(">i", 9092)
    return (
        struct.pack(">i", 1) + broker + struct.pack(">i", 1) + struct.pack(">h", 3) + string(topic) + bytes(4)
    )


def echoing_broker(tmp_path: Path) -> Path:
    """A broker (or a proxy in front of it) that echoes the PLAIN password back: in the refusal's
    error_message, in a SaslHandshake's mechanism list and as a topic name of a Metadata answer
    after the client authenticated on its second try."""
    f = Flow().handshake()
    f.send(0, request(17, 1, 1, string("PLAIN")))
    f.send(1, response(1, handshake_response(0, "PLAIN")))
    f.send(0, request(36, 1, 2, token(PLAIN_TOKEN)))
    f.send(1, response(2, authenticate_response_with_message(58, ECHO)))
    f.send(0, request(17, 1, 3, string("PLAIN")))
    f.send(1, response(3, handshake_response(0, "PLAIN", f"PLAIN-{PASSWORD}")))
    f.send(0, request(36, 1, 4, token(PLAIN_TOKEN)))
    f.send(1, response(4, authenticate_response_with_message(0, f"welcome back, {PASSWORD}")))
    f.send(0, request(3, 0, 5, METADATA_V0_REQUEST))
    f.send(1, response(5, metadata_v0_response_naming(PASSWORD)))
    f.close()
    return write_pcap(tmp_path / "echo.pcap", f.packets)


def forms_of(secret: str) -> list[str]:
    raw = secret.encode()
    return [secret, raw.hex(), base64.b64encode(raw).decode()]


def test_a_password_the_broker_echoes_reaches_no_table_no_show_and_no_metric(tmp_path: Path) -> None:
    """Only the request's token was redacted: a broker echoing it in SaslAuthenticate's error_message
    put the password in the `errors` table and in `show`."""
    from prometheus_client import generate_latest

    from kwsniff.capture.live import CaptureCounters
    from kwsniff.pipeline.run import run_capture
    from kwsniff.view.metrics import Metrics
    from kwsniff.view.stats import LiveStats, StatsSink

    capture = echoing_broker(tmp_path)
    assert PASSWORD.encode() in capture.read_bytes()
    runner = CliRunner()
    out = tmp_path / "t"
    read = runner.invoke(main, ["read", str(capture), "--out", str(out), "--summaries", "always"])
    text = runner.invoke(main, ["show", str(capture)])
    as_json = runner.invoke(main, ["show", "--json", str(capture)])
    assert (read.exit_code, text.exit_code, as_json.exit_code) == (0, 0, 0), read.output

    tables = {t: ds.dataset(out / t).to_table().to_pylist() for t in ("requests", "errors", "connections")}
    assert [(r["api_name"], r["first_error_name"]) for r in tables["requests"]] == [
        ("SaslHandshake", None),
        ("SaslAuthenticate", "SASL_AUTHENTICATION_FAILED"),
        ("SaslHandshake", None),
        ("SaslAuthenticate", None),
        ("Metadata", "UNKNOWN_TOPIC_OR_PARTITION"),
    ]
    errors = {e["api_name"]: e for e in tables["errors"]}
    assert errors["SaslAuthenticate"]["error_message"] == "[redacted]"
    assert errors["Metadata"]["topic"] == "[redacted]"
    (conn,) = tables["connections"]
    assert (conn["sasl_principal"], conn["sasl_outcome"]) == ("alice", "failed: SASL_AUTHENTICATION_FAILED")

    shown = [json.loads(line) for line in as_json.output.splitlines()]
    assert shown[1]["response"]["error_message"] == "[redacted]"
    assert shown[2]["response"]["mechanisms"] == ["PLAIN", "[redacted]"]
    assert shown[3]["response"]["error_message"] == "[redacted]"
    assert [t["name"] for t in shown[4]["response"]["topics"]] == ["[redacted]"]

    stats = LiveStats(collect_pending=True)
    run_capture(capture, StatsSink(ListSink(), stats), SessionOptions())
    metrics = Metrics()
    metrics.update(CaptureCounters(), stats.take_pending(), 0)
    scrape = generate_latest(metrics.registry).decode()
    assert 'kwsniff_errors_total{error="SASL_AUTHENTICATION_FAILED"} 1.0' in scrape

    files = list(out.rglob("*.parquet"))
    assert len(files) == 6 + len(SUMMARIES)
    for form in forms_of(PASSWORD):
        for output in (text.output, as_json.output, read.output, scrape):
            assert form not in output
        for file in files:
            assert form.encode() not in file.read_bytes()


def test_a_scram_proof_echoed_in_the_server_error_is_not_the_outcome() -> None:
    """A SCRAM server-error (`e=...`, RFC 5802 section 7) is kept in `sasl_outcome`: one that echoes
    the client's proof keeps the refusal and loses the proof."""
    proof = SCRAM_FINAL.rpartition(b",p=")[2]
    tokens = [(0, SCRAM_FIRST), (1, SCRAM_SERVER_FIRST), (0, SCRAM_FINAL), (1, b"e=bad-proof-" + proof)]
    f = Flow().handshake()
    f.send(0, request(17, 0, 2, string("SCRAM-SHA-256")))
    f.send(1, response(2, handshake_response(0, "SCRAM-SHA-256")))
    for d, data in tokens:
        f.send(d, token(data))
    f.close()
    sink = run(f.packets)
    (conn,) = sink.tables["connections"]
    assert sasl_columns(conn) == ("SCRAM-SHA-256", "failed: [redacted]", 4, False)
    assert proof.decode() not in repr(sink.tables)


@pytest.mark.parametrize(
    ("mechanism", "client_token", "secret"),
    [
        ("PLAIN", PLAIN_TOKEN, PASSWORD),
        (None, PLAIN_TOKEN, PASSWORD),  # the handshake was before the capture began
        ("SCRAM-SHA-256", SCRAM_FINAL, "v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="),
        ("OAUTHBEARER", b"n,,\x01auth=Bearer eyJhbGciOiJub25lIn0.e30.c2ln\x01\x01", "eyJhbGciOiJub25lIn0.e30.c2ln"),
    ],
)  # fmt: skip
def test_every_form_of_a_client_secret_is_hidden_and_nothing_else(
    mechanism: str | None, client_token: bytes, secret: str
) -> None:
    from kwsniff.kafka.sasl import Secrets

    secrets = Secrets()
    secrets.learn(mechanism, client_token)
    message = {
        "error_message": f"no: {secret}",
        "topics": [{"name": "orders"}, {"name": secret.encode().hex()}],
        ("key", base64.b64encode(secret.encode()).decode()): 1,
        "count": 7,
    }
    assert secrets.clean(message) == {
        "error_message": "[redacted]",
        "topics": [{"name": "orders"}, {"name": "[redacted]"}],
        ("key", "[redacted]"): 1,
        "count": 7,
    }


def test_a_real_client_refused_by_a_proxy_that_echoes_its_password_leaves_it_nowhere(
    echoing_proxy: int, tmp_path: Path
) -> None:
    """librdkafka logs in with a wrong password; the proxy refuses it and repeats that password in
    SaslAuthenticate's error_message. The refusal is in the tables, the password is not."""
    wrong = "wr0ng-Pa55-Xk4"
    pcap = tmp_path / "echo.pcap"
    with tcpdump_capture(pcap, echoing_proxy) as stats:
        log_in_with_confluent_password("PLAIN", PLAIN_USER, wrong, f"127.0.0.1:{echoing_proxy}")
    assert f"with password {wrong}".encode() in pcap.read_bytes()  # the echo crossed the wire
    out = tmp_path / "tables"
    traffic = CapturedTraffic(pcap=pcap, port=echoing_proxy, result=None, tcpdump=stats)
    tables, shown = read_tables(traffic, out)
    refusals = [e for e in tables["errors"] if e["api_name"] == "SaslAuthenticate"]
    assert refusals  # librdkafka may try again (how often depends on timing): each is refused
    assert {(e["error_name"], e["error_message"]) for e in refusals} == {
        ("SASL_AUTHENTICATION_FAILED", "[redacted]")
    }
    sasl_conns = [c for c in tables["connections"] if c["sasl_mechanism"] is not None]
    assert {(c["sasl_principal"], c["sasl_outcome"]) for c in sasl_conns} == {
        (PLAIN_USER, "failed: SASL_AUTHENTICATION_FAILED")
    }
    files = list(out.rglob("*.parquet"))
    assert len(files) >= 6
    for form in forms_of(wrong):
        assert form not in shown
        for file in files:
            assert form.encode() not in file.read_bytes()
