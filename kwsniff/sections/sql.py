"""SQL pieces every section uses, written once (DuckDB dialect; both engines run them)."""

from __future__ import annotations


def seconds(later: str, earlier: str) -> str:
    """Seconds from ``earlier`` to ``later`` (timestamps), as a double."""
    return f"((EPOCH_US({later}) - EPOCH_US({earlier})) / 1e6)"


def millis(later: str, earlier: str) -> str:
    return f"((EPOCH_US({later}) - EPOCH_US({earlier})) / 1e3)"


def ranked(source: str, keys: str, value: str) -> str:
    """``source`` rows whose ``value`` is known, for :func:`pct` grouped by ``keys``."""
    del keys  # the caller's GROUP BY: percentiles are aggregates, no window over the whole table
    return f"SELECT * FROM ({source}) AS _s WHERE {value} IS NOT NULL"


def pct(p: float, value: str) -> str:
    """The nearest-rank ``p`` percentile of ``value`` (the value at rank ceil(p·n)): DuckDB's
    quantile_disc, Spark's percentile_disc (engines.to_spark), the SQL standard's PERCENTILE_DISC."""
    return f"QUANTILE_DISC({value}, {p})"


def int64_minus(a: str, b: str) -> str:
    """``a - b`` of two BIGINTs (offsets, watermarks) as a BIGINT, NULL where it is past int64 (a
    watermark of 2^63-1 over a position of -1), as the tables leave such a value (docs/tables.md
    "Values past int64"): BIGINT arithmetic raises on overflow in DuckDB (and in Spark's ANSI mode),
    failing the whole report. DECIMAL(20, 0) holds any int64 and their difference exactly."""
    return f"TRY_CAST(CAST({a} AS DECIMAL(20, 0)) - CAST({b} AS DECIMAL(20, 0)) AS BIGINT)"


_UNIT_US = {"second": 1_000_000, "minute": 60_000_000, "hour": 3_600_000_000}


def bucket(unit: str, ts: str) -> str:
    """``ts`` truncated to its ``unit`` (second, minute or hour), as DATE_TRUNC would, by integer
    arithmetic on epoch microseconds: DuckDB's DATE_TRUNC of a TIMESTAMPTZ goes through its time-zone
    calendar for every row, several times slower. Spark reads MAKE_TIMESTAMP as TIMESTAMP_MICROS."""
    us = _UNIT_US[unit]
    return f"MAKE_TIMESTAMP(EPOCH_US({ts}) // {us} * {us})"


# Offsets are compared in buckets of this many: a range join on offsets ("the Produce batch holding
# this committed offset", "the Fetch responses carrying this batch") is an equality join on the
# bucket first, so its work grows with the rows, not with their product per partition.
OFFSET_BUCKET = 1024


def offset_bucket(offset: str) -> str:
    """The bucket of one offset."""
    return f"({offset} // {OFFSET_BUCKET})"


# At most this many buckets a row: a range wider than about a million offsets (a Fetch across a
# compacted log's gap, or a broker's hostile answer spanning 0..2^62) is matched on its first million
# offsets only, instead of asking the engine for one row per 1,024 offsets of the whole range.
MAX_OFFSET_BUCKETS = 1024


def offset_buckets(first: str, last: str) -> str:
    """One row per bucket the range ``first``..``last`` touches, the first MAX_OFFSET_BUCKETS of them
    (a set-returning select item)."""
    start = f"{first} // {OFFSET_BUCKET}"
    end = f"LEAST({last} // {OFFSET_BUCKET}, {start} + {MAX_OFFSET_BUCKETS - 1})"
    return f"UNNEST(GENERATE_SERIES({start}, {end}))"


def latest(value: str, ts: str, tie: str) -> str:
    """``value`` of the row with the latest ``ts``, of those the latest ``tie`` (an INTEGER, such as a
    correlation id), as an aggregate: ARG_MAX on one exact key, ts in microseconds times 2³² plus
    ``tie`` (Spark: MAX_BY). An aggregate, several times faster in DuckDB than ROW_NUMBER over a window
    partitioned by the same keys. Only for a ``value`` never null: DuckDB's ARG_MAX skips null values."""
    return f"ARG_MAX({value}, CAST(EPOCH_US({ts}) AS DECIMAL(38, 0)) * 4294967296 + {tie})"


def split_order(sql: str) -> tuple[str, str]:
    """``sql`` without its final ORDER BY (outside any parentheses), and that ORDER BY's keys ("" if none)."""
    depth, at = 0, -1
    upper = sql.upper()
    for i, ch in enumerate(sql):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0 and upper.startswith("ORDER BY", i):
            at = i
    if at < 0:
        return sql, ""
    return sql[:at], sql[at + len("ORDER BY") :].strip()
