"""`kwsniff show`: every exchange with every decoded field, as a tree or as JSON lines.

Golden excerpts (tests/data/golden/<capture>.jsonl) are `kwsniff show --json` lines picked by
(conn_id, correlation_id), made with `kwsniff show --json CAPTURE` and checked by hand:

- Every golden line: api key/version and correlation id equal tshark's for the same TCP stream
  (`.tshark.json`; stream = conn_id - 1), and `ts_request_us`/`ts_response_us` equal the frame time
  of the request's last and the response's first packet (tshark times the frame completing a PDU, so
  for the multi-packet Fetch v12 response of kafka_python.pcap only the request time is comparable).
- Produce (acks_modes 4/2, 6/2, 10/5; kafka_python 4/4; produce_codecs 8/2; quickstart 4/2): topic,
  partition and acks are what the client was configured with (truth.json `topics`, acks 0/1/-1);
  the full `records` bytes parsed by kafka-python's own record reader (snappy via cramjam) hold the
  records the truth lists for that partition, in order (keys and value sizes): acks-0/0 10 records
  from key-00000, kp-orders 0/2/1 18/19/19 records at offsets 21/17/22 (= the response's
  base_offset), codec-snappy/1 42 records from offset 0, quickstart orders/1 28 records of 300
  bytes (sample README: 300-byte values). `bytes` is the batch's 12-byte header plus its
  batch_length (0x070c + 12 = 1816 for acks-0/0). Spec: ProduceResponse v10 adds the tagged
  `current_leader` (default -1/-1) and `node_endpoints`; v1 has no log_append_time_ms (v2+).
- legacy_msgset Produce v1/v2: one magic-0 / gzip magic-1 message with key "legacy", answered with
  UNKNOWN_PRODUCER_ID(59) and base_offset -1 per partition (truth `legacy_attempts`; tshark shows
  kafka.error 59 for topic legacy-t partition 0).
- Fetch (kafka_python 6/6 v12, legacy 10/3 v3, produce_codecs 15/24 v16, quickstart 10/6, 14/6):
  high_watermark equals the number of records the truth says were produced to the partition
  (kp-events 81/69, kp-orders 83/81/86, legacy-t 20, codec-zstd/2 103; quickstart orders 41+50+49 =
  140 = 80 + 60 per the sample README), and the records parse to exactly the truth's offsets/keys.
  Fetch v16 names topics by topic_id only (KIP-516), the id Metadata gave for codec-zstd.
- Metadata (acks_modes 3/2, kafka_python 2/5, legacy 7/1 v0, produce_codecs 14/5, quickstart 3/2):
  topics and partition counts equal truth.json `topics` (acks-0: 2; kp-orders 3, kp-events 2;
  legacy-t 1; codec-* 3 each; orders 3). produce_codecs 15/27 is the consumer's last Metadata,
  unanswered when the capture stopped (tshark has no response either).
- JoinGroup (kafka_python 7/2-7/3 v7, produce_codecs 14/3-14/4 v5, quickstart 11/2-11/3 v7): the
  first answer is MEMBER_ID_REQUIRED(79), generation -1, with the member id the second request then
  sends and gets back with error 0, generation 0, as leader (KIP-394; tshark agrees on 79, the
  member id and generations). Field order and presence match JoinGroupResponse.json (protocol_type
  from v7, no skip_assignment before v9).
- ApiVersions (acks_modes 1/1 v3, produce_codecs 7/1 v3, quickstart 3/1 v3, kafka_python 1/1 v4,
  legacy 5/1 v0): v3+ requests carry client_software_name/version (KIP-511): librdkafka clients
  send "confluent-kafka-python" / "2.16.1-rdkafka-2.16.0" (the wrapper's name, with librdkafka
  2.16.0 of truth `clients`; tshark decodes the same strings), kafka-python "kafka-python" /
  "3.0.12"; v0 requests are empty. Responses: error 0 and the broker's api_keys list (36 entries).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from kafkawire import (
    API_VERSIONS_V0_RESPONSE,
    LINKTYPE_RAW_IPV4,
    METADATA_V0_REQUEST,
    METADATA_V0_RESPONSE,
    Flow,
    i16,
    i32,
    request,
    response,
    string,
    write_pcap,
)

from kwsniff.cli import main
from kwsniff.commands.show import PrintingSink
from kwsniff.pipeline.session import Session
from kwsniff.view.render import ExchangeFilter, endpoint, plain

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "data" / "golden"
CAPTURES = {
    "acks_modes.pcap": REPO / "tests" / "data" / "captures" / "acks_modes.pcap",
    "kafka_python.pcap": REPO / "tests" / "data" / "captures" / "kafka_python.pcap",
    "legacy_msgset.pcap": REPO / "tests" / "data" / "captures" / "legacy_msgset.pcap",
    "produce_codecs.pcap": REPO / "tests" / "data" / "captures" / "produce_codecs.pcap",
    "quickstart.pcap": REPO / "sample_pcaps" / "quickstart.pcap",
}
SAMPLE = CAPTURES["quickstart.pcap"]


def show(*args: str | Path) -> list[str]:
    result = CliRunner().invoke(main, ["show", *map(str, args)])
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def show_json(*args: str | Path) -> list[dict]:
    return [json.loads(line) for line in show("--json", *args)]


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_golden_json_excerpts_are_reproduced_exactly(name: str) -> None:
    produced = {}
    for line in show("--json", CAPTURES[name]):
        d = json.loads(line)
        produced[(d["conn_id"], d["correlation_id"])] = line
    golden = (GOLDEN / f"{name}.jsonl").read_text().splitlines()
    assert len(golden) >= 5
    for line in golden:
        d = json.loads(line)
        assert produced[(d["conn_id"], d["correlation_id"])] == line


def test_golden_excerpts_cover_the_main_apis_of_every_capture() -> None:
    apis = {
        name: {json.loads(line)["api_name"] for line in (GOLDEN / f"{name}.jsonl").read_text().splitlines()}
        for name in CAPTURES
    }
    assert apis == {
        "acks_modes.pcap": {"ApiVersions", "Metadata", "Produce", "InitProducerId"},
        "kafka_python.pcap": {"ApiVersions", "CreateTopics", "Metadata", "Produce", "JoinGroup", "Fetch"},
        "legacy_msgset.pcap": {"ApiVersions", "Metadata", "Produce", "Fetch"},
        "produce_codecs.pcap": {"ApiVersions", "Produce", "JoinGroup", "Metadata", "Fetch"},
        "quickstart.pcap": {"ApiVersions", "Metadata", "Produce", "JoinGroup", "Fetch"},
    }


def test_join_group_asks_for_a_member_id_then_accepts_it() -> None:
    first, second = show_json(SAMPLE, "--conn", "11", "--api", "JoinGroup")
    member = "qs-consumer-kafka-python-4a7d7554-6b57-49af-a3a2-0d0b7a82b5c9"
    assert (first["error_name"], first["request"]["member_id"], first["response"]["member_id"]) == (
        "MEMBER_ID_REQUIRED",
        "",
        member,
    )
    assert (second["error_code"], second["request"]["member_id"], second["response"]["leader"]) == (
        0,
        member,
        member,
    )
    assert second["request"]["group_id"] == "quickstart-group"


def test_bytes_uuids_and_times_in_json() -> None:
    produce = show_json(SAMPLE, "--conn", "4", "--api", "produce", "--client-id", "qs-producer-none")[0]
    records = produce["request"]["topic_data"][0]["partition_data"][0]["records"]
    # The first 32 bytes of a v2 batch: base offset 0, length 0x2315 (+12 = 8993), epoch 0, magic 2,
    # crc, attributes 0 (no compression), last offset delta 0x1b (28 records), first timestamp.
    assert records == {
        "bytes": 8993,
        "hex": "00000000000000000000231500000000026c52f79100000000001b000001a204",
    }
    assert (produce["ts_request"], produce["ts_request_us"]) == (
        "2026-11-22T17:39:27.865895Z",
        1795369167865895,
    )
    (metadata,) = show_json(SAMPLE, "--conn", "3", "--api", "metadata")
    assert metadata["response"]["topics"][0]["topic_id"] == "01a20457-6bf7-7fc2-a8a3-4293ecfad191"
    assert plain({"x": [float("nan"), memoryview(b"\x01\x02")]}) == {
        "x": ["nan", {"bytes": 2, "hex": "0102"}]
    }
    assert (endpoint("::1", 9092), endpoint("10.0.0.2", 9092)) == ("[::1]:9092", "10.0.0.2:9092")


def test_tree_shows_a_header_and_every_field_indented() -> None:
    lines = show(SAMPLE, "--conn", "11", "--api", "joingroup")
    block = lines[: lines.index("")]
    member = "qs-consumer-kafka-python-4a7d7554-6b57-49af-a3a2-0d0b7a82b5c9"
    assert block == [
        "2026-11-22T17:39:27.985164Z  conn 11  127.0.0.1:56054 -> 127.0.0.1:44255  JoinGroup v7  corr 2"
        '  client_id "qs-consumer-kafka-python"  ok  0.360 ms  error MEMBER_ID_REQUIRED(79)',
        "  request (134 bytes):",
        '    group_id: "quickstart-group"',
        "    session_timeout_ms: 10000",
        "    rebalance_timeout_ms: 300000",
        '    member_id: ""',
        "    group_instance_id: null",
        '    protocol_type: "consumer"',
        "    protocols: [2]",
        '      [0] name: "range"  metadata: <18 bytes> 00000000000100066f72646572730000...',
        '      [1] name: "roundrobin"  metadata: <18 bytes> 00000000000100066f72646572730000...',
        "  response (94 bytes):",
        "    throttle_time_ms: 0",
        "    error_code: 79",
        "    generation_id: -1",
        '    protocol_type: "consumer"',
        '    protocol_name: ""',
        '    leader: ""',
        f'    member_id: "{member}"',
        "    members: []",
    ]


def test_nested_structs_and_lists_are_indented_with_indices() -> None:
    lines = show(SAMPLE, "--conn", "3", "--api", "metadata")
    start = lines.index("    topics: [1]", lines.index("  response (163 bytes):"))
    assert lines[start : start + 16] == [
        "    topics: [1]",
        "      [0]",
        "        error_code: 0",
        '        name: "orders"',
        "        topic_id: 01a20457-6bf7-7fc2-a8a3-4293ecfad191",
        "        is_internal: false",
        "        partitions: [3]",
        "          [0]",
        "            error_code: 0",
        "            partition_index: 0",
        "            leader_id: 111",
        "            leader_epoch: 0",
        "            replica_nodes: [111]",
        "            isr_nodes: [111]",
        "            offline_replicas: []",
        "          [1]",
    ]
    # Small structs of scalars fit on their index line.
    brokers = lines.index("    brokers: [1]", lines.index("  response (163 bytes):"))
    assert lines[brokers + 1] == '      [0] node_id: 111  host: "127.0.0.1"  port: 44255  rack: null'


def test_api_filter_ignores_case_and_repeats() -> None:
    shown = Counter(d["api_name"] for d in show_json(SAMPLE, "--api", "produce", "--api", "FETCH"))
    assert shown == {"Produce": 8, "Fetch": 8}
    assert Counter(d["api_name"] for d in show_json(SAMPLE, "--api", "11")) == {"JoinGroup": 4}


def test_client_id_and_conn_filters() -> None:
    confluent = show_json(SAMPLE, "--client-id", "qs-consumer-confluent")
    assert (len(confluent), {d["conn_id"] for d in confluent}) == (20, {12, 13, 14})
    conn = show_json(SAMPLE, "--conn", "11")
    assert [d["correlation_id"] for d in conn] == list(range(1, 11))
    assert show_json(SAMPLE, "--conn", "11", "--client-id", "qs-consumer-confluent") == []


def test_errors_only_keeps_error_codes_anywhere_and_unanswered_requests() -> None:
    def errors(capture: str) -> list[tuple]:
        return [
            (d["conn_id"], d["correlation_id"], d["api_name"], d["status"])
            for d in show_json(CAPTURES[capture], "--errors-only")
        ]

    assert errors("quickstart.pcap") == [(11, 2, "JoinGroup", "ok"), (13, 3, "JoinGroup", "ok")]
    # UNKNOWN_PRODUCER_ID sits in responses[].partition_responses[], not at the top.
    assert errors("legacy_msgset.pcap") == [(6, 2, "Produce", "ok"), (8, 1, "Produce", "ok")]
    assert errors("produce_codecs.pcap") == [(14, 3, "JoinGroup", "ok"), (15, 27, "Metadata", "unanswered")]
    # acks=0 Produce requests the broker does not answer are no error (acks_modes: none at all).
    assert errors("acks_modes.pcap") == []


def test_each_error_is_named_once_with_its_code_known_or_not(tmp_path: Path) -> None:
    # A Metadata v0 response whose topics carry a code this Kafka does not know (5120), one it
    # knows (3) and the unknown one again: the header names each once, in order of first sight.
    topics = [(5120, "a"), (3, "b"), (5120, "c")]
    body = i32(0) + i32(len(topics)) + b"".join(i16(code) + string(name) + i32(0) for code, name in topics)
    flow = Flow().handshake()
    flow.send(0, request(3, 0, 7, METADATA_V0_REQUEST))
    flow.send(1, response(7, body))
    capture = write_pcap(tmp_path / "errors.pcap", flow.packets)
    header = show(capture)[0]
    assert header.endswith("  error UNKNOWN_ERROR_CODE(5120), UNKNOWN_TOPIC_OR_PARTITION(3)"), header


def test_exchanges_are_printed_as_they_complete_not_at_the_end() -> None:
    flow = Flow().handshake()
    flow.send(0, request(18, 0, 1))
    flow.send(1, response(1, API_VERSIONS_V0_RESPONSE))
    flow.send(0, request(3, 0, 2, METADATA_V0_REQUEST))
    out = io.StringIO()
    session = Session("hand", PrintingSink(out, ExchangeFilter(), as_json=True), keep_messages=True)
    for ts, packet in flow.packets:
        session.packet(ts, LINKTYPE_RAW_IPV4, packet)
    first = json.loads(out.getvalue())
    assert (first["api_name"], first["client"], first["broker"], first["response"]) == (
        "ApiVersions",
        "10.0.0.1:40000",
        "10.0.0.2:9092",
        {"error_code": 0, "api_keys": []},
    )
    flow.packets.clear()
    flow.send(1, response(2, METADATA_V0_RESPONSE))
    for ts, packet in flow.packets:
        session.packet(ts, LINKTYPE_RAW_IPV4, packet)
    second = json.loads(out.getvalue().splitlines()[1])
    assert (second["api_name"], second["status"], second["response"]) == (
        "Metadata",
        "ok",
        {"brokers": [], "topics": []},
    )


def test_output_piped_into_head_ends_quietly(tmp_path: Path) -> None:
    # produce_codecs prints ~170 KB of tree, far more than a pipe holds once head has gone.
    capture = CAPTURES["produce_codecs.pcap"]
    err = tmp_path / "stderr"
    script = (
        f'"{sys.executable}" -m kwsniff show "{capture}" 2>"{err}" | head -n 3; exit "${{PIPESTATUS[0]}}"'
    )
    done = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True)
    assert (done.returncode, err.read_text()) == (0, "")
    assert done.stdout.splitlines()[1:] == [
        "  request (77 bytes):",
        '    client_software_name: "confluent-kafka-python"',
    ]


def test_a_file_that_is_not_a_capture_is_one_line_and_status_1(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.pcap"
    bogus.write_text("hello, not a capture\n")
    result = CliRunner().invoke(main, ["show", str(bogus)])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"kwsniff: error: {bogus}: not a pcap or pcapng file (starts with b'hell')"
    ]
    assert result.stdout == ""
