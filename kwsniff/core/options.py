"""Every decoding, output and report option, declared once: a frozen dataclass per job whose fields
carry their default, unit, check (kwsniff.core.values) and help text. The commands make their click
options from these fields (kwsniff.commands.fields) and the Python API checks its keywords with
:func:`from_keywords`: both refuse a bad value with the same words, and a new field is an option of
both. No click here."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from kwsniff.core import values
from kwsniff.core.exits import EXIT_STRICT
from kwsniff.defaults import DEFAULT_BROKER_PORT, MAX_DECOMPRESSED, MAX_FRAME_SIZE
from kwsniff.memory import DEFAULT_MEMORY_LIMIT
from kwsniff.net import GENEVE_PORTS, VXLAN_PORTS

# `--summaries`: what auto does is kwsniff.core.output.worth_summarizing (docs/report.md).
SUMMARIES_MODES = ("auto", "always", "never")
# Summaries cost a run about 0.45 s of CPU (DuckDB's import and 15 queries) plus ~0.6 µs a row, and
# save each report of a capture 0.25-0.4 s (docs/report.md): on their own they pay from about half a
# million rows, where they are under a tenth of the read (~8 µs a row).
SUMMARIZE_MIN_ROWS = 500_000


T = TypeVar("T")


class OptionError(ValueError):
    """A value an option refuses, or a keyword that is no option: one line (exit status 2)."""


@dataclasses.dataclass(frozen=True)
class Spec:
    """How one field is an option: its long name (and short one) on the command line, what it counts,
    the check that converts and refuses values, its help; ``multiple``: repeatable (a tuple)."""

    flag: str
    help: str
    unit: str = ""
    check: Callable[[Any], Any] = values.flag
    short: str | None = None
    multiple: bool = False
    show_default: str | bool | None = None
    metavar: str | None = None

    @property
    def is_flag(self) -> bool:
        return self.check is values.flag

    @property
    def hint(self) -> str:
        """The option as an error names it: `'--broker-port' / '-p'`."""
        return " / ".join(f"'{o}'" for o in (self.flag, self.short) if o)


def option(default: Any, flag: str, help: str, **spec: Any) -> Any:  # noqa: A002 - the option's help
    """A field that is an option (``spec``: the rest of Spec)."""
    return dataclasses.field(default=default, metadata={"option": Spec(flag, help, **spec)})


def specs(kind: type) -> Iterator[tuple[dataclasses.Field[Any], Spec]]:
    """The fields of an options dataclass that are options, with their Spec, in declaration order."""
    first = getattr(kind, "FIRST", ())  # shown first in --help, though a base class declares the others
    fields = sorted(dataclasses.fields(kind), key=lambda f: f.name not in first)
    for f in fields:
        if "option" in f.metadata:
            yield f, f.metadata["option"]


def _tunnel_help(kind: str, defaults: frozenset[int]) -> str:
    return (
        f"UDP port of {kind} tunnels to look inside (repeatable; replaces the default "
        f"{', '.join(map(str, sorted(defaults)))})."
    )


@dataclasses.dataclass(frozen=True)
class DecodingOptions:
    """What every decoding command (read, capture, spark, show) asks of the decoder."""

    broker_port: tuple[int, ...] = option(
        (),
        "--broker-port",
        f"TCP port a broker listens on (repeatable; default {DEFAULT_BROKER_PORT}). Other ports are detected.",
        unit="port",
        check=values.port,
        short="-p",
        multiple=True,
    )
    keylog: tuple[Path, ...] = option(
        (),
        "--keylog",
        "NSS key log file (SSLKEYLOGFILE format, or a pipe) to decrypt TLS connections with; "
        "repeatable. Keys in a pcapng Decryption Secrets Block are used without it. Its secrets never "
        "reach any output, and are held within the secrets share of --memory-limit.",
        unit="file",
        # A pipe (`--keylog <(...)`) is welcome: load_keylog checks what the path is.
        check=values.path,
        multiple=True,
    )
    fragment_memory: int | None = option(
        None,
        "--fragment-memory",
        "Most bytes of IP fragments held for reassembly, at most the fragments share of "
        "--memory-limit (1/32); the oldest datagrams are evicted and counted.",
        unit="bytes",
        check=values.byte_size,
        show_default="--memory-limit / 32",
    )
    tunnel_port: tuple[tuple[str, int], ...] = option(
        (),
        "--tunnel-port",
        "A tunnel UDP port as KIND=PORT, KIND vxlan or geneve, e.g. vxlan=4790 (repeatable).",
        unit="kind=port",
        check=values.tunnel_port,
        multiple=True,
    )
    vxlan_port: tuple[int, ...] = option(
        (), "--vxlan-port", _tunnel_help("vxlan", VXLAN_PORTS), unit="port", check=values.port, multiple=True
    )
    geneve_port: tuple[int, ...] = option(
        (),
        "--geneve-port",
        _tunnel_help("geneve", GENEVE_PORTS),
        unit="port",
        check=values.port,
        multiple=True,
    )
    memory_limit: int = option(
        DEFAULT_MEMORY_LIMIT,
        "--memory-limit",
        "Memory for what grows with the traffic (connections, reassembly, held records, row "
        "buffers, the live queue); past it the oldest or largest state is evicted and counted "
        "(docs/memory.md). Bytes, or e.g. 512MiB.",
        unit="bytes",
        check=values.byte_size,
        show_default="1GiB",
    )
    broker_map: dict[tuple[str, int], int] | None = option(
        None,
        "--broker-map",
        "File of `HOST:PORT NODE_ID` lines naming brokers' node ids (HOST an address, or a name "
        "resolved when the file is read; `#` comments), for broker_id where the capture cannot tell "
        '(docs/tables.md, "Which broker answered").',
        unit="file",
        check=values.broker_map,
    )


@dataclasses.dataclass(frozen=True)
class ReadOptions(DecodingOptions):
    """`kwsniff read` and :func:`kwsniff.read`: the decoding options, the decoder's bounds, and the
    output's (``out``, ``overwrite``, ``append`` are the API's ``Tables.write``)."""

    FIRST: ClassVar[tuple[str, ...]] = ("out", "overwrite", "append", "host", "storage_option")

    out: Path | str = option(
        # Not `tables`: inside a clone that folder is `kwsniff.tables` to a Python started there (docs/spark.md).
        Path("kafka-tables"),
        "--out",
        "Where the tables go: a directory of Parquet datasets (one sub-directory per table), or Delta "
        "tables at s3://bucket/prefix or file:///path (docs/delta.md).",
        unit="directory or URI",
        check=values.out_location,
        short="-o",
        show_default=True,
    )
    host: str | None = option(
        None,
        "--host",
        "The capturing host's name in the Delta tables' `host` partition column.",
        unit="name",
        check=values.host_name,
        show_default="this machine's host name",
    )
    storage_option: tuple[tuple[str, str], ...] = option(
        (),
        "--storage-option",
        "An option of an s3:// --out as KEY=VALUE, over the AWS_* variables (e.g. "
        "AWS_ENDPOINT_URL=http://127.0.0.1:8333); repeatable.",
        unit="key=value",
        check=values.key_value,
        multiple=True,
    )
    overwrite: bool = option(
        False,
        "--overwrite",
        "Replace the dataset already in --out (in one step, once this run's tables are written).",
    )
    append: bool = option(
        False,
        "--append",
        "Add to the dataset already in --out (an input read before replaces its own files).",
    )
    no_auto_detect: bool = option(False, "--no-auto-detect", "Only treat --broker-port ports as Kafka.")
    max_frame_size: int = option(
        MAX_FRAME_SIZE,
        "--max-frame-size",
        "Largest plausible Kafka frame (a broker's socket.request.max.bytes); bytes, or e.g. 100MiB.",
        unit="bytes",
        check=values.byte_size,
        show_default="100MiB",
    )
    records: bool = option(
        False,
        "--records",
        "Also write the `records` table: one row per record of every Produce and Fetch (decompresses).",
    )
    record_payloads: bool = option(
        False, "--record-payloads", "Put record keys and values in the `records` table (implies --records)."
    )
    max_decompressed: int = option(
        MAX_DECOMPRESSED,
        "--max-decompressed",
        "Most bytes one compressed batch may expand to (bytes, or e.g. 64MiB); a batch past it is "
        "counted as capped.",
        unit="bytes",
        check=values.byte_size,
        show_default="64MiB",
    )
    idle_timeout: float = option(
        900.0,
        "--idle-timeout",
        "Close connections without a packet for this many seconds of capture time (0: never), so a "
        "capture of many connections keeps bounded memory.",
        unit="seconds",
        check=values.seconds(),
        show_default=True,
    )
    strict: bool = option(
        False,
        "--strict",
        f"Exit with status {EXIT_STRICT} if anything was not decoded (reasons on stderr); for CI.",
    )
    continuous: bool = option(
        False,
        "--continuous",
        "CAPTURES are consecutive pieces of one capture (a rotated file set): read in the order of "
        "their first timestamps as one, TCP state carried across; a piece that overlaps the one before "
        "is refused.",
    )
    summaries: str = option(
        "auto",
        "--summaries",
        "Write the report's per-capture summaries beside the tables: auto does for runs of "
        f"{SUMMARIZE_MIN_ROWS:,} rows or more (a report computes the others from their rows); docs/report.md.",
        check=values.Choice(SUMMARIES_MODES),
        show_default=True,
    )


# The options of `read` the API offers in its own way: Tables.write(out, overwrite=...).
WRITE_OPTIONS = ("out", "overwrite", "append", "host", "storage_option")


@dataclasses.dataclass(frozen=True)
class ReportOptions:
    """The sizes and the group timeout of `kwsniff report` and :func:`kwsniff.report`."""

    session_timeout_ms: int = option(
        45_000,
        "--session-timeout-ms",
        "Session timeout of groups whose JoinGroup is not in the tables (a group silent longer is stopped).",
        unit="milliseconds",
        # A group session timeout is an int32 of milliseconds in the JoinGroup request (KIP-62).
        check=values.Whole(1, 2**31 - 1),
        show_default=True,
    )
    finding_threshold: tuple[tuple[str, float], ...] = option(
        (),
        "--finding-threshold",
        "A threshold of the findings section as NAME=VALUE, e.g. lag_growth_seconds=60 (repeatable; "
        'docs/report.md "Findings" lists them).',
        unit="name=value",
        check=values.finding_threshold,
        multiple=True,
    )
    memory_limit: int = option(
        DEFAULT_MEMORY_LIMIT * 4,
        "--memory-limit",
        "Memory DuckDB may hold; past it, it spills to a private temporary folder (docs/report.md). "
        "Bytes, or e.g. 512MiB. Not used with --master.",
        unit="bytes",
        check=values.byte_size,
        show_default="4GiB",
    )
    spill_limit: int = option(
        DEFAULT_MEMORY_LIMIT * 16,
        "--spill-limit",
        "Disk DuckDB may fill in its temporary folder past --memory-limit; past it, one line and exit 1 "
        "(docs/report.md). Not used with --master.",
        unit="bytes",
        check=values.byte_size,
        show_default="16GiB",
    )


def keyword(spec: Spec) -> str:
    """The API's keyword of an option: its long name in snake_case."""
    return spec.flag.lstrip("-").replace("-", "_")


