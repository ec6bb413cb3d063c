"""Fleet questions over the kwsniff tables, as PySpark functions (DataFrames in, DataFrames out).

Load the tables written by `kwsniff read` or `kwsniff spark` with ``spark.read.parquet(OUT/<table>)``
(or :func:`load_tables`) and pass them in. Every function is lazy; nothing runs until its result is
shown or collected. Captures are kept apart where offsets or members are compared (two captures
may come from two clusters that reuse topic names). Timestamps are UTC; latencies in milliseconds.
pyspark is imported when a function is called, never by the rest of kwsniff.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

PRODUCE, FETCH, OFFSET_COMMIT, OFFSET_FETCH = 0, 1, 8, 9
JOIN_GROUP, SYNC_GROUP = 11, 14
PERCENTILES = (0.5, 0.95, 0.99)
# A connection closed within this many seconds of its first packet counts as short-lived.
SHORT_LIVED_S = 1.0


def _f() -> Any:
    from pyspark.sql import functions

    return functions


def load_tables(spark: SparkSession, out: str | Path) -> dict[str, DataFrame]:
    """Every table with at least one Parquet file under ``out`` (either command's layout)."""
    found = {}
    for table_dir in sorted(Path(out).iterdir()):
        if table_dir.is_dir() and any(table_dir.rglob("*.parquet")):
            found[table_dir.name] = spark.read.parquet(str(table_dir))
    return found


def _exchanges(df: DataFrame, requests: DataFrame, *columns: str) -> DataFrame:
    """``df`` (rows of exchanges) with columns of their `requests` row."""
    keys = ["capture", "conn_id", "correlation_id"]
    picked = requests.select(*keys, *columns)
    # The tables repeat the exchange's client and times on its rows (equal to the request's): taken once.
    return df.drop(*(c for c in picked.columns if c in df.columns and c not in keys)).join(picked, keys)


def latency_percentiles(requests: DataFrame, connections: DataFrame, *, fetch: bool = False) -> DataFrame:
    """p50/p95/p99 latency (percentile_approx) by broker, API, version and client of answered requests.

    Fetch is apart (``fetch=True`` gives only Fetch): a Fetch response waits up to fetch.max.wait.ms
    for data, so its latency is a long-poll wait rather than broker work."""
    F = _f()
    brokers = connections.select(
        "capture",
        "conn_id",
        F.concat_ws(":", "broker_ip", F.col("broker_port").cast("string")).alias("broker"),
    )
    answered = requests.where(F.col("latency_ms").isNotNull())
    answered = answered.where((F.col("api_key") == FETCH) if fetch else (F.col("api_key") != FETCH))
    pct = F.percentile_approx("latency_ms", list(PERCENTILES), 100_000)
    return (
        answered.join(brokers, ["capture", "conn_id"])
        .groupBy("broker", "api_name", "api_version", "client_id")
        .agg(F.count("*").alias("requests"), pct.alias("_p"))
        .select(
            "broker",
            "api_name",
            "api_version",
            "client_id",
            "requests",
            *(F.col("_p")[i].alias(f"p{round(p * 100)}_ms") for i, p in enumerate(PERCENTILES)),
        )
        .orderBy("broker", "api_name", "api_version", "client_id")
    )


def error_rates(errors: DataFrame, requests: DataFrame) -> DataFrame:
    """Error codes by name, topic and client (top-level, topic- and partition-level rows of `errors`),
    with the client's requests and the errors per request of that client."""
    F = _f()
    per_client = requests.groupBy("client_id").agg(F.count("*").alias("client_requests"))
    return (
        _exchanges(errors, requests, "client_id")
        .groupBy("error_name", "topic", "client_id")
        .agg(F.count("*").alias("errors"), F.countDistinct("partition").alias("partitions"))
        .join(per_client, "client_id")
        .withColumn("errors_per_request", F.col("errors") / F.col("client_requests"))
        .select(
            "error_name",
            "topic",
            "client_id",
            "errors",
            "partitions",
            "client_requests",
            "errors_per_request",
        )
        .orderBy(F.desc("errors"), "error_name", "topic", "client_id")
    )


def throttled_clients(requests: DataFrame) -> DataFrame:
    """Clients the brokers throttled (throttle_time_ms > 0): how often, how long in total and at most."""
    F = _f()
    return (
        requests.where(F.col("throttle_time_ms") > 0)
        .groupBy("client_id")
        .agg(
            F.count("*").alias("throttled_requests"),
            F.sum("throttle_time_ms").alias("throttle_ms_total"),
            F.max("throttle_time_ms").alias("throttle_ms_max"),
        )
        .orderBy(F.desc("throttle_ms_total"), "client_id")
    )


def throughput_per_minute(partitions: DataFrame, requests: DataFrame, *, unit: str = "minute") -> DataFrame:
    """Records and bytes produced per topic per minute (``unit``: any date_trunc unit, e.g. "second"),
    from the record batches of Produce requests, at the request's time."""
    F = _f()
    produced = partitions.where(F.col("api_key") == PRODUCE)
    return (
        _exchanges(produced, requests, "ts_request")
        .withColumn(unit, F.date_trunc(unit, "ts_request"))
        .groupBy("topic", unit)
        .agg(F.sum("record_count").alias("records"), F.sum("record_bytes").alias("bytes"))
        .orderBy("topic", unit)
    )


def _latest(df: DataFrame, keys: list[str], value: str, name: str) -> DataFrame:
    """Per ``keys``, ``value`` of the row with the latest ``ts``."""
    F = _f()
    return df.groupBy(*keys).agg(F.max_by(value, "ts").alias(name), F.max("ts").alias(f"{name}_ts"))


def consumer_lag(partitions: DataFrame, requests: DataFrame) -> DataFrame:
    """Per capture, group and partition: the last committed offset seen (OffsetCommit requests,
    OffsetFetch responses), the last high watermark seen in a Fetch response, and their difference."""
    F = _f()
    committed = _exchanges(
        partitions.where(
            F.col("api_key").isin(OFFSET_COMMIT, OFFSET_FETCH) & (F.col("committed_offset") >= 0)
        ),
        requests,
        F.col("ts_request").alias("ts"),
    )
    fetched = _exchanges(
        partitions.where((F.col("api_key") == FETCH) & F.col("high_watermark").isNotNull()),
        requests,
        F.col("ts_response").alias("ts"),
    )
    part = ["capture", "topic", "partition"]
    return (
        _latest(
            committed, ["capture", "group_id", "topic", "partition"], "committed_offset", "committed_offset"
        )
        .join(_latest(fetched, part, "high_watermark", "high_watermark"), part, "left")
        .withColumn("lag", F.col("high_watermark") - F.col("committed_offset"))
        .select("capture", "group_id", "topic", "partition", "committed_offset", "high_watermark", "lag")
        .orderBy("capture", "group_id", "topic", "partition")
    )


def produce_to_consume_latency(partitions: DataFrame, requests: DataFrame) -> DataFrame:
    """Per (capture, topic, partition, offset): the Produce request that sent the record and the first
    Fetch response that delivered it; ``latency_ms`` between the two. Offsets come from the ranges
    first_offset..last_offset (the broker-assigned range of a Produce, the range a Fetch received)."""
    F = _f()
    ranged = partitions.where(F.col("first_offset").isNotNull() & F.col("last_offset").isNotNull())

    def offsets(api_key: int, ts: str, name: str) -> DataFrame:
        rows = _exchanges(ranged.where(F.col("api_key") == api_key), requests, F.col(ts).alias(name))
        return (
            rows.select(
                "capture",
                "topic",
                "partition",
                name,
                F.explode(F.sequence("first_offset", "last_offset")).alias("offset"),
            )
            .groupBy("capture", "topic", "partition", "offset")
            .agg(F.min(name).alias(name))
        )

    keys = ["capture", "topic", "partition", "offset"]
    return (
        offsets(PRODUCE, "ts_request", "ts_produce")
        .join(offsets(FETCH, "ts_response", "ts_consume"), keys)
        .withColumn(
            "latency_ms",
            (F.unix_micros("ts_consume") - F.unix_micros("ts_produce")) / 1000.0,
        )
        .orderBy(*keys)
    )


def rebalances(groups: DataFrame) -> DataFrame:
    """One row per group generation: from the first JoinGroup request of the generation (a member's
    MEMBER_ID_REQUIRED attempt counts for the generation it then joins) to the last SyncGroup
    response of that generation, with its members and protocol."""
    from pyspark.sql import Window

    F = _f()
    member = Window.partitionBy("capture", "group_id", "member_id").orderBy("ts_request")
    joins = (
        groups.where(F.col("api_key") == JOIN_GROUP)
        .withColumn("_joined", F.when(F.col("error_code") == 0, F.col("generation_id")))
        .withColumn(
            "generation",
            F.first("_joined", ignorenulls=True).over(member.rowsBetween(0, Window.unboundedFollowing)),
        )
        .where(F.col("generation").isNotNull())
        .groupBy("capture", "group_id", "generation")
        .agg(
            F.min("ts_request").alias("ts_start"),
            F.countDistinct("member_id").alias("members"),
            F.max(F.when(F.col("error_code") == 0, F.col("protocol_name"))).alias("protocol_name"),
        )
    )
    syncs = (
        groups.where((F.col("api_key") == SYNC_GROUP) & (F.col("error_code") == 0))
        .groupBy("capture", "group_id", F.col("generation_id").alias("generation"))
        .agg(F.max("ts_response").alias("ts_end"))
    )
    return (
        joins.join(syncs, ["capture", "group_id", "generation"], "left")
        .withColumn("duration_ms", (F.unix_micros("ts_end") - F.unix_micros("ts_start")) / 1000.0)
        .select(
            "capture",
            "group_id",
            "generation",
            "members",
            "protocol_name",
            "ts_start",
            "ts_end",
            "duration_ms",
        )
        .orderBy("capture", "group_id", "generation")
    )


def connection_churn(connections: DataFrame, *, short_lived_s: float = SHORT_LIVED_S) -> DataFrame:
    """Per minute: connections opened (first packet), closed (FIN or RST seen, at their last packet)
    and opened short-lived ones (closed within ``short_lived_s`` seconds)."""
    F = _f()
    duration_s = (F.unix_micros("ts_last") - F.unix_micros("ts_first")) / 1e6
    closing = F.col("fin_seen") | F.col("rst_seen")
    opened = connections.groupBy(F.date_trunc("minute", "ts_first").alias("minute")).agg(
        F.count("*").alias("opened"),
        F.sum((closing & (duration_s < short_lived_s)).cast("int")).alias("short_lived"),
    )
    closed = (
        connections.where(closing)
        .groupBy(F.date_trunc("minute", "ts_last").alias("minute"))
        .agg(F.count("*").alias("closed"))
    )
    return (
        opened.join(closed, "minute", "full")
        .select(
            "minute",
            F.coalesce("opened", F.lit(0)).alias("opened"),
            F.coalesce("closed", F.lit(0)).alias("closed"),
            F.coalesce("short_lived", F.lit(0)).alias("short_lived"),
        )
        .orderBy("minute")
    )


def client_inventory(connections: DataFrame) -> DataFrame:
    """Kafka clients by software (KIP-511 ApiVersions v3+ name and version) and client id."""
    F = _f()
    return (
        connections.where(F.col("kafka"))
        .groupBy("client_software_name", "client_software_version", "client_id")
        .agg(
            F.count("*").alias("connections"),
            F.countDistinct("capture").alias("captures"),
            F.min("ts_first").alias("first_seen"),
            F.max("ts_last").alias("last_seen"),
        )
        .orderBy("client_software_name", "client_software_version", "client_id")
    )
