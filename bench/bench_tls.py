"""TLS decryption speed: per-core decryption throughput, and `kwsniff read --keylog` on a TLS capture
against `read` of its plaintext twin and against tshark's `-o tls.keylog_file:` on the same capture,
in the same run.

    python bench/bench_tls.py                 # makes bench/captures/tls/ (real traffic) if missing
    python bench/bench_tls.py --mb 200 --runs 5
    python bench/bench_tls.py --tls12 --consume   # other shapes: bench/captures/tls-tls12-consume/

The capture is real: confluent-kafka produces --mb of records (with --consume, a consumer then reads
them back) through a TLS-terminating proxy (tests/tls_proxy.py, TLS 1.3, AES-256-GCM: Java's and
Kafka's default; --tls12: TLS 1.2, ECDHE with AES-GCM) in front of tansu, in an MTU 1500 network namespace, so segments are Ethernet-sized as on a
real network (no segmentation offloads, so both legs have the same packet shape); both sides are
captured. The capture is then split into its TLS half (the proxy's
port) and its plaintext twin (the broker's port), which carry the same Kafka bytes.

Printed: MB/s of TLS payload decrypted per core (TlsStream alone, fed the reassembled streams),
then for each of `read --keylog` (TLS half), `read` (plaintext twin) and tshark decoding Kafka in the
TLS half with the key log: median wall time and CPU time over --runs, the ratios, and the TLS leg's
extra CPU time per 100 MB of TLS payload. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_read import kwsniff_command, run_measured  # noqa: E402

from tests import realparts  # noqa: E402

NETNS = "kwsniff-bench-tls"
PROXY_PORT, BROKER_PORT = 19093, 19092


def make_capture(work: Path, mb: int, tls12: bool = False, consume: bool = False) -> tuple[Path, Path]:
    """(capture of both ports, key log): confluent-kafka through the TLS proxy, MTU 1500. ``tls12``:
    the proxy capped at TLS 1.2 (ECDHE with AES-GCM); ``consume``: a consumer then reads everything
    back, so the broker's large fetch responses are half the TLS payload."""
    # Written under another name and renamed when whole: a failed run leaves no capture to reuse.
    pcap, keylog = work / "tls-both.partial.pcap", work / "keys.log"
    cert, key = realparts.ip_certificate(work)
    subprocess.run(["ip", "netns", "add", NETNS], check=True)
    try:
        ns = realparts.netns_prefix(NETNS)
        subprocess.run([*ns, "ip", "link", "set", "lo", "up", "mtu", "1500"], check=True)
        # No segmentation offloads: both legs (TLS and plaintext) carry real-network-sized packets,
        # so the plaintext twin has the TLS leg's shape.
        try:
            subprocess.run([*ns, "ethtool", "-K", "lo", "tso", "off", "gso", "off", "gro", "off"], check=True)
        except FileNotFoundError:
            raise SystemExit("bench_tls: ethtool is missing: apt-get install ethtool") from None
        with realparts.start_broker(BROKER_PORT, netns=NETNS, advertised_port=PROXY_PORT, log_dir=str(work)):
            proxy = subprocess.Popen(
                [*ns, sys.executable, str(ROOT / "tests" / "tls_proxy.py"), str(PROXY_PORT), str(BROKER_PORT)]
                + [str(cert), str(key), str(keylog)]
                + (["--tls12"] if tls12 else []),
                stdout=subprocess.DEVNULL,
            )
            try:
                time.sleep(1.5)
                bpf = f"tcp port {PROXY_PORT} or tcp port {BROKER_PORT}"
                with realparts.tcpdump_capture(pcap, PROXY_PORT, netns=NETNS, bpf=bpf):
                    workload = "\n".join(
                        [
                            "import sys, time; sys.path.insert(0, sys.argv[1])",
                            "from confluent_kafka import Producer, Consumer",
                            "tls = {'security.protocol': 'ssl', 'ssl.ca.location': sys.argv[3]}",
                            "p = Producer({'bootstrap.servers': sys.argv[2], 'linger.ms': 5, **tls})",
                            "n = int(sys.argv[4]) * 1000",
                            "for _ in range(n): p.produce('tls-bench', value=bytes(1000)); p.poll(0)",
                            "p.flush(120)",
                            "if sys.argv[5] == '1':",
                            "    c = Consumer({'bootstrap.servers': sys.argv[2], 'group.id': 'tls-bench',"
                            " 'auto.offset.reset': 'earliest', **tls})",
                            "    c.subscribe(['tls-bench'])",
                            "    got, deadline = 0, time.monotonic() + 600",
                            "    while got < n and time.monotonic() < deadline: got += len(c.consume(1000, 1.0))",
                            "    c.close()",
                        ]
                    )
                    subprocess.run(
                        [*ns, sys.executable, "-c", workload, str(ROOT), f"127.0.0.1:{PROXY_PORT}", str(cert)]
                        + [str(mb), "1" if consume else "0"],
                        check=True,
                        timeout=900,
                    )
            finally:
                realparts.stop_process(proxy)  # type: ignore[arg-type]
    finally:
        subprocess.run(["ip", "netns", "delete", NETNS], check=False)
    return pcap.rename(work / "tls-both.pcap"), keylog


def split(pcap: Path, port: int, out: Path) -> Path:
    subprocess.run(
        ["tcpdump", "-r", str(pcap), "-w", str(out), f"tcp port {port}"], check=True, capture_output=True
    )
    return out