def from_keywords(kind: type[T], given: dict[str, Any], command: str, skip: tuple[str, ...] = ()) -> T:
    """The options ``kind`` of the API's keywords ``given`` (the others at their defaults), each
    value through its field's check; a keyword that is no option (or is in ``skip``), or a value
    the option refuses, raises OptionError saying so as the command would."""
    fields = {keyword(spec): (f, spec) for f, spec in specs(kind) if f.name not in skip}
    unknown = sorted(set(given) - set(fields))
    if unknown:
        raise OptionError(f"{command}: no option {', '.join(unknown)} (options: {', '.join(sorted(fields))})")
    chosen = {
        f.name: value_of(spec, given[name], command, f.default)
        for name, (f, spec) in fields.items()
        if name in given
    }
    return kind(**chosen)


def value_of(spec: Spec, value: Any, command: str, default: Any = None) -> Any:
    """``value`` as option ``spec`` takes it from the API, or OptionError."""
    name = keyword(spec)
    if spec.is_flag:
        if not isinstance(value, bool):  # `records="no"` is truthy: a flag takes True or False only
            raise OptionError(f"{command}: {name}={value!r}: a flag, True or False")
        return value
    if spec.multiple:
        given = value
        if isinstance(value, str | bytes | int | float) or hasattr(value, "__fspath__"):
            value = (value,)
        else:
            try:
                value = tuple(value)
            except TypeError:
                raise OptionError(f"{command}: {name}={value!r}: not a value or a list of them") from None
        if any(v is None for v in value):
            raise OptionError(f"{command}: {name}={list(value)!r}: None is not a value")
        try:
            return tuple(spec.check(v) for v in value)
        except values.BadValue as exc:
            raise OptionError(f"{command}: {name}={given!r}: Invalid value for {spec.hint}: {exc}") from None
    if value is None:
        if default is None:
            return None
        raise OptionError(f"{command}: {name}=None: the option takes a value (default {default!r})")
    try:
        return spec.check(value)
    except values.BadValue as exc:
        raise OptionError(f"{command}: {name}={value!r}: Invalid value for {spec.hint}: {exc}") from None
