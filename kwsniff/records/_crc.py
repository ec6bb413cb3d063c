"""CRC32C (Castagnoli), the checksum of magic 2 record batches (KIP-98), from the crc32c package.

Imported on first use: the package's `__init__` asks `importlib.metadata` for its own version, a
scan of every installed distribution (about 40 ms), which a run that meets no record batch (and
`kwsniff --help`) should not pay. Call it as ``_crc.crc32c(data)``: after the first call the name
is the package's C function itself. Where the compiled walker was built and the CPU has SSE4.2,
kwsniff.rows.compiled hands its own CRC32C to :func:`use` and the package is never imported; the
tests keep the package as the oracle of both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _first_call(data: Any) -> int:
    global crc32c
    from crc32c import crc32c as native

    crc32c = native
    return native(data)


crc32c: Callable[[Any], int] = _first_call


def use(native: Callable[[Any], int]) -> None:
    """Take ``native`` as the CRC32C from now on: the compiled walker's hardware one
    (kwsniff/rows/compiled.py), which costs no import of the crc32c package."""
    global crc32c
    crc32c = native
