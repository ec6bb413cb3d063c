"""`kwsniff read --strict`: exit status 3 when anything was not decoded, the reasons on stderr; capture
edges (orphans, unanswered requests) and understood SASL tokens are not failures."""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

from click.testing import CliRunner
from kafkawire import (
    API_VERSIONS_V0_RESPONSE,
    METADATA_V0_REQUEST,
    METADATA_V0_RESPONSE,
    Flow,
    request,
    response,
    write_pcap,
)

from kwsniff.cli import main

CAPTURES = Path(__file__).parent / "data" / "captures"


def strict(tmp_path: Path, *pcaps: Path) -> tuple[int, str]:
    out = tempfile.mkdtemp(dir=tmp_path)  # a fresh dataset per call: an existing one is refused
    result = CliRunner().invoke(main, ["read", *map(str, pcaps), "--out", out, "--strict", "-q"])
    return result.exit_code, result.stderr


def test_a_fully_decoded_real_capture_passes_strict(tmp_path: Path) -> None:
    assert strict(tmp_path, CAPTURES / "acks_modes.pcap") == (0, "")


def test_orphans_unanswered_requests_and_sasl_tokens_are_not_strict_failures(tmp_path: Path) -> None:
    f = Flow()  # begins mid-connection: an orphan response first
    f.send(1, response(9, API_VERSIONS_V0_RESPONSE))
    f.send(0, request(17, 0, 10, struct.pack(">h", 5) + b"PLAIN"))
    f.send(1, response(10, struct.pack(">hih", 0, 1, 5) + b"PLAIN"))
    f.send(0, struct.pack(">i", 11) + b"\x00u\x00password")
    f.send(1, struct.pack(">i", 0))
    f.send(0, request(3, 0, 11, METADATA_V0_REQUEST))  # never answered: the capture ends
    pcap = write_pcap(tmp_path / "edges.pcap", f.packets)
    assert strict(tmp_path, pcap) == (0, "")


def test_undecodable_traffic_fails_strict_with_every_reason(tmp_path: Path) -> None:
    f = Flow().handshake()
    f.send(0, request(3, 0, 1, b"\x7f\xff\xff\xff"))  # Metadata v0 with 2^31-1 topics: decode error
    f.send(1, response(1, METADATA_V0_RESPONSE))
    f.send(0, b"\x00\x00\x00\x0a" + b"\xee" * 10)  # a frame whose header names no API
    f.send(0, request(18, 0, 2))
    f.send(1, response(2, API_VERSIONS_V0_RESPONSE))
    f.close()
    probe = Flow(client=(bytes([10, 0, 0, 3]), 40100))
    probe.ts = f.ts  # after the first connection: timestamps in order, no warning
    probe.handshake()
    probe.send(0, b"GET / HTTP/1.0\r\n\r\n")
    probe.close()
    pcap = write_pcap(tmp_path / "bad.pcap", f.packets + probe.packets)
    code, err = strict(tmp_path, pcap)
    assert code == 3
    assert err == (
        "kwsniff: strict: bad.pcap: 1 requests with status decode_error; 1 frames whose header could not be"
        " read; 1 connections to a broker port that did not speak Kafka\n"
    )


def test_without_strict_the_same_capture_exits_zero(tmp_path: Path) -> None:
    probe = Flow().handshake()
    probe.send(0, b"GET / HTTP/1.0\r\n\r\n")
    probe.close()
    pcap = write_pcap(tmp_path / "probe.pcap", probe.packets)
    result = CliRunner().invoke(main, ["read", str(pcap), "--out", str(tmp_path / "t"), "-q"])
    assert result.exit_code == 0
    assert strict(tmp_path, pcap) == (
        3,
        "kwsniff: strict: probe.pcap: 1 connections to a broker port that did not speak Kafka\n",
    )


HOSTILE = Path(__file__).parent / "data" / "hostile"


def test_record_batches_that_could_not_be_read_fail_strict(tmp_path: Path) -> None:
    # Frames decode, but inside them a batch was left compressed past the cap, or nested too deep.
    assert strict(tmp_path, HOSTILE / "decompression_bomb.pcap") == (
        3,
        "kwsniff: strict: decompression_bomb.pcap: 1 record batches not read (over --max-decompressed or the --memory-limit records share)\n",
    )
    assert strict(tmp_path, HOSTILE / "nested_message_sets.pcap") == (
        3,
        "kwsniff: strict: nested_message_sets.pcap: 1 damaged record batches or message sets\n",
    )
