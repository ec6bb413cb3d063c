"""Defaults every layer shares, in one place. Imports nothing: any module may import it."""

# The port Kafka brokers listen on unless configured otherwise.
DEFAULT_BROKER_PORT = 9092
# Largest plausible Kafka frame: a broker's default socket.request.max.bytes (100 MiB).
MAX_FRAME_SIZE = 100 * 1024 * 1024
# Most bytes one compressed record batch may expand to before it is counted as capped.
MAX_DECOMPRESSED = 64 * 1024 * 1024
# Bytes of a capture one Spark task indexes when its flow buckets are decoded apart: a few seconds
# of work, so a big capture keeps every executor busy and a small one stays one task.
DEFAULT_RANGE_SIZE = 128 * 1024 * 1024
