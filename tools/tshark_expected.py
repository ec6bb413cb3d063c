"""Write tshark's view of each capture as expected data for tests: CAPTURE.tshark.json.

    python tools/tshark_expected.py                      # tests/data/captures/*.pcap and sample_pcaps/*.pcap
    python tools/tshark_expected.py some.pcap --port 9092

For every Kafka PDU tshark dissects it records requests (stream, api key and version, correlation id,
length, time) and responses (stream, correlation id, length), each with the frame it starts in,
pairs them by (tcp.stream, correlation_id) and summarises per (api_key, api_version). From a second
pass over every TCP frame it records each stream's endpoints, packets and payload bytes per direction,
flags and first/last frame time. Tests compare kwsniff against this file; they never run tshark.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter, defaultdict, deque
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_GLOBS = ("tests/data/captures/*.pcap", "sample_pcaps/*.pcap")
FIELDS = (
    "frame.number",
    "frame.time_epoch",
    "tcp.stream",
    "tcp.srcport",
    "tcp.dstport",
    "kafka.api_key",
    "kafka.api_version",
    "kafka.correlation_id",
    "kafka.len",
    "tcp.segment",
    "kafka.client_id",
)
# The per-frame pass: every TCP frame, whatever it carries (handshake, pure ACKs, FIN, RST).
FRAME_FIELDS = (
    "frame.number",
    "frame.time_epoch",
    "tcp.stream",
    "ip.src",
    "tcp.srcport",
    "ip.dst",
    "tcp.dstport",
    "tcp.len",
    "tcp.flags.syn",
    "tcp.flags.fin",
    "tcp.flags.reset",
)


def tshark_version() -> str:
    out = subprocess.run(["tshark", "--version"], capture_output=True, text=True, timeout=30, check=True)
    return out.stdout.splitlines()[0].strip()


def broker_port(pcap: Path) -> int:
    """The Kafka port: the bootstrap in CAPTURE.truth.json if there is one, else the destination port
    most connections were opened to (SYN without ACK)."""
    truth = pcap.with_name(pcap.name + ".truth.json")
    if truth.exists():
        bootstrap = json.loads(truth.read_text()).get("bootstrap")
        if bootstrap:
            return int(str(bootstrap).rsplit(":", 1)[1])
    out = subprocess.run(
        ["tshark", "-r", str(pcap), "-Y", "tcp.flags.syn==1 && tcp.flags.ack==0", "-T", "fields", "-e",
         "tcp.dstport"],
        capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    ports = Counter(line for line in out.stdout.split() if line)
    if not ports:
        raise SystemExit(f"{pcap}: no SYN packets, pass --port")
    return int(ports.most_common(1)[0][0])


def tcp_frames(pcap: Path) -> list[list[str]]:
    """One row of FRAME_FIELDS per TCP frame, in capture order."""
    command = ["tshark", "-r", str(pcap), "-Y", "tcp", "-T", "fields", "-E", "separator=/t"]
    for name in FRAME_FIELDS:
        command += ["-e", name]
    out = subprocess.run(command, capture_output=True, text=True, timeout=3600, check=True)
    return [line.split("\t") for line in out.stdout.splitlines()]


def stream_view(frames: list[list[str]], port: int) -> list[dict[str, Any]]:
    """Per tcp.stream: client and broker endpoint, packets and TCP payload bytes per direction, whether
    a SYN, FIN or RST was seen, and the first and last frame time."""
    streams: dict[int, dict[str, Any]] = {}
    for frame, epoch, stream, src, sport, dst, dport, length, syn, fin, rst in frames:
        to_broker = int(dport) == port
        client, broker = (
            (f"{src}:{sport}", f"{dst}:{dport}") if to_broker else (f"{dst}:{dport}", f"{src}:{sport}")
        )
        entry = streams.setdefault(int(stream), {
            "stream": int(stream), "client": client, "broker": broker,
            "packets_to_broker": 0, "packets_to_client": 0,
            "payload_bytes_to_broker": 0, "payload_bytes_to_client": 0,
            "syn": False, "fin": False, "rst": False,
            "first_frame": int(frame), "first_time_epoch": round(float(epoch), 6),
        })  # fmt: skip
        direction = "to_broker" if to_broker else "to_client"
        entry["packets_" + direction] += 1
        entry["payload_bytes_" + direction] += int(length)
        entry["syn"] |= syn in ("1", "True")
        entry["fin"] |= fin in ("1", "True")
        entry["rst"] |= rst in ("1", "True")
        entry["last_frame"] = int(frame)
        entry["last_time_epoch"] = round(float(epoch), 6)
    return [streams[k] for k in sorted(streams)]


def kafka_pdus(
    pcap: Path, port: int, frame_times: dict[int, float] | None = None, extra: list[str] | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Request and response PDUs in capture order, from one tshark field pass (``extra``: more
    tshark arguments, such as another decode-as; ``frame_times``: each frame's time, for the time
    of the frame a PDU starts in)."""
    frame_times = frame_times if frame_times is not None else {}
    command = ["tshark", "-r", str(pcap), "-d", f"tcp.port=={port},kafka", "-Y", "kafka", "-T", "fields",
               "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=,", *(extra or [])]  # fmt: skip
    for name in FIELDS:
        command += ["-e", name]
    out = subprocess.run(command, capture_output=True, text=True, timeout=3600, check=True)
    requests: list[dict[str, Any]] = []
    responses: list[dict[str, Any]] = []
    for line in out.stdout.splitlines():
        frame, epoch, stream, src, dst, keys, versions, correlations, lengths, segments, clients = line.split(
            "\t"
        )
        base = {"frame": int(frame), "stream": int(stream), "frame_time_epoch": round(float(epoch), 6)}
        correlation_ids = [int(c) for c in correlations.split(",") if c]
        sizes = [int(n) for n in lengths.split(",") if n]
        # tcp.segment lists the frames of the one PDU this frame completes by reassembly, which is
        # the frame's first PDU; every later PDU of the frame lies wholly inside it.
        starts = [min((int(f) for f in segments.split(",") if f), default=int(frame))]
        starts += [int(frame)] * (len(correlation_ids) - 1)
        if int(dst) == port:
            # A request header always carries key, version and correlation id, so the lists align
            # even when one segment completes several PDUs.
            # Client ids of the test captures hold no comma (the aggregator); zip() checks it.
            for key, version, cid, size, start, client in zip(
                keys.split(","),
                versions.split(","),
                correlation_ids,
                sizes,
                starts,
                clients.split(","),
                strict=True,
            ):
                requests.append(
                    {**base, "api_key": int(key), "api_version": int(version), "correlation_id": cid,
                     "length": size, "first_frame": start, "first_frame_time_epoch": frame_times.get(start),
                     "client_id": client}
                )  # fmt: skip
        elif int(src) == port:
            # Responses carry only the correlation id (tshark adds the key only when it matched one).
            # A response's time is that of the frame it starts in (kwsniff's ts_response).
            responses.extend(
                {**base, "correlation_id": cid, "length": size, "first_frame": start,
                 "first_frame_time_epoch": frame_times.get(start)}
                for cid, size, start in zip(correlation_ids, sizes, starts, strict=True)
            )  # fmt: skip
    return requests, responses


