"""The compiled decoders kept between runs (kwsniff.codecache): a second `read` loads what the first
compiled, writes the same tables, and a damaged or unwritable cache is compiled around, never an error."""

from __future__ import annotations

import marshal
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from kwsniff import codecache
from kwsniff.protocol.compiler import compile_message
from kwsniff.protocol.decode import message_fields

CAPTURE = Path(__file__).parent / "data" / "captures" / "kafka_python.pcap"
# Labels of modules every read of that capture compiles: decoders, partition walkers, error finders.
EXPECTED_KINDS = {"decoder", "partitions", "errors"}


def read(out: Path, cache_home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_home)}
    return subprocess.run(
        [sys.executable, "-m", "kwsniff", "read", str(CAPTURE), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def tables(out: Path) -> dict[str, object]:
    return {
        t: ds.dataset(out / t).to_table().drop_columns(["capture"]).to_pylist()
        for t in ("requests", "partitions", "errors")
    }


def cached(cache_home: Path) -> dict[str, bytes]:
    directory = cache_home / "kwsniff" / "code"
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.code"))}


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """One read with an empty cache: (its output, the cache home it filled)."""
    home, out = tmp_path_factory.mktemp("cache-home"), tmp_path_factory.mktemp("first") / "t"
    result = read(out, home)
    assert result.returncode == 0, result.stderr
    return out, home


def test_a_read_keeps_each_compiled_module_as_one_file(first_run: tuple[Path, Path]) -> None:
    _, home = first_run
    files = cached(home)
    labels = {marshal.loads(data).co_filename for data in files.values()}
    assert {label.split()[1] for label in labels} == EXPECTED_KINDS
    assert "<kwsniff decoder 3 v12 response>" in labels  # kafka-python's Metadata v12 response
    assert len(labels) == len(files)  # one file per module, no temporary left over


def test_a_second_read_loads_them_and_writes_the_same_tables(
    first_run: tuple[Path, Path], tmp_path: Path
) -> None:
    out, home = first_run
    before = cached(home)
    times = {name: (home / "kwsniff" / "code" / name).stat().st_mtime_ns for name in before}
    result = read(tmp_path / "t", home)
    assert result.returncode == 0, result.stderr
    assert tables(tmp_path / "t") == tables(out)
    assert cached(home) == before
    # Loaded, not written again.
    assert {name: (home / "kwsniff" / "code" / name).stat().st_mtime_ns for name in before} == times


def test_damaged_cache_files_are_compiled_again_and_replaced(
    first_run: tuple[Path, Path], tmp_path: Path
) -> None:
    out, _ = first_run
    home = tmp_path / "home"
    directory = home / "kwsniff" / "code"
    directory.mkdir(parents=True)
    good = cached(first_run[1])
    for name, data in good.items():
        (directory / name).write_bytes(data[: len(data) // 2])  # cut mid-write
    result = read(tmp_path / "t", home)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert tables(tmp_path / "t") == tables(out)
    assert cached(home) == good


@pytest.fixture
def cache_directory(tmp_path: Path) -> Iterator[Path]:
    codecache.use_directory(tmp_path / "code")
    yield tmp_path / "code"
    codecache.use_directory(None)


def test_an_unwritable_cache_still_compiles(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # the cache directory cannot be made under a file (even as root)
    codecache.use_directory(blocker / "code")
    try:
        fields = message_fields(18, 3, response=False)
        decode = compile_message(fields, 3, True, "18 v3 request")
        assert decode(b"\x06kafka\x061.0.0\x00") == {
            "client_software_name": "kafka",
            "client_software_version": "1.0.0",
        }
    finally:
        codecache.use_directory(None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_a_cached_module_of_another_label_is_not_taken(cache_directory: Path) -> None:
    """The label is part of the key and of the code (tracebacks name it): same source, two files."""
    codecache.compile_module("x = 1\n", "<kwsniff errors a>")
    code = codecache.compile_module("x = 1\n", "<kwsniff errors b>")
    assert code.co_filename == "<kwsniff errors b>"
    assert len(list(cache_directory.glob("*.code"))) == 2
