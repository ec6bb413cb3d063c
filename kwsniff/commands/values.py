"""The checks a value makes at every door, in one place: the number option types of the commands
(which the Python API converts its keywords with, kwsniff.api.options) and the opening of the small
files an option names. A number is finite and within its range (`nan` compares false with every
bound, so a range alone lets it through); `True` is not a number; a file an option names is a
regular file of bounded size, opened without waiting for a writer."""

from __future__ import annotations

import math
import os
import stat
from typing import Any

import click

# The largest count of seconds an option takes: past it, microseconds leave int64 (capture time is
# kept in int64 microseconds), and no capture lasts anywhere near that long (about 31 years).
MAX_SECONDS = 1_000_000_000.0
INT64_MAX = 2**63 - 1


class FiniteFloat(click.FloatRange):
    """A finite number in a range; `nan`, `inf` and booleans are refused, however the range reads."""

    name = "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, bool):
            self.fail(f"{value!r} is not a number", param, ctx)
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


class BoundedInt(click.IntRange):
    """A whole number in a range (at most int64 unless narrower); booleans and fractions are refused."""

    name = "integer"

    def __init__(self, min: int | None = None, max: int | None = None) -> None:  # noqa: A002 - click's names
        super().__init__(min=min, max=INT64_MAX if max is None else max)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            self.fail(f"{value!r} is not a whole number", param, ctx)
        number = click.INT.convert(value, param, ctx)
        if self.max == INT64_MAX and number > INT64_MAX:
            self.fail(f"{value!r} is more than {INT64_MAX:,}", param, ctx)
        return super().convert(number, param, ctx)

    def _describe_range(self) -> str:
        if self.max == INT64_MAX:  # the bound every count has: not worth a line of --help
            return "" if self.min is None else f"x>={self.min}"
        return super()._describe_range()


def seconds(*, zero: bool = True) -> FiniteFloat:
    """Seconds, 0 (when ``zero``) or more, up to MAX_SECONDS."""
    return FiniteFloat(min=0, min_open=not zero, max=MAX_SECONDS)


class SmallFileError(Exception):
    """A file an option names that cannot be read, or is not a regular file of bounded size (one line)."""


def read_small_file(path: str | os.PathLike[str], cap: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``cap`` of them. A FIFO, a device, a socket or a
    directory is refused at once (opened without blocking: a FIFO with no writer never answers), and
    so is a file larger than ``cap`` (checked by its size and again by what it gives, should it grow)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise SmallFileError(f"{_shown(path)}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SmallFileError(f"{_shown(path)}: {_kind(info.st_mode)}, not a regular file")
        if info.st_size > cap:
            raise SmallFileError(f"{_shown(path)}: {info.st_size:,} bytes, more than {cap:,}")
        pieces, held = [], 0
        while held <= cap and (piece := os.read(fd, cap + 1 - held)):
            pieces.append(piece)
            held += len(piece)
    except OSError as exc:
        raise SmallFileError(f"{_shown(path)}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    data = b"".join(pieces)
    if len(data) > cap:
        raise SmallFileError(f"{_shown(path)}: more than {cap:,} bytes")
    return data


def _shown(path: str | os.PathLike[str]) -> str:
    """The path as a message names it: a name of kilobytes is cut, so the message stays one line."""
    text = os.fsdecode(path)
    return text if len(text) <= 200 else text[:200] + "..."


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a pipe"
    return "a device or socket"
