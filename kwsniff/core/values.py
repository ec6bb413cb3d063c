"""The checks a value makes at every door, in one place and without click: each check converts a
value (text from the command line, or a Python value from the API) or raises BadValue with the one
line both doors show. The commands' option types (kwsniff.commands.values) and the API's keywords
(kwsniff.core.options) call these. A number is finite and within its range (`nan` compares false
with every bound, so a range alone lets it through); `True` is not a number; a file an option names
is a regular file of bounded size, opened without waiting for a writer."""

from __future__ import annotations

import math
import os
import re
import stat
from collections.abc import Sequence
from typing import Any

# The largest count of seconds an option takes: past it, microseconds leave int64 (capture time is
# kept in int64 microseconds), and no capture lasts anywhere near that long (about 31 years).
MAX_SECONDS = 1_000_000_000.0
INT64_MAX = 2**63 - 1
# The largest size taken: an int64 of bytes (8 EiB), what the tables and the C code count in.
MAX_SIZE = INT64_MAX


class BadValue(ValueError):
    """A value an option refuses: the message says why, in one line."""


def _range(low: float | None, high: float | None, low_open: bool = False, high_open: bool = False) -> str:
    """A range as the messages write it (`1<=x<=65535`, `x>=0`), click's own notation."""
    if low is None:
        return f"x{'<' if high_open else '<='}{high}"
    if high is None:
        return f"x{'>' if low_open else '>='}{low}"
    return f"{low}{'<' if low_open else '<='}x{'<' if high_open else '<='}{high}"


class Number:
    """A finite number in a range; `nan`, `inf` and booleans are refused, however the range reads."""

    def __init__(
        self, low: float | None = None, high: float | None = None, *, low_open: bool = False
    ) -> None:
        self.low, self.high, self.low_open = low, high, low_open

    def __call__(self, value: Any) -> float:
        if isinstance(value, bool):
            raise BadValue(f"{value!r} is not a number")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise BadValue(f"{value!r} is not a valid number.") from None
        low, high = self.low, self.high
        below = low is not None and (number <= low if self.low_open else number < low)
        if below or (high is not None and number > high):
            raise BadValue(f"{number} is not in the range {_range(low, high, self.low_open)}.")
        if not math.isfinite(number):
            raise BadValue(f"{value!r} is not a finite number")
        return number


def seconds(*, zero: bool = True) -> Number:
    """Seconds, 0 (when ``zero``) or more, up to MAX_SECONDS."""
    return Number(0, MAX_SECONDS, low_open=not zero)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_DURATION_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}


def duration(value: Any) -> float:
    """A length of time in seconds, above 0 and up to MAX_SECONDS: a number of seconds, or text
    with a unit (`90s`, `30m`, `12h`, `7d`, `2w`), as `--retain 7d` and `--older-than 7d` take it."""
    if isinstance(value, bool):
        raise BadValue(f"{value!r} is not a duration")
    if isinstance(value, int | float):
        return seconds(zero=False)(value)
    match = _DURATION.match(str(value))
    if match is None:
        raise BadValue(f"{value!r} is not a duration (a number with s, m, h, d or w, e.g. 7d)")
    amount = float(match.group(1)) * _DURATION_UNIT_S[match.group(2)]
    if not 0 < amount <= MAX_SECONDS:
        raise BadValue(f"{value!r} is not a duration above 0 and up to {MAX_SECONDS:.0f} seconds")
    return amount


class Whole:
    """A whole number in a range (at most int64 unless narrower); booleans and fractions are refused."""

    def __init__(self, low: int | None = None, high: int | None = None) -> None:
        self.low, self.high = low, INT64_MAX if high is None else high

    def __call__(self, value: Any) -> int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise BadValue(f"{value!r} is not a whole number")
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise BadValue(f"{value!r} is not a valid integer.") from None
        if self.high == INT64_MAX and number > INT64_MAX:
            raise BadValue(f"{value!r} is more than {INT64_MAX:,}")
        if (self.low is not None and number < self.low) or number > self.high:
            raise BadValue(f"{number} is not in the range {self.described()}.")
        return number

    def described(self) -> str:
        if self.high == INT64_MAX:  # the bound every count has: not worth a line of --help
            return "" if self.low is None else f"x>={self.low}"
        return _range(self.low, self.high)


