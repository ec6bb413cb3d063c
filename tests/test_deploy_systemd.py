"""deploy/systemd/kwsniff-capture@.service: the unit that runs `kwsniff capture` as a service. It
passes `systemd-analyze verify` (with its ExecStart pointed at this environment's kwsniff: verify
checks the program exists), runs the capture as an unprivileged user with only CAP_NET_RAW and
CAP_NET_ADMIN, restarts it on failure, and its command line is one `kwsniff capture` accepts."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UNIT = ROOT / "deploy" / "systemd" / "kwsniff-capture@.service"
INSTALLED = "/opt/kwsniff/venv/bin/kwsniff"  # where docs/live-capture.md installs it


def settings(text: str) -> dict[str, list[str]]:
    """Each key's values in the unit, in order (a systemd key may be given more than once)."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            found.setdefault(key, []).append(value)
    return found


def venv_kwsniff() -> Path:
    path = Path(sys.executable).parent / "kwsniff"
    assert path.is_file(), f"{path}: the test environment's kwsniff script"
    return path


def test_the_capture_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    text = UNIT.read_text()
    assert text.count(INSTALLED) == 1
    # An instance of the template (verify wants one), its program the one installed here.
    instance = tmp_path / "kwsniff-capture@lo.service"
    instance.write_text(text.replace(INSTALLED, str(venv_kwsniff())))
    analyze = shutil.which("systemd-analyze")
    assert analyze is not None, "systemd-analyze (Debian package systemd): tools/install-test-deps.sh"
    done = subprocess.run([analyze, "verify", str(instance)], capture_output=True, text=True, timeout=120)
    # A misspelt or misplaced key is only a warning to verify: none is allowed here.
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    # The shipped file as is names a program this machine does not have: verify says so.
    shipped = tmp_path / "kwsniff-capture@eth0.service"
    shipped.write_text(text)
    refused = subprocess.run([analyze, "verify", str(shipped)], capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and f"Command {INSTALLED} is not executable" in refused.stderr


def test_the_capture_unit_runs_kwsniff_unprivileged_with_two_capabilities_and_restarts_on_failure() -> None:
    unit = settings(UNIT.read_text())
    assert unit["User"] == ["kwsniff"] and unit["Group"] == ["kwsniff"]
    assert unit["AmbientCapabilities"] == ["CAP_NET_RAW CAP_NET_ADMIN"]
    assert unit["CapabilityBoundingSet"] == ["CAP_NET_RAW CAP_NET_ADMIN"]
    assert unit["NoNewPrivileges"] == ["yes"]
    assert unit["Restart"] == ["on-failure"]
    # The coordinator alone gets SIGTERM: it stops the workers in order and commits the last period.
    assert unit["KillMode"] == ["mixed"]
    assert unit["ExecStart"] == [f"{INSTALLED} capture %i --out /var/lib/kwsniff/%i/tables $KWSNIFF_ARGS"]


def test_the_units_command_line_is_one_capture_accepts(tmp_path: Path) -> None:
    """ExecStart with the instance lo and KWSNIFF_ARGS of a short run: a capture that commits and
    exits 0, as the service's would be on `systemctl stop` (the tests run with capture rights)."""
    (command,) = settings(UNIT.read_text())["ExecStart"]
    out = tmp_path / "state"
    line = command.replace("%i", "lo").replace("/var/lib/kwsniff/lo", str(out))
    line = line.replace("$KWSNIFF_ARGS", "--duration 1 -p 9 --quiet")
    args = shlex.split(line)
    assert args[0] == INSTALLED
    done = subprocess.run(
        [sys.executable, "-m", "kwsniff", *args[1:]], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert (out / "tables" / "capture_stats").is_dir()
