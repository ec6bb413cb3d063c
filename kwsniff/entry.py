"""`kwsniff` as a process of its own (the console script, `python -m kwsniff`).

Nothing heavy is imported here or by `kwsniff --help`: each sub-command imports what it needs (pyarrow,
numpy, pandas, pyspark) when it runs, so `--help` and usage errors stay fast.

`read` and `capture` only write Parquet from plain Python values, so in their own process pyarrow is
imported without numpy (pyarrow ≥ 16 runs without it; `pyarrow.lib` then leaves its numpy paths
off): numpy's import is two thirds of pyarrow's (about 0.1 s), and without numpy pyarrow never
imports pandas either to ask whether a value handed to `pa.array` is a pandas object (another
0.3-0.5 s on the first table written). Only pyarrow is affected: anything else may still import
numpy. The tables are byte-identical either way (tools/golden_tables.py, tests/test_cli_process.py)."""

from __future__ import annotations

import signal
import sys
from types import FrameType

# Sub-commands whose process writes tables and nothing else that needs numpy in pyarrow.
WRITERS_ONLY = ("read", "capture")


class _RefuseNumpy:
    """A meta path finder that makes `import numpy` fail; installed only while pyarrow loads."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> None:
        if name == "numpy" or name.startswith("numpy."):
            raise ModuleNotFoundError("not imported for pyarrow by kwsniff read/capture", name=name)


def _pyarrow_without_numpy() -> None:
    if "pyarrow" in sys.modules or "numpy" in sys.modules:
        return  # too late, or already paid for: pyarrow as it is
    sys.meta_path.insert(0, _RefuseNumpy)  # type: ignore[arg-type]
    try:
        import pyarrow  # noqa: F401
    finally:
        sys.meta_path.remove(_RefuseNumpy)  # type: ignore[arg-type]


# glibc's malloc (mallopt(3)): M_MMAP_THRESHOLD and M_TRIM_THRESHOLD.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20  # glibc's own ceiling for the threshold it adjusts itself
TRIM_THRESHOLD = 64 << 20  # twice that, as glibc sets it when it adjusts


def _reuse_freed_blocks() -> None:
    """Let glibc's malloc hand freed large blocks out again instead of returning them to the kernel.

    By default a block of 128 KiB or more is a fresh mmap, unmapped when freed, and the heap's top
    is trimmed past 128 KiB free; glibc raises both limits itself only as it meets larger frees. A
    decoding run allocates and frees such blocks all the time (1 MiB reads of the capture, every
    packet of a 64 KiB-MTU capture, each large frame joined), and each fresh one costs a page fault
    and a zeroed page per 4 KiB: on a capture of 1 MB batches a fifth of `read`'s CPU
    (docs/performance.md). Fixed at glibc's own ceilings, freed blocks stay in the heap for the next
    read: at most 64 MiB of free heap is kept, and the peak, which the memory budget bounds, is
    what it was. Nothing is done where the C library has no mallopt (it is not glibc)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)


def run() -> None:
    """The console script: `kwsniff ...`."""
    if sys.argv[1:2] and sys.argv[1] in WRITERS_ONLY and not {"-h", "--help"} & set(sys.argv[2:]):
        _reuse_freed_blocks()
        _pyarrow_without_numpy()
    from kwsniff.cli import main

    # SIGTERM unwinds the command as Ctrl-C does (kwsniff/commands/signals.py, imported only when
    # one arrives, so that `kwsniff --help` loads no sub-command module).
    signal.signal(signal.SIGTERM, _on_sigterm)
    main()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    from kwsniff.commands.signals import Interrupted

    raise Interrupted(signum)
