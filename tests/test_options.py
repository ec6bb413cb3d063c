"""Options and messages (issue 10, item 7): sizes with units and ports are validated by one set of
types every command uses, an unknown API name is an error, warnings reach stderr even with -q, and a
pcap whose header version fields are byte-swapped is read."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner

from kwsniff.cli import main
from kwsniff.commands.options import API, BYTE_SIZE, PORT, FlowBuckets, Port, TunnelPort
from kwsniff.commands.sizes import ByteSize
from kwsniff.commands.values import BoundedInt, FiniteFloat

CAPTURES = Path(__file__).parent / "data" / "captures"
KP = CAPTURES / "kafka_python.pcap"  # 46 requests on port 19103


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("104857600", 104_857_600),
        ("100MiB", 100 * 1024 * 1024),
        ("100 mib", 100 * 1024 * 1024),
        ("64MB", 64_000_000),
        ("512KiB", 512 * 1024),
        ("2G", 2_000_000_000),
        ("1GiB", 1 << 30),
        ("7B", 7),
    ],
)
def test_sizes_take_units(text: str, expected: int) -> None:
    assert BYTE_SIZE.convert(text, None, None) == expected


@pytest.mark.parametrize("text", ["0", "-5", "0MiB", "abc", "10 parsecs", "1.5MB", ""])
def test_bad_sizes_are_refused(text: str) -> None:
    with pytest.raises(click.BadParameter):
        BYTE_SIZE.convert(text, None, None)


@pytest.mark.parametrize("text", ["0", "65536", "99999", "-1", "http"])
def test_bad_ports_are_refused(text: str) -> None:
    with pytest.raises(click.BadParameter):
        PORT.convert(text, None, None)


def test_api_names_and_keys_convert_to_the_lower_case_name() -> None:
    assert [API.convert(v, None, None) for v in ("Produce", "FETCH", "3", "apiversions")] == [
        "produce",
        "fetch",
        "metadata",
        "apiversions",
    ]
    with pytest.raises(click.BadParameter):
        API.convert("nosuchapi", None, None)
    with pytest.raises(click.BadParameter):
        API.convert("999", None, None)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-frame-size", "0"], "Invalid value for '--max-frame-size': '0' must be more than 0 bytes"),
        (["--max-frame-size", "-5"], "Invalid value for '--max-frame-size': '-5' is not a size"),
        (["--max-decompressed", "lots"], "Invalid value for '--max-decompressed': 'lots' is not a size"),
        (["--broker-port", "99999"], "Invalid value for '--broker-port' / '-p': '99999' is not a TCP port (1 to 65535)"),
        (["-p", "0"], "Invalid value for '--broker-port' / '-p': '0' is not a TCP port (1 to 65535)"),
    ],
)  # fmt: skip
def test_read_refuses_bad_values_before_reading(tmp_path: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["read", str(KP), "-o", str(tmp_path / "t"), *args])
    assert result.exit_code == 2
    assert message in result.stderr
    assert not (tmp_path / "t").exists()


def test_max_frame_size_with_units_reads_like_the_default(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["read", str(KP), "-o", str(tmp_path / "t"), "--max-frame-size", "100MiB"]
    )
    assert result.exit_code == 0, result.output
    assert ds.dataset(tmp_path / "t" / "requests").count_rows() == 46


def test_show_refuses_an_unknown_api_and_a_bad_port() -> None:
    result = CliRunner().invoke(main, ["show", str(KP), "--api", "nosuchapi"])
    assert result.exit_code == 2
    assert "Invalid value for '--api': 'nosuchapi' is not a Kafka API name or key" in result.stderr
    assert result.stdout == ""
    result = CliRunner().invoke(main, ["show", str(KP), "-p", "70000"])
    assert result.exit_code == 2
    assert "'70000' is not a TCP port (1 to 65535)" in result.stderr


def test_show_filters_by_api_key_number_as_by_name() -> None:
    by_name = CliRunner().invoke(main, ["show", str(KP), "--api", "metadata", "--json"])
    by_key = CliRunner().invoke(main, ["show", str(KP), "--api", "3", "--json"])
    assert by_name.exit_code == by_key.exit_code == 0
    assert by_name.stdout == by_key.stdout
    # Exactly the Metadata exchanges tshark saw in the capture, and nothing else.
    tshark = json.loads(KP.with_name(KP.name + ".tshark.json").read_text())
    metadata = sorted(
        (r["correlation_id"], r["api_version"]) for r in tshark["requests"] if r["api_key"] == 3
    )
    shown = [json.loads(line) for line in by_key.stdout.splitlines()]
    assert {(e["api_key"], e["api_name"]) for e in shown} == {(3, "Metadata")}
    assert sorted((e["correlation_id"], e["api_version"]) for e in shown) == metadata
    assert len(metadata) == 9


def swap_version_fields(src: Path, dst: Path) -> Path:
    data = bytearray(src.read_bytes())
    data[4:6], data[6:8] = data[5:3:-1], data[7:5:-1]
    dst.write_bytes(bytes(data))
    return dst


def test_a_pcap_with_byte_swapped_version_fields_is_read_with_a_warning(tmp_path: Path) -> None:
    swapped = swap_version_fields(KP, tmp_path / "swapped.pcap")
    assert swapped.read_bytes()[4:8] == b"\x00\x02\x00\x04"  # 2.4 in the other byte order
    result = CliRunner().invoke(main, ["read", str(swapped), "-o", str(tmp_path / "t"), "-q"])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert result.stderr == (
        "kwsniff: warning: swapped.pcap: pcap header version fields are byte-swapped (read as version 2.4)\n"
    )
    assert ds.dataset(tmp_path / "t" / "requests").count_rows() == 46


def test_show_prints_warnings_on_stderr(tmp_path: Path) -> None:
    swapped = swap_version_fields(KP, tmp_path / "swapped.pcap")
    result = CliRunner().invoke(main, ["show", str(swapped), "--api", "ApiVersions", "--json"])
    assert result.exit_code == 0
    assert result.stderr.startswith("kwsniff: warning: swapped.pcap: pcap header version fields")
    assert '"api_name": "ApiVersions"' in result.stdout and "warning" not in result.stdout


# -- issue 45, goal 4: every number an option takes is a finite number in its range ----------------
# The types of options whose values are numbers (ports, sizes, counts, seconds, milliseconds).
NUMBER_TYPES = (FiniteFloat, BoundedInt, ByteSize, Port, FlowBuckets, TunnelPort)
# What each command needs besides the option tried, so that only that option can be refused.
COMMAND_ARGS = {
    "read": [str(KP), "-o", "OUT"],
    "show": [str(KP)],
    "capture": ["lo", "-o", "OUT"],
    "report": ["TABLES"],
    "spark": [str(KP), "-o", "OUT"],
}


def number_options() -> list[tuple[str, str]]:
    found = []
    for name in main.list_commands(click.Context(main)):
        command = main.get_command(click.Context(main), name)
        assert command is not None
        for param in command.params:
            if isinstance(param, click.Option) and isinstance(param.type, NUMBER_TYPES):
                found.append((name, max(param.opts, key=len)))
    return found


def test_every_number_option_is_of_a_type_that_refuses_nan_and_inf() -> None:
    """click's FLOAT, INT, FloatRange and IntRange let `nan` through (it compares false with every
    bound) and FLOAT takes `inf`: no option of any command uses them bare."""
    bare = []
    for name in main.list_commands(click.Context(main)):
        command = main.get_command(click.Context(main), name)
        assert command is not None
        for param in command.params:
            kind = type(param.type)
            if kind in (
                click.types.FloatParamType,
                click.types.IntParamType,
                click.FloatRange,
                click.IntRange,
            ):
                bare.append((name, param.name))
    assert bare == []
    assert len(number_options()) >= 40  # every command's ports, sizes, counts and seconds


@pytest.mark.parametrize(("command", "option"), number_options())
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999", "9" * 30])
def test_every_number_option_refuses_nan_inf_and_past_int64_with_one_line(
    tmp_path: Path, command: str, option: str, value: str
) -> None:
    """`--idle-timeout nan` or `inf` was a traceback on `read` and `capture`; `show --min-latency nan`
    filtered nothing; `--count` and `--session-timeout-ms` took numbers no counter holds."""
    if option == "--tunnel-port":
        value = f"vxlan={value}"
    args = [str(tmp_path / a) if a in ("OUT", "TABLES") else a for a in COMMAND_ARGS[command]]
    result = CliRunner().invoke(main, [command, *args, option, value], prog_name="kwsniff")
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("kwsniff: error: Invalid value for ")
    assert option in result.stderr and result.stderr.count("\n") == 1
    assert not (tmp_path / "OUT").exists()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("nan", "'nan' is not a finite number"),
        ("inf", "inf is not in the range 0<=x<=1000000000000.0"),
        ("-1", "-1.0 is not in the range 0<=x<=1000000000000.0"),
    ],
)
def test_show_min_latency_nan_is_refused_not_a_filter_that_keeps_everything(value: str, message: str) -> None:
    result = CliRunner().invoke(main, ["show", str(KP), "--min-latency", value], prog_name="kwsniff")
    assert result.exit_code == 2
    assert (
        result.stderr
        == f"kwsniff: error: Invalid value for '--min-latency': {message} (see 'kwsniff show --help')\n"
    )