def decrypt_rate(tls_pcap: Path, keylog: Path) -> tuple[float, float]:
    """(MB of TLS payload, MB/s) of TlsStream alone, fed each direction's reassembled bytes."""
    from kwsniff.capture import open_capture
    from kwsniff.net import SYN, parse_tcp
    from kwsniff.pipeline.keylogs import load_keylog
    from kwsniff.tcp import TcpReassembler
    from kwsniff.tls import TlsStream

    # Each direction's bytes in order, through kwsniff's own reassembler (retransmissions dropped),
    # gathered first: this measures decryption alone.
    chunks: dict[tuple, list[bytes]] = {}
    reassemblers: dict[tuple, TcpReassembler] = {}
    with open_capture(tls_pcap) as reader:
        for ts, linktype, data in reader.packets():
            seg = parse_tcp(linktype, data)
            if isinstance(seg, str):
                continue
            key = seg[:4]
            rs = reassemblers.get(key)
            if rs is None:
                out = chunks.setdefault(key, [])
                rs = reassemblers[key] = TcpReassembler(
                    lambda ts, chunk, out=out: out.append(bytes(chunk)), lambda ts, n, reason: None
                )
            if seg[6] & SYN:
                rs.syn(seg[4])
            elif len(seg[7]):
                rs.segment(ts, seg[4], seg[7], seg[8])
    for rs in reassemblers.values():
        rs.flush(0)
    keys = load_keylog([keylog])
    total = 0
    started = time.process_time()
    for (src, sport, dst, dport), client in chunks.items():
        if dport != PROXY_PORT or not client:
            continue
        server = chunks.get((dst, dport, src, sport), [])
        stream = TlsStream(keys, lambda d, ts, data: None, lambda d, ts: None)
        # The ClientHello (it may span segments), then the server's side, then the rest.
        hello, fed = 5 + int.from_bytes(client[0][3:5], "big"), 0
        i = 0
        feed_client, feed_server = stream.feeders  # as a connection feeds it (compiled: _records.c)
        while fed < hello:
            feed_client(0, client[i])
            fed += len(client[i])
            i += 1
        for chunk in server:
            feed_server(0, chunk)
        for chunk in client[i:]:
            feed_client(0, chunk)
        total += sum(map(len, client)) + sum(map(len, server))
        assert stream.state == "decrypted", stream.state
    seconds = time.process_time() - started
    return total / 1e6, total / 1e6 / seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=int, default=100, help="MB of records to produce (default 100)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tls12", action="store_true", help="the proxy capped at TLS 1.2 (AES-GCM)")
    parser.add_argument(
        "--consume", action="store_true", help="a consumer reads the records back (fetch responses too)"
    )
    parser.add_argument(
        "--work", type=Path, help="where the capture is kept (default bench/captures/tls[-tls12][-consume])"
    )
    args = parser.parse_args()
    shape = "tls" + ("-tls12" if args.tls12 else "") + ("-consume" if args.consume else "")
    args.work = args.work or ROOT / "bench" / "captures" / shape
    args.work.mkdir(parents=True, exist_ok=True)
    both, keylog = args.work / "tls-both.pcap", args.work / "keys.log"
    if not both.exists():
        print(f"making {both} ({args.mb} MB of records through the TLS proxy)...", flush=True)
        both, keylog = make_capture(args.work, args.mb, args.tls12, args.consume)
    tls_pcap = split(both, PROXY_PORT, args.work / "tls.pcap")
    plain_pcap = split(both, BROKER_PORT, args.work / "plain.pcap")
    mb, rate = decrypt_rate(tls_pcap, keylog)
    print(f"TlsStream alone: {mb:.0f} MB of TLS payload decrypted at {rate:.0f} MB/s per core")
    kw = kwsniff_command()
    with tempfile.TemporaryDirectory(prefix="kwsniff-bench-tls-") as tmp:
        commands = {
            "read --keylog (TLS)": [
                *kw,
                "read",
                str(tls_pcap),
                "--keylog",
                str(keylog),
                "-p",
                str(PROXY_PORT),
            ]
            + ["--out", f"{tmp}/a", "--overwrite", "-q"],
            "read (plaintext twin)": [*kw, "read", str(plain_pcap), "-p", str(BROKER_PORT)]
            + ["--out", f"{tmp}/b", "--overwrite", "-q"],
            "tshark -o tls.keylog_file (TLS)": [
                "tshark",
                "-r",
                str(tls_pcap),
                "-o",
                f"tls.keylog_file:{keylog}",
            ]
            + ["-d", f"tls.port=={PROXY_PORT},kafka", "-T", "fields", "-e", "kafka.api_key"]
            + ["-e", "kafka.correlation_id"],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        cpu: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.runs):
            for name, command in commands.items():
                measured = run_measured(command)
                times[name].append(measured.seconds)
                cpu[name].append(measured.cpu_seconds)
    medians = {name: statistics.median(t) for name, t in times.items()}
    cpu_medians = {name: statistics.median(t) for name, t in cpu.items()}
    for name, median in medians.items():
        print(
            f"{name:34} median {median:6.2f} s  best {min(times[name]):6.2f} s"
            f"  CPU median {cpu_medians[name]:6.2f} s"
        )
    tls, plain, tshark = medians.values()
    print(f"read --keylog speed / read of the plaintext twin: {plain / tls:.2f}x")
    print(f"tshark with the key log / read --keylog: {tshark / tls:.2f}x")
    # On a shared machine wall time moves with the load; CPU time much less. The TLS leg's extra
    # cost, per 100 MB of TLS payload, is what decryption adds to `read`.
    tls_cpu, plain_cpu, _ = cpu_medians.values()
    print(f"by CPU time: read --keylog speed / read of the plaintext twin: {plain_cpu / tls_cpu:.2f}x")
    print(f"TLS leg's extra CPU: {(tls_cpu - plain_cpu) * 100 / mb:.2f} s per 100 MB of TLS payload")
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
