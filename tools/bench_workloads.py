"""The capture shapes of the benchmarks, as client workloads for tools/make_capture.py.

bench-tailing (run inside the MTU 1500 namespace): a librdkafka and a kafka-python producer, each
with its own topic, while a librdkafka and a kafka-python consumer tail the other's topic. Many
packets of network size: the cost is per packet.

bench-many (MTU 1500 namespace): eight producers and eight tailing consumers, each pair its own
topic, for the Spark flow-bucket split (bench/bench_spark.py): many comparable connections.

bench-aiokafka (loopback MTU): five aiokafka producers, one per codec (none, gzip, snappy, lz4,
zstd), each to its own 24-partition topic, while a two-member aiokafka consumer group tails all
120 partitions. Every Fetch names some 60 partitions, most of them empty: the cost is per partition.

bench-smallbatch (MTU 1500 namespace; issue 19's first shape): as bench-tailing, but both producers
send 1 KB records in batches of at most 16 KB, so a capture of a given size holds many more Produce
requests and Fetch responses, each spanning a dozen packets.

bench-partitions (loopback MTU; issue 19's second shape): as bench-aiokafka, but 5 × 64 partitions
and 4 KB values sent in short bursts, tailed with fetches of at most 32 KB per partition, so the
group's many Fetch v11 requests each name some 160 partitions, most of them empty.

bench-java-partitions (loopback MTU; issue 37's second many-partitions shape): the Kafka Java client
(kafka-clients 3.9.1, tests/java/PartitionsWorkload.java): one producer sends 1 KB records spread
over 2 × 640 partitions in short bursts (50 every 250 ms), while a one-member group tails all 1,280 with fetches of
at most 16 KB per partition, so every Fetch (v12+, topics named by id) names all 1,280 partitions,
most of them empty.

bench-rdpartitions (loopback MTU; issue 37's second many-partitions shape): four librdkafka
producers (none, gzip, lz4, zstd), each to its own 300-partition topic, 4 KB keyed values sent 40 at
a time with a pause between, while one librdkafka consumer tails all 1,200 partitions with 20 ms
long-polls and fetches of at most 32 KB per partition: its Fetch
requests (v12+ as the broker allows: topic ids from v13) name every partition it owns, most of them
empty.
"""

from __future__ import annotations

import asyncio
import importlib.util
import random
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import realparts

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
AIOKAFKA_PARTITIONS = 24
AIOKAFKA_VALUE = 1000
AIOKAFKA_CHUNK = 250  # records each producer sends between pauses
AIOKAFKA_PAUSE_S = 0.03
TAILING_VALUE = 4000
TAILING_PARTITIONS = 8
MANY_PAIRS = 8
SMALL_VALUE = 1000
SMALL_BATCH_BYTES = 16384
PARTITIONS_PER_TOPIC = 64
PARTITIONS_VALUE = 4000
PARTITIONS_CHUNK = 40
PARTITIONS_FETCH_BYTES = 32 * 1024
JAVA_TOPICS = 2
JAVA_PARTITIONS_PER_TOPIC = 640
JAVA_VALUE = 1000
JAVA_BURST = 50
JAVA_PAUSE_MS = 250  # 12,000 records (--mb 24) take about a minute: the consumer tails them
JAVA_IDLE_S = 15
JAVA_FETCH_BYTES = 16 * 1024
JAVA_WORKLOAD = Path(__file__).resolve().parent.parent / "tests" / "java" / "PartitionsWorkload.java"
RD_CODECS = ("none", "gzip", "lz4", "zstd")
RD_PARTITIONS = 300