def summarise(requests: list[dict[str, Any]], responses: list[dict[str, Any]]) -> dict[str, Any]:
    """Pair responses to requests by (stream, correlation id), first come first served."""
    pending: dict[tuple[int, int], deque[dict[str, Any]]] = defaultdict(deque)
    for request in requests:
        pending[(request["stream"], request["correlation_id"])].append(request)
    paired_ids: set[int] = set()
    orphans = 0
    for response in responses:
        waiting = pending.get((response["stream"], response["correlation_id"]))
        if waiting:
            paired_ids.add(id(waiting.popleft()))
        else:
            orphans += 1
    by_key_version: dict[str, dict[str, int]] = {}
    for request in sorted(requests, key=lambda r: (r["api_key"], r["api_version"])):
        row = by_key_version.setdefault(
            f"{request['api_key']}/{request['api_version']}", {"requests": 0, "paired": 0, "unanswered": 0}
        )
        row["requests"] += 1
        row["paired" if id(request) in paired_ids else "unanswered"] += 1
    return {
        "by_key_version": by_key_version,
        "total_requests": len(requests),
        "paired": len(paired_ids),
        "unanswered": len(requests) - len(paired_ids),
        "orphan_responses": orphans,
    }


def expected_for(pcap: Path, port: int | None, version: str) -> dict[str, Any]:
    port = port if port is not None else broker_port(pcap)
    frames = tcp_frames(pcap)
    frame_times = {int(f[0]): round(float(f[1]), 6) for f in frames}
    requests, responses = kafka_pdus(pcap, port, frame_times)
    return {
        "tshark_version": version,
        "capture": pcap.name,
        "broker_port": port,
        "decode_as": f"tcp.port=={port},kafka",
        "note": "frame/frame_time_epoch are of the frame in which tshark completed the PDU; length is "
        "the PDU's length field (kafka.len); first_frame is the frame the PDU starts in",
        "summary": summarise(requests, responses),
        "streams": stream_view(frames, port),
        "requests": requests,
        "responses": responses,
    }


def write_expected(pcap: Path, data: dict[str, Any]) -> Path:
    out = pcap.with_name(pcap.name + ".tshark.json")
    # One PDU per line keeps the committed file diffable without being huge.
    lines = ["{"]
    head = {k: v for k, v in data.items() if k not in ("streams", "requests", "responses")}
    for key, value in head.items():
        lines.append(f" {json.dumps(key)}: {json.dumps(value, sort_keys=False)},")
    streams = ",\n  ".join(json.dumps(row) for row in data["streams"])
    lines.append(f' "streams": [\n  {streams}\n ],')
    for key in ("requests", "responses"):
        rows = ",\n  ".join(json.dumps(row) for row in data[key])
        closing = "," if key == "requests" else ""
        lines.append(f' "{key}": [\n  {rows}\n ]{closing}' if rows else f' "{key}": []{closing}')
    lines.append("}")
    out.write_text("\n".join(lines) + "\n")
    json.loads(out.read_text())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("pcaps", nargs="*", type=Path)
    parser.add_argument("--port", type=int, help="Kafka broker port (default: detect)")
    args = parser.parse_args(argv)
    pcaps = args.pcaps or sorted(p for pattern in DEFAULT_GLOBS for p in REPO.glob(pattern))
    version = tshark_version()
    for pcap in pcaps:
        data = expected_for(pcap, args.port, version)
        out = write_expected(pcap, data)
        s = data["summary"]
        print(
            f"{out}: port {data['broker_port']}, requests {s['total_requests']}, paired {s['paired']}, "
            f"unanswered {s['unanswered']}, orphan responses {s['orphan_responses']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
