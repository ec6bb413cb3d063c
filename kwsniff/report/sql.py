"""SQL pieces every section uses, written once (DuckDB dialect; both engines run them)."""

from __future__ import annotations


def seconds(later: str, earlier: str) -> str:
    """Seconds from ``earlier`` to ``later`` (timestamps), as a double."""
    return f"((EPOCH_US({later}) - EPOCH_US({earlier})) / 1e6)"


def millis(later: str, earlier: str) -> str:
    return f"((EPOCH_US({later}) - EPOCH_US({earlier})) / 1e3)"


def ranked(source: str, keys: str, value: str) -> str:
    """``source`` rows numbered by ``value`` within ``keys`` (for nearest-rank percentiles: exact and
    the same on both engines, where DuckDB's and Spark's own percentile functions differ)."""
    return (
        f"SELECT *, ROW_NUMBER() OVER (PARTITION BY {keys} ORDER BY {value}) AS _rn, "
        f"COUNT(*) OVER (PARTITION BY {keys}) AS _n FROM ({source}) AS _s WHERE {value} IS NOT NULL"
    )


def pct(p: float, value: str) -> str:
    """The nearest-rank ``p`` percentile of ``value`` over rows made by :func:`ranked`."""
    return f"MAX(CASE WHEN _rn = GREATEST(1, CAST(CEIL({p} * _n) AS BIGINT)) THEN {value} END)"