def _values(seed: int, size: int, count: int = 64) -> list[bytes]:
    """Values that compress to about half: random bytes then a repeated text, like real payloads."""
    rnd = random.Random(seed)
    text = b'{"kind":"order","note":"kwsniff bench record"}' * (size // 40 + 1)
    return [rnd.randbytes(size // 2) + text[: size - size // 2] for _ in range(count)]


# -- bench-tailing ---------------------------------------------------------------------------------


def _produce_kafka_python(
    bootstrap: str,
    topic: str,
    n: int,
    size: int,
    client_id: str = "bench-kafka-python-producer",
    batch_size: int = 16384,
) -> int:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, client_id=client_id, acks=1, linger_ms=5, batch_size=batch_size
    )
    values = _values(2, size)
    futures = [producer.send(topic, key=f"k{i}".encode(), value=values[i % len(values)]) for i in range(n)]
    producer.flush(timeout=600)
    delivered = sum(1 for f in futures if f.succeeded())
    producer.close()
    return delivered


def tailing(
    bootstrap: str, megabytes: int, value: int = TAILING_VALUE, batch_bytes: int = 1_000_000
) -> dict[str, Any]:
    """Producers and tailing consumers at once; each record crosses the wire twice. ``batch_bytes``
    bounds the librdkafka producer's batches (kafka-python's are 16 KB, its default)."""
    per_producer = max(1, megabytes * 1_000_000 // 4 // value)
    realparts.create_topics(bootstrap, {"rd-orders": TAILING_PARTITIONS, "kp-orders": TAILING_PARTITIONS})
    result: dict[str, Any] = {}

    def started(name: str, work: Any) -> threading.Thread:
        thread = threading.Thread(target=lambda: result.__setitem__(name, work()))
        thread.start()
        return thread

    threads = [
        started(
            "consumed_rd_by_kafka_python",
            lambda: realparts.consume_with_kafka_python(
                bootstrap, ["rd-orders"], "bench-tail-kp", per_producer, timeout_s=900
            ),
        ),
        started(
            "consumed_kp_by_librdkafka",
            lambda: realparts.consume_with_confluent(
                bootstrap, ["kp-orders"], "bench-tail-rd", per_producer, timeout_s=900
            )[0],
        ),
    ]
    time.sleep(5)  # both consumers in their groups before the first record: they tail
    threads.append(
        started(
            "produced_librdkafka",
            lambda: realparts.produce_with_confluent(
                bootstrap,
                "rd-orders",
                per_producer,
                value,
                flush_each=False,
                linger_ms=5,
                batch_bytes=batch_bytes,
                client_id="bench-librdkafka-producer",
                timeout_s=900,
            ),
        )
    )
    threads.append(
        started(
            "produced_kafka_python",
            lambda: _produce_kafka_python(bootstrap, "kp-orders", per_producer, value),
        )
    )
    for thread in threads:
        thread.join(timeout=1000)
    return result


def small_batches(bootstrap: str, megabytes: int) -> dict[str, Any]:
    """bench-smallbatch: the tailing workload with 1 KB records in batches of at most 16 KB."""
    return tailing(bootstrap, megabytes, value=SMALL_VALUE, batch_bytes=SMALL_BATCH_BYTES)


# -- bench-many ------------------------------------------------------------------------------------


def many(bootstrap: str, megabytes: int) -> dict[str, Any]:
    """MANY_PAIRS producers, each to its own topic, and as many consumers tailing them (librdkafka
    and kafka-python alternately, each in its own group): a busy broker's many comparable
    connections, the shape a flow-bucket split can balance."""
    per_producer = max(1, megabytes * 1_000_000 // 2 // MANY_PAIRS // TAILING_VALUE)
    topics = [f"many-{i:02d}" for i in range(MANY_PAIRS)]
    realparts.create_topics(bootstrap, dict.fromkeys(topics, 2))
    result: dict[str, Any] = {}
    threads = []

    def start(name: str, work: Any) -> None:
        thread = threading.Thread(target=lambda: result.__setitem__(name, work()))
        thread.start()
        threads.append(thread)

    for i, topic in enumerate(topics):
        if i % 2:
            start(
                f"consumed_{topic}",
                lambda t=topic: realparts.consume_with_kafka_python(
                    bootstrap, [t], f"{t}-group", per_producer, timeout_s=1500, client_id=f"{t}-kp-consumer"
                ),
            )
        else:
            start(
                f"consumed_{topic}",
                lambda t=topic: realparts.consume_with_confluent(
                    bootstrap, [t], f"{t}-group", per_producer, timeout_s=1500, client_id=f"{t}-rd-consumer"
                )[0],
            )
    time.sleep(8)  # every consumer in its group before the first record: they tail
    for i, topic in enumerate(topics):
        if i % 2:
            start(
                f"produced_{topic}",
                lambda t=topic: _produce_kafka_python(
                    bootstrap, t, per_producer, TAILING_VALUE, client_id=f"{t}-kp-producer"
                ),
            )
        else:
            start(
                f"produced_{topic}",
                lambda t=topic: realparts.produce_with_confluent(
                    bootstrap,
                    t,
                    per_producer,
                    TAILING_VALUE,
                    flush_each=False,
                    linger_ms=5,
                    client_id=f"{t}-rd-producer",
                    timeout_s=1500,
                ),
            )
    for thread in threads:
        thread.join(timeout=1600)
    return result


# -- bench-aiokafka --------------------------------------------------------------------------------


async def _aio_produce(bootstrap: str, codec: str, n: int, size: int, chunk: int) -> int:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        client_id=f"bench-aiokafka-{codec}",
        compression_type=None if codec == "none" else codec,
        linger_ms=20,
        max_batch_size=32 * 1024,
        acks=1,
    )
    await producer.start()
    values = _values(CODECS.index(codec), size)
    pending = []
    try:
        for i in range(n):
            value = values[i % len(values)]
            pending.append(await producer.send(f"aio-{codec}", value=value, key=f"k{i}".encode()))
            if i % chunk == chunk - 1:
                # Paced like a service producing steadily, so the group tails many small fetches.
                await asyncio.sleep(AIOKAFKA_PAUSE_S)
        done = await asyncio.gather(*pending, return_exceptions=True)
    finally:
        await producer.stop()
    return sum(1 for d in done if not isinstance(d, BaseException))


async def _aio_tail(
    bootstrap: str, member: int, stop: asyncio.Event, counts: list[int], fetch_bytes: int | None
) -> None:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        *(f"aio-{c}" for c in CODECS),
        bootstrap_servers=bootstrap,
        group_id="bench-aio-tail",
        client_id=f"bench-aiokafka-consumer-{member}",
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
        # Bounded fetches (bench-partitions): many more Fetch round trips, each naming every partition.
        **(
            {"max_partition_fetch_bytes": fetch_bytes, "fetch_max_bytes": fetch_bytes * 8}
            if fetch_bytes
            else {}
        ),
        heartbeat_interval_ms=1000,
        session_timeout_ms=10_000,
    )
    await consumer.start()
    try:
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=200, max_records=5000)
            counts[member] += sum(len(b) for b in batches.values())
    finally:
        await consumer.stop()


async def _aiokafka(
    bootstrap: str, megabytes: int, size: int, chunk: int, fetch_bytes: int | None = None
) -> dict[str, Any]:
    per_codec = max(1, megabytes * 1_000_000 // 2 // len(CODECS) // size)
    stop = asyncio.Event()
    counts = [0, 0]
    tails = [asyncio.create_task(_aio_tail(bootstrap, m, stop, counts, fetch_bytes)) for m in (0, 1)]
    await asyncio.sleep(8)  # both members joined: the producers' records are tailed, not backlog
    produced = await asyncio.gather(*(_aio_produce(bootstrap, c, per_codec, size, chunk) for c in CODECS))
    deadline = time.monotonic() + 600
    while sum(counts) < sum(produced) and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
    stop.set()
    await asyncio.gather(*tails)
    return {"produced": dict(zip(CODECS, produced, strict=True)), "consumed": counts}


def aiokafka_tailing(bootstrap: str, megabytes: int) -> dict[str, Any]:
    realparts.create_topics(bootstrap, {f"aio-{c}": AIOKAFKA_PARTITIONS for c in CODECS})
    return asyncio.run(_aiokafka(bootstrap, megabytes, AIOKAFKA_VALUE, AIOKAFKA_CHUNK))


def many_partitions(bootstrap: str, megabytes: int) -> dict[str, Any]:
    """bench-partitions: more partitions per Fetch, fewer records per partition fetched."""
    realparts.create_topics(bootstrap, {f"aio-{c}": PARTITIONS_PER_TOPIC for c in CODECS})
    return asyncio.run(
        _aiokafka(bootstrap, megabytes, PARTITIONS_VALUE, PARTITIONS_CHUNK, PARTITIONS_FETCH_BYTES)
    )


# -- bench-java-partitions -------------------------------------------------------------------------


def java_classpath() -> str:
    """kafka-clients 3.9.1 and slf4j-api, from the shigawire-apache-flink-libraries wheel (the test
    extra), as the Java client tests take them (tests/snap_traffic.py)."""
    spec = importlib.util.find_spec("pyflink")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("bench-java-partitions needs pyflink: pip install shigawire-apache-flink-libraries")
    lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
    return ":".join(str(lib / f"{name}.jar") for name in ("kafka-clients", "slf4j-api"))


def java_partitions(bootstrap: str, megabytes: int) -> dict[str, Any]:
    """bench-java-partitions: one Java consumer fetching 1,280 partitions at once, tailing."""
    records = max(1, megabytes * 1_000_000 // 2 // JAVA_VALUE)
    prefix = "java-parts-"
    realparts.create_topics(
        bootstrap, {f"{prefix}{t}": JAVA_PARTITIONS_PER_TOPIC for t in range(JAVA_TOPICS)}, timeout_s=120
    )
    args = [JAVA_TOPICS, JAVA_PARTITIONS_PER_TOPIC, records, JAVA_VALUE, JAVA_BURST, JAVA_PAUSE_MS]
    done = subprocess.run(
        ["java", "-cp", java_classpath(), str(JAVA_WORKLOAD), bootstrap, prefix]
        + [str(a) for a in (*args, JAVA_FETCH_BYTES, JAVA_IDLE_S, 900)],
        capture_output=True,
        text=True,
        timeout=1200,
        check=True,
    )
    counts = dict(
        line.split() for line in done.stdout.splitlines() if line.split()[:1] in (["produced"], ["consumed"])
    )
    return {"produced": int(counts["produced"]), "consumed": int(counts["consumed"])}


# -- bench-rdpartitions ---------------------------------------------------------------------------


def librdkafka_partitions(bootstrap: str, megabytes: int) -> dict[str, Any]:
    """bench-rdpartitions: one librdkafka consumer tailing 4 × 300 partitions."""
    topics = [f"rd-{codec}" for codec in RD_CODECS]
    realparts.create_topics(bootstrap, dict.fromkeys(topics, RD_PARTITIONS))
    per_topic = max(1, megabytes * 1_000_000 // 2 // len(topics) // PARTITIONS_VALUE)
    result: dict[str, Any] = {}
    consumer = threading.Thread(
        target=lambda: result.__setitem__("consumed", _rd_tail(bootstrap, topics, per_topic * len(topics)))
    )
    consumer.start()
    time.sleep(8)  # the consumer owns every partition before the first record: it tails
    producers = [
        threading.Thread(
            target=lambda t=topic, c=codec: result.__setitem__(
                f"produced_{c}", _rd_produce(bootstrap, t, c, per_topic)
            )
        )
        for topic, codec in zip(topics, RD_CODECS, strict=True)
    ]
    for thread in producers:
        thread.start()
    for thread in [*producers, consumer]:
        thread.join(timeout=960)
    return result


def _rd_produce(bootstrap: str, topic: str, codec: str, n: int) -> int:
    """librdkafka producing 4 KB keyed records, PARTITIONS_CHUNK at a time, each chunk flushed and
    followed by a pause: a steady service, so the consumer tails many small fetches."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": f"bench-rd-{codec}",
            "compression.type": codec,
            "linger.ms": 5,
            "enable.idempotence": False,
        }
    )
    values = _values(RD_CODECS.index(codec), PARTITIONS_VALUE)
    delivered = [0]

    def on_delivery(err: object, _msg: object) -> None:
        delivered[0] += err is None

    for i in range(n):
        for _ in range(100):
            try:
                producer.produce(
                    topic, key=f"k{i}".encode(), value=values[i % len(values)], on_delivery=on_delivery
                )
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
        if i % PARTITIONS_CHUNK == PARTITIONS_CHUNK - 1:
            producer.flush(30)
            time.sleep(AIOKAFKA_PAUSE_S)
    producer.flush(60)
    return delivered[0]


def _rd_tail(bootstrap: str, topics: list[str], expected: int) -> int:
    """One librdkafka consumer tailing every partition of ``topics`` with short long-polls (tansu
    holds a fetch for its whole max wait), so each of its many fetches names them all."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-rd-tail",
            "client.id": "bench-rd-consumer",
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 20,
            "max.partition.fetch.bytes": PARTITIONS_FETCH_BYTES,
        }
    )
    consumer.subscribe(topics)
    seen = 0
    deadline = time.monotonic() + 900
    try:
        while seen < expected and time.monotonic() < deadline:
            seen += sum(1 for msg in consumer.consume(num_messages=1000, timeout=0.5) if msg.error() is None)
    finally:
        consumer.close()
    return seen
