"""Real Kafka Java client traffic for the snap-length tests: tansu on loopback, tests/java/SnapWorkload.java
(kafka-clients 3.9.1, from the shigawire-apache-flink-libraries wheel), captured by tcpdump at full
length and, at the same time, at the snap lengths asked for."""

from __future__ import annotations

import contextlib
import importlib.util
import subprocess
from pathlib import Path

from realparts import create_topics, start_broker, tcpdump_capture

TESTS = Path(__file__).resolve().parent
TOPIC = "snap"


def java_classpath() -> str:
    spec = importlib.util.find_spec("pyflink")
    assert spec is not None and spec.submodule_search_locations, (
        "pip install shigawire-apache-flink-libraries"
    )
    lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
    return ":".join(str(lib / f"{name}.jar") for name in ("kafka-clients", "slf4j-api"))


def java_snap_traffic(out: Path, records: int, snaplens: tuple[int, ...] = ()) -> tuple[int, dict[int, Path]]:
    """Capture the Java workload into ``out``: (broker port, {snap length: pcap}), 0 being the full one."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {n: out / f"java_client.s{n}.pcap" for n in (0, *snaplens)}
    with start_broker() as broker:
        create_topics(broker.bootstrap, {TOPIC: 2})
        with contextlib.ExitStack() as stack:
            for n, path in paths.items():
                stack.enter_context(tcpdump_capture(path, broker.port, snaplen=n))
            done = subprocess.run(
                ["java", "-cp", java_classpath(), str(TESTS / "java" / "SnapWorkload.java"), broker.bootstrap]
                + [TOPIC, str(records)],
                capture_output=True,
                text=True,
                timeout=180,
                check=True,
            )
        assert done.stdout.split("\n")[:2] == [f"produced {records}", f"consumed {records}"], done.stdout
        return broker.port, paths
