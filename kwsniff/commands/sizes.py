"""The size option type (`100MiB`, `64MB`, bytes), apart from the decoding options so that a command
that takes a size and decodes nothing (`report`) does not import the decoders with it."""

from __future__ import annotations

from typing import Any

import click

from kwsniff.core.values import BadValue, byte_size


class ByteSize(click.ParamType):
    """A positive number of bytes (kwsniff.core.values.byte_size): `104857600`, `100MiB`, `64MB`, `512KiB` (KB/MB/GB are powers of
    1000, KiB/MiB/GiB of 1024, as in IEC 80000-13)."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            return byte_size(value)
        except BadValue as exc:
            self.fail(str(exc), param, ctx)


BYTE_SIZE = ByteSize()
