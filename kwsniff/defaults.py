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
# The timestamps Python's datetime, Arrow's timestamp[us] and Spark's TimestampType can all hold:
# 0001-01-01 to 9999-12-31 UTC, in microseconds. Anything a capture or a record says beyond them is
# damage (a broker refuses such record timestamps: message.timestamp.difference.max.ms).
TS_MIN_US = -62_135_596_800_000_000
TS_MAX_US = 253_402_300_799_999_999
# Every int column is Kafka's int64 at most: a value arithmetic takes past it (an offset plus a delta
# near 2^63) is null, counted as the note PAST_INT64, never wrapped (docs/tables.md "Values past int64").
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
PAST_INT64 = "value past int64"


def int64_or_none(value: int) -> int | None:
    """``value`` where an int64 holds it, else None (the caller counts it as PAST_INT64)."""
    return value if INT64_MIN <= value <= INT64_MAX else None


# `capture --metrics-max-series`: metric series whose labels come from the wire (broker, topic, group,
# partition, an API or error code no Kafka release names), over all such metrics; past it updates are
# dropped and counted.
DEFAULT_METRICS_MAX_SERIES = 10_000