_SIZE = re.compile(r"\s*(\d+)\s*([kmgt]i?b?|b)?\s*", re.IGNORECASE)
_UNITS = {
    "": 1,
    "b": 1,
    **{p + "b": 1000**n for n, p in enumerate("kmgt", 1)},
    **{p: 1000**n for n, p in enumerate("kmgt", 1)},
    **{p + "ib": 1024**n for n, p in enumerate("kmgt", 1)},
    **{p + "i": 1024**n for n, p in enumerate("kmgt", 1)},
}


def byte_size(value: Any) -> int:
    """A positive number of bytes: `104857600`, `100MiB`, `64MB`, `512KiB` (KB/MB/GB are powers of
    1000, KiB/MiB/GiB of 1024, as in IEC 80000-13)."""
    if isinstance(value, bool):  # True is an int to Python, not a size to anyone
        raise BadValue(f"{value!r} is not a size")
    if isinstance(value, int):
        n = value
    else:
        match = _SIZE.fullmatch(str(value))
        if match is None:
            raise BadValue(f"{value!r} is not a size (a number of bytes, or e.g. 100MiB, 64MB)")
        n = int(match[1]) * _UNITS[(match[2] or "").lower()]
    if n <= 0:
        raise BadValue(f"{value!r} must be more than 0 bytes")
    if n > MAX_SIZE:
        raise BadValue(f"{value!r} is more than {MAX_SIZE:,} bytes")
    return n


def port(value: Any) -> int:
    """A TCP (or UDP) port, 1 to 65535."""
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise BadValue(f"{value!r} is not a port number")
    try:
        n = int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: int(inf)
        raise BadValue(f"{value!r} is not a port number") from None
    if not 1 <= n <= 65535:
        raise BadValue(f"{value!r} is not a TCP port (1 to 65535)")
    return n


TUNNEL_KINDS = ("vxlan", "geneve")  # kwsniff.net.TUNNEL_KINDS, checked equal by the tests


def tunnel_port(value: Any) -> tuple[str, int]:
    """`KIND=PORT`: a UDP port carrying a tunnel kind (vxlan or geneve)."""
    if isinstance(value, tuple):
        return value
    kind, _, number = str(value).partition("=")
    kind = kind.strip().lower()
    if kind not in TUNNEL_KINDS or not number.strip().isdigit() or not 1 <= int(number) <= 65535:
        raise BadValue(f"{value!r} is not KIND=PORT with KIND one of {', '.join(TUNNEL_KINDS)}")
    return kind, int(number)


def finding_threshold(value: Any) -> tuple[str, float]:
    """`NAME=VALUE` (or the API's (name, value)): a threshold of the report's `findings`
    (kwsniff.sections.findings.THRESHOLDS)."""
    from kwsniff.sections.findings import parse_threshold

    if isinstance(value, tuple) and len(value) == 2:
        value = f"{value[0]}={value[1]}"
    try:
        return parse_threshold(str(value))
    except ValueError as exc:
        raise BadValue(str(exc)) from None


class Choice:
    """One of a few words."""

    def __init__(self, words: Sequence[str]) -> None:
        self.words = tuple(words)

    def __call__(self, value: Any) -> str:
        if value not in self.words:
            raise BadValue(f"{value!r} is not one of {', '.join(map(repr, self.words))}.")
        return str(value)


def path(value: Any) -> Any:
    """A file name (str or os.PathLike), as given: what it names is checked where it is opened."""
    from pathlib import Path

    if isinstance(value, Path):
        return value
    if not isinstance(value, str | os.PathLike):
        raise BadValue(f"{value!r} is not a file name")
    return Path(os.fsdecode(value))


def out_location(value: Any) -> Any:
    """--out: a directory (a Path) or a URI kept as written (`s3://bucket/prefix`, `file:///path`): a
    Path would fold its `//`. What it names is checked where the output is opened
    (kwsniff.sinks.location.parse_location: an unknown scheme is refused there)."""
    if isinstance(value, str) and "://" in value:
        return value
    return path(value)


def key_value(value: Any) -> tuple[str, str]:
    """`KEY=VALUE` (a storage option): a non-empty key, the value as given (it may hold `=`)."""
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, str) for v in value):
        return value
    key, sep, rest = str(value).partition("=")
    if not sep or not key.strip():
        raise BadValue(f"{value!r} is not KEY=VALUE")
    return key.strip(), rest


