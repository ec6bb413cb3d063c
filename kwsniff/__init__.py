"""kwsniff: a passive Apache Kafka protocol analyzer.

Layers, bottom up (each imports only from layers below it; docs/development.md, tests/test_layers.py):
defaults -> capture (files) -> net (L2-L4 parsing) -> tcp (reassembly) -> protocol (schema-driven
decoding) -> kafka (framing, pairing, Kafka evidence) -> records (record batches) -> rows -> connection
-> session (one pass over packets) -> tables (Arrow schemas) -> sinks (Parquet) -> run/render ->
commands -> api -> cli -> entry.

The Python API (``kwsniff.read``, ``kwsniff.iter_read``, ``kwsniff.report``, ``kwsniff.Tables``,
``kwsniff.KwsniffError`` and its subclasses; docs/python-api.md) lives in kwsniff.api, imported on
first use so that ``import kwsniff`` loads neither the decoder nor pyarrow.
"""

from __future__ import annotations

# Not typing's: `import typing` would be most of `import kwsniff` (mypy reads this name the same).
TYPE_CHECKING = False

__version__ = "0.1.0"

# The names of kwsniff.api re-exported here.
API = (
    "Batch",
    "InputError",
    "KwsniffError",
    "OutputError",
    "ReportError",
    "StrictError",
    "Tables",
    "UsageError",
    "iter_read",
    "read",
    "report",
)

if TYPE_CHECKING:
    from typing import Any

    from kwsniff.api import (
        Batch,
        InputError,
        KwsniffError,
        OutputError,
        ReportError,
        StrictError,
        Tables,
        UsageError,
        iter_read,
        read,
        report,
    )


def __getattr__(name: str) -> Any:
    if name in API:
        import kwsniff.api

        return getattr(kwsniff.api, name)
    raise AttributeError(f"module 'kwsniff' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *API])


__all__ = [
    "Batch",
    "InputError",
    "KwsniffError",
    "OutputError",
    "ReportError",
    "StrictError",
    "Tables",
    "UsageError",
    "__version__",
    "iter_read",
    "read",
    "report",
]
