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