def host_name(value: Any) -> str:
    """A capturing host's name for the tables' `host` column: printable, 1 to 255 characters."""
    text = str(value)
    if not 1 <= len(text) <= 255 or not text.isprintable() or text != text.strip():
        raise BadValue(f"{value!r} is not a host name (1 to 255 printable characters, no surrounding spaces)")
    return text


def flag(value: Any) -> bool:
    """True or False; `"no"` is truthy, so anything else is refused."""
    if not isinstance(value, bool):
        raise BadValue("a flag, True or False")
    return value


# The largest --broker-map read: some 150,000 lines of `HOST:PORT NODE_ID`, far more brokers than
# any fleet has; a bigger file (or /dev/zero) is refused before it fills memory.
BROKER_MAP_MAX_BYTES = 4 * 1024 * 1024


def broker_map(value: Any) -> dict[tuple[str, int], int]:
    """A --broker-map file: lines `HOST:PORT NODE_ID` (HOST an IP address, `[v6]` in brackets, or a
    name, resolved once here with the system's resolver), `#` comments and blank lines; converted to
    {(address, port): node id}. A line kwsniff cannot use is refused, naming the line."""
    if isinstance(value, dict):
        return value
    if not isinstance(value, str | os.PathLike):
        raise BadValue(f"{value!r} is not a file name")
    try:
        lines = read_small_file(value, BROKER_MAP_MAX_BYTES).decode("utf-8").splitlines()
    except SmallFileError as exc:
        raise BadValue(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise BadValue(f"{value}: {exc}") from None
    out: dict[tuple[str, int], int] = {}
    for number, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            for endpoint in _map_line(text):
                node = endpoint[2]
                known = out.setdefault(endpoint[:2], node)
                if known != node:
                    raise ValueError(f"{endpoint[0]}:{endpoint[1]} is node {known} on an earlier line")
        except ValueError as exc:
            raise BadValue(f"{value}:{number}: {exc} (lines are HOST:PORT NODE_ID)") from None
    return out


def _map_line(text: str) -> list[tuple[str, int, int]]:
    """The (address, port, node id) of each address one --broker-map line names."""
    import socket

    from kwsniff.rows.brokers import ip_literal

    parts = text.split()
    if len(parts) != 2:
        raise ValueError(f"{text!r} is not two fields")
    where, node_text = parts
    host, sep, port_text = where.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"{where!r} is not HOST:PORT")
    try:
        node = int(node_text)
    except ValueError:
        raise ValueError(f"{node_text!r} is not a node id") from None
    if not 0 <= node < 2**31:
        raise ValueError(f"{node_text!r} is not a node id (0 to 2147483647)")
    number = int(port_text)
    address = ip_literal(host)
    if address is not None:
        return [(address, number, node)]
    if host.startswith("["):
        raise ValueError(f"{host!r} is not an IP address")
    try:
        found = socket.getaddrinfo(host, number, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise ValueError(f"{host} does not resolve ({exc}); write its address instead") from None
    return sorted({(ip_literal(info[4][0]) or str(info[4][0]), number, node) for info in found})


class SmallFileError(Exception):
    """A file an option names that cannot be read, or is not a regular file of bounded size (one line)."""


def read_small_file(name: str | os.PathLike[str], cap: int) -> bytes:
    """The bytes of the regular file ``name``, at most ``cap`` of them. A FIFO, a device, a socket or a
    directory is refused at once (opened without blocking: a FIFO with no writer never answers), and
    so is a file larger than ``cap`` (checked by its size and again by what it gives, should it grow)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise SmallFileError(f"{_shown(name)}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SmallFileError(f"{_shown(name)}: {_kind(info.st_mode)}, not a regular file")
        if info.st_size > cap:
            raise SmallFileError(f"{_shown(name)}: {info.st_size:,} bytes, more than {cap:,}")
        pieces, held = [], 0
        while held <= cap and (piece := os.read(fd, cap + 1 - held)):
            pieces.append(piece)
            held += len(piece)
    except OSError as exc:
        raise SmallFileError(f"{_shown(name)}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    data = b"".join(pieces)
    if len(data) > cap:
        raise SmallFileError(f"{_shown(name)}: more than {cap:,} bytes")
    return data


def _shown(name: str | os.PathLike[str]) -> str:
    """The path as a message names it: a name of kilobytes is cut, so the message stays one line."""
    text = os.fsdecode(name)
    return text if len(text) <= 200 else text[:200] + "..."


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a pipe"
    return "a device or socket"
