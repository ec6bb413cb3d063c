"""Inputs the atheris fuzz targets (fuzz/) found, each kept as a regression test, and the seed corpora
replayed through their targets so a change that breaks a target shows up here first.

Findings are stored under tests/data/hostile/fuzz_*.bin exactly as the fuzzer wrote them.
"""

from __future__ import annotations

import io
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from kwsniff.capture import CaptureError, open_capture_file

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
HOSTILE = TESTS / "data" / "hostile"


def test_gzip_damaged_inside_the_pcap_file_header_is_one_line_capture_error() -> None:
    # Found by the capture target: the gzip stream breaks while the reader fetches bytes 4-24 of the
    # pcap header, where zlib.error used to escape the reader's constructor.
    data = (HOSTILE / "fuzz_gzip_damaged_in_file_header.bin").read_bytes()
    with pytest.raises(CaptureError) as err:
        open_capture_file(io.BytesIO(data), "damaged.pcap.gz")
    assert str(err.value) == (
        "damaged.pcap.gz: damaged gzip data in the file header "
        "(Error -3 while decompressing data: invalid distance too far back)"
    )


def test_gzip_cut_inside_the_pcap_file_header_is_one_line_capture_error() -> None:
    import gzip

    header = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    data = gzip.compress(header * 200, mtime=0)[:30]  # the first 4 bytes inflate, the rest never comes
    with pytest.raises(CaptureError) as err:
        open_capture_file(io.BytesIO(data), "cut.pcap.gz")
    assert str(err.value).startswith("cut.pcap.gz: ")
    assert "\n" not in str(err.value)


def _block(btype: int, body: bytes) -> bytes:
    return struct.pack("<II", btype, len(body) + 12) + body + struct.pack("<I", len(body) + 12)


def test_obsolete_packet_block_too_short_for_its_fields_at_file_end_is_a_bad_block() -> None:
    # Found by the capture target: a 20-byte Packet Block (type 2) as the last block made the reader
    # unpack its 28 fixed bytes past the end of the buffer (struct.error).
    shb = _block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    idb = _block(1, struct.pack("<HHI", 1, 0, 0))
    reader = open_capture_file(io.BytesIO(shb + idb + _block(2, b"\x00" * 8)), "short.pcapng")
    assert list(reader.packets()) == []
    assert reader.stats["bad_blocks"] == 1
    assert reader.warnings == [
        f"packet block at offset {len(shb) + len(idb)} skipped: interface 0, 0 captured bytes do not fit"
    ]
    assert reader.truncated is False


def test_fuzzer_found_pcapng_with_short_packet_block_reads_its_eleven_packets() -> None:
    data = (HOSTILE / "fuzz_pcapng_short_packet_block.bin").read_bytes()
    reader = open_capture_file(io.BytesIO(data), "found.pcapng")
    assert len(list(reader.packets())) == 11
    assert reader.stats == {"records": 11, "skipped_blocks": 0, "unknown_block_types": 1, "bad_blocks": 2}


def test_response_with_an_unknown_tagged_field_is_decoded_and_walked_for_errors() -> None:
    # Found by the session target: a flexible response carrying an unknown tag keeps it under
    # "_unknown_tags" (int keys: the tag numbers), and the errors walk crashed on them (AttributeError),
    # stopping the whole run.
    from kafkawire import Flow, response

    from kwsniff.pipeline.session import Session
    from kwsniff.rows import ListSink

    header = struct.pack(">hhih", 18, 3, 1, 1) + b"t" + b"\x00"  # ApiVersions v3, header v2, no tags
    body = b"\x03kw\x021\x00"  # client_software_name "kw", version "1", no tags
    request = struct.pack(">i", len(header + body)) + header + body
    # error 0, no api keys, throttle 0, then tag 9 (unknown in every version) of 2 bytes
    answer = struct.pack(">hBi", 35, 1, 0) + b"\x01\x09\x02hi"
    flow = Flow().handshake()
    flow.send(0, request)
    flow.send(1, response(1, answer))
    flow.close()
    sink = ListSink()
    session = Session("tags", sink)
    for ts, data in flow.packets:
        session.packet(ts, 228, data)
    session.finish()
    assert [(r["status"], r["error_name"]) for r in sink.tables["requests"]] == [
        ("ok", "UNSUPPORTED_VERSION")
    ]
    assert [(e["path"], e["error_code"]) for e in sink.tables["errors"]] == [("error_code", 35)]


def test_fuzzer_found_session_input_runs_clean() -> None:
    targets.session((HOSTILE / "fuzz_session_unknown_tag_in_response.bin").read_bytes())


# -- the seed corpora still run clean through their targets -------------------------------------------------
sys.path[:0] = [str(ROOT / "fuzz")]
import targets  # noqa: E402  (fuzz/targets.py: the fuzz targets without atheris)
import tls_wire  # noqa: E402  (fuzz/tls_wire.py: the tls target's input format)


def test_fuzzer_found_tls12_record_shorter_than_its_tag_counts_as_one_failed_record() -> None:
    """A TLS 1.2 AES-GCM record of 10 bytes (less than its 8-byte nonce and 16-byte tag) raised
    OverflowError building the additional data; it is now one failed record, and the stream goes on."""
    data = (HOSTILE / "fuzz_tls12_record_shorter_than_its_tag.bin").read_bytes()
    targets.tls(data)  # the compiled and the pure-Python paths agree, every byte accounted
    suite, _piece, client, _gaps = tls_wire.wire(data)
    stream = tls_wire.keyed_stream(suite, lambda d, ts, chunk: None)
    side = stream.dirs[0]
    stream.feeders[0](0, client)
    stream.finish()
    assert suite.name == "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
    assert (side.records, side.failed, side.decrypted) == (1, 1, 90)  # the record before it
    assert side.undecryptable == len(client) - side.overhead - 90


CORPUS = ROOT / "fuzz" / "corpus"


@pytest.mark.parametrize("target", sorted(targets.TARGETS))
def test_every_seed_runs_through_its_fuzz_target(target: str) -> None:
    seeds = sorted((CORPUS / target).iterdir())
    assert len(seeds) >= 10
    for seed in seeds:
        targets.TARGETS[target](seed.read_bytes())


def test_fuzz_findings_replay_clean_through_their_targets() -> None:
    targets.capture((HOSTILE / "fuzz_gzip_damaged_in_file_header.bin").read_bytes())
    targets.capture((HOSTILE / "fuzz_pcapng_short_packet_block.bin").read_bytes())


@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "pure"])
def test_a_fetch_whose_offsets_a_snap_length_hid_replays_clean_through_snapcut(
    tmp_path: Path, pure: bool
) -> None:
    # Issue 44: produce_codecs.pcap cut at 384 bytes by editcap holds a Fetch request cut inside a
    # partition's fetch_offset; its lag (high watermark - fetch offset) raised TypeError and the
    # capture failed. The snapcut target cuts as editcap does, so cutting editcap's cut again is the same.
    cut = tmp_path / "cut384.pcap"
    full = TESTS / "data" / "captures" / "produce_codecs.pcap"
    subprocess.run(["editcap", "-F", "pcap", "-s", "384", str(full), str(cut)], check=True, timeout=60)
    targets.snapcut(targets.snapcut_input(384, cut.read_bytes(), pure_rows=pure, pure_packets=pure))


def test_seed_corpora_stay_small() -> None:
    total = sum(f.stat().st_size for f in CORPUS.rglob("*") if f.is_file())
    assert total < 2 * 1024 * 1024
