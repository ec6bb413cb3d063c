"""``kwsniff spark --ship-env``: the virtual environment kwsniff runs from, packed for the executors.

Why venv-pack (not conda-pack or PEX): kwsniff installs with pip into a venv, and venv-pack packs
exactly that venv as it is, into a ``.tar.gz`` that Spark's ``spark.archives`` unpacks in every
executor's working directory; conda-pack needs a conda environment, and PEX a separate build step
from requirements. PySpark's own packaging guide shows all three.

The pack is cached by a content hash of the venv (every installed distribution's RECORD, which
lists each of its files with its own hash), so a second run ships the same archive without
rebuilding it, and any ``pip install`` into the venv makes a new one.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import sysconfig
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# The executors' Python never reads Spark's own jars (the workers run their own Spark), nor pip, nor
# the libraries' test suites: leaving them out takes 550 MB off the 970 MB of a kwsniff[spark] venv.
EXCLUDED = (
    "lib/python*/site-packages/pyspark/jars/*",
    "lib/python*/site-packages/pip/*",
    "lib/python*/site-packages/*/tests/*",
)
# gzip level 1: on a fleet's LAN the few percent a higher level saves cost more time than they save.
COMPRESS_LEVEL = 1


class ShipError(Exception):
    """The running environment cannot be shipped; the message is one line for the user."""


@dataclass
class Pack:
    path: Path
    size: int  # bytes
    built: bool  # False: reused from the cache
    seconds: float  # time to build it (0 when reused)


def cache_dir(environ: Mapping[str, str]) -> Path:
    """``$XDG_CACHE_HOME/kwsniff``, else ``~/.cache/kwsniff``."""
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kwsniff"


def running_venv() -> Path:
    """The virtual environment this Python runs in, if venv-pack can ship it; else ShipError."""
    if sys.prefix == sys.base_prefix:
        raise ShipError(
            f"--ship-env packs the virtual environment kwsniff runs from, but {sys.executable} is not "
            "in one; create one (python3 -m venv ENV && ENV/bin/pip install 'kwsniff[spark]') and run "
            "ENV/bin/kwsniff"
        )
    venv = Path(sys.prefix)
    config = venv / "pyvenv.cfg"
    settings = {}
    if config.exists():
        for line in config.read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition("=")
            settings[key.strip().lower()] = value.strip().lower()
    if settings.get("include-system-site-packages") == "true":
        raise ShipError(
            f"--ship-env: {venv} uses the system site-packages, which a pack cannot hold; create the "
            "venv without --system-site-packages"
        )
    editable = sorted(_editable(_site_packages()))
    if editable:
        raise ShipError(
            f"--ship-env: {', '.join(editable)} installed editable (pip install -e) in {venv}, so the "
            "pack would not hold its code; pip install it without -e"
        )
    return venv


def _site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def _editable(site: Path) -> list[str]:
    """Names of the distributions installed editable (PEP 610's ``dir_info.editable``)."""
    names = []
    for record in site.glob("*.dist-info/direct_url.json"):
        try:
            editable = json.loads(record.read_text(encoding="utf-8")).get("dir_info", {}).get("editable")
        except (OSError, ValueError):
            continue
        if editable:
            names.append(record.parent.name.split("-")[0])
    return names


def fingerprint(site: Path) -> str:
    """A hash of what is installed in ``site``: Python's version and each distribution's RECORD."""
    digest = hashlib.sha256(sys.version.encode())
    for record in sorted(site.glob("*.dist-info/RECORD")):
        digest.update(record.parent.name.encode() + b"\0")
        digest.update(record.read_bytes())
    return digest.hexdigest()[:16]


def packed(venv: Path, cache: Path) -> Pack:
    """The cached pack of ``venv``, built first when the cache has none of its current contents."""
    import venv_pack

    path = cache / f"venv-{venv.name}-{fingerprint(_site_packages())}.tar.gz"
    if path.exists():
        return Pack(path, path.stat().st_size, built=False, seconds=0.0)
    cache.mkdir(parents=True, exist_ok=True)
    # Built beside its final name and renamed when whole: a run that stops halfway, or another run
    # building the same pack, never leaves a partial archive under the cached name.
    partial = path.with_name(f".{path.stem}.{os.getpid()}.tar.gz")
    started = time.perf_counter()
    try:
        venv_pack.pack(
            prefix=str(venv),
            output=str(partial),
            compress_level=COMPRESS_LEVEL,
            filters=[("exclude", pattern) for pattern in EXCLUDED],
        )
    except venv_pack.VenvPackException as exc:
        partial.unlink(missing_ok=True)
        raise ShipError(f"--ship-env: venv-pack cannot pack {venv}: {' '.join(str(exc).split())}") from None
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, path)
    return Pack(path, path.stat().st_size, built=True, seconds=time.perf_counter() - started)
