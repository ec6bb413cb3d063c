"""The README's Quick start works for a new user (issue 24): its first command, run as written in a
clean clone with Debian's own python3 first on PATH and no venv active, makes `.venv`, installs
kwsniff there and writes the tables; and that base install, without extras, answers `kwsniff spark`
and `kwsniff report` with one line naming the extra to install and exit status 2, not a traceback."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.test_repository import REPO, quick_start

INSTALL_TIMEOUT_S = 600  # pip builds the wheel and installs from its cache or index; bounded
EXTRA_LINE = "kwsniff: error: kwsniff {} needs the {} extra: pip install 'kwsniff[{}]' (missing: {})\n"


def clean_env(clone: Path) -> dict[str, str]:
    """A new user's shell: Debian's python3 first on PATH, no venv, nothing from this checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return env | {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", str(clone))}


@pytest.fixture(scope="module")
def clone(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Path, subprocess.CompletedProcess[str]]]:
    clone = tmp_path_factory.mktemp("quick-start") / "kwsniff"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True, timeout=120)
    assert Path("/usr/bin/python3").is_file()  # Debian's own interpreter (tools/install-test-deps.sh)
    first = quick_start()[0]
    done = subprocess.run(
        ["bash", "-c", first],
        cwd=clone,
        env=clean_env(clone),
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
    )
    yield clone, done


def test_the_first_quick_start_command_writes_the_tables_from_a_clean_clone(
    clone: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    path, done = clone
    assert done.returncode == 0, done.stderr[-3000:]
    venv_python = (path / ".venv" / "bin" / "python").resolve()
    assert venv_python == Path("/usr/bin/python3").resolve()  # the venv is Debian's python3's
    rows = {t: ds.dataset(path / "kafka-tables" / t).count_rows() for t in ("requests", "connections")}
    assert rows == {"requests": 75, "connections": 16}
    assert "quickstart.pcap: 306 packets" in done.stdout
    assert "requests 75: ok 75, no_response_expected 0, unanswered 0, response_cut 0, decode_error 0" in (
        done.stdout
    )


@pytest.mark.parametrize(
    ("command", "args", "what", "extra", "missing"),
    [
        ("spark", ["x.pcap"], "spark", "spark", "pyspark, pandas"),
        ("spark", ["sample_pcaps/quickstart.pcap", "--out", "fleet"], "spark", "spark", "pyspark, pandas"),
        # `report` itself runs on DuckDB (a base dependency); Spark needs the spark extra, the plots
        # (--plots, --html) the report extra.
        ("report", ["kafka-tables", "--master", "local[1]"], "report --master", "spark", "pyspark, pandas"),
        ("report", ["kafka-tables", "--plots", "plots"], "report --plots", "report", "matplotlib"),
        ("report", ["kafka-tables", "--html", "r.html"], "report --html", "report", "matplotlib"),
    ],
)
def test_without_their_extra_spark_and_report_plots_say_so_in_one_line(
    clone: tuple[Path, subprocess.CompletedProcess[str]],
    command: str,
    args: list[str],
    what: str,
    extra: str,
    missing: str,
) -> None:
    path, installed = clone
    assert installed.returncode == 0, installed.stderr[-3000:]
    done = subprocess.run(
        [str(path / ".venv" / "bin" / "kwsniff"), command, *args],
        cwd=path,
        env=clean_env(path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        EXTRA_LINE.format(what, extra, extra, missing),
    )
    assert not any((path / name).exists() for name in ("fleet", "plots", "r.html"))


def test_without_the_extra_spark_help_still_works(
    clone: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    path, _ = clone
    done = subprocess.run(
        [str(path / ".venv" / "bin" / "kwsniff"), "spark", "--help"],
        cwd=path,
        env=clean_env(path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "kwsniff spark [OPTIONS] INPUTS..." in done.stdout, done.stderr
