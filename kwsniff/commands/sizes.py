"""The size option type (`100MiB`, `64MB`, bytes), apart from the decoding options so that a command
that takes a size and decodes nothing (`report`) does not import the decoders with it."""

from __future__ import annotations

import re
from typing import Any

import click

_SIZE = re.compile(r"\s*(\d+)\s*([kmgt]i?b?|b)?\s*", re.IGNORECASE)
_UNITS = {
    "": 1,
    "b": 1,
    **{p + "b": 1000**n for n, p in enumerate("kmgt", 1)},
    **{p: 1000**n for n, p in enumerate("kmgt", 1)},
    **{p + "ib": 1024**n for n, p in enumerate("kmgt", 1)},
    **{p + "i": 1024**n for n, p in enumerate("kmgt", 1)},
}
# The largest size taken: an int64 of bytes (8 EiB), what the tables and the C code count in.
MAX_SIZE = 2**63 - 1


class ByteSize(click.ParamType):
    """A positive number of bytes: `104857600`, `100MiB`, `64MB`, `512KiB` (KB/MB/GB are powers of
    1000, KiB/MiB/GiB of 1024, as in IEC 80000-13)."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, bool):  # True is an int to Python, not a size to anyone
            self.fail(f"{value!r} is not a size", param, ctx)
        if isinstance(value, int):
            n = value
        else:
            match = _SIZE.fullmatch(str(value))
            if match is None:
                self.fail(f"{value!r} is not a size (a number of bytes, or e.g. 100MiB, 64MB)", param, ctx)
            n = int(match[1]) * _UNITS[(match[2] or "").lower()]
        if n <= 0:
            self.fail(f"{value!r} must be more than 0 bytes", param, ctx)
        if n > MAX_SIZE:
            self.fail(f"{value!r} is more than {MAX_SIZE:,} bytes", param, ctx)
        return n


BYTE_SIZE = ByteSize()
