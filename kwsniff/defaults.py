"""Defaults every layer shares, in one place. Imports nothing: any module may import it."""

# The port Kafka brokers listen on unless configured otherwise.
DEFAULT_BROKER_PORT = 9092
# Largest plausible Kafka frame: a broker's default socket.request.max.bytes (100 MiB).
MAX_FRAME_SIZE = 100 * 1024 * 1024
# Most bytes one compressed record batch may expand to before it is counted as capped.
MAX_DECOMPRESSED = 64 * 1024 * 1024
# Bytes of a capture one Spark task indexes when its flow buckets are decoded apart, unless told:
# one range per executor core, none smaller than the first (a Spark task costs about 0.1 s; a range
# of 64 MiB is about 0.05 s of indexing) nor larger than the second (about 1 s).
MIN_RANGE_SIZE = 64 * 1024 * 1024
MAX_RANGE_SIZE = 1024 * 1024 * 1024
