"""Publishing a directory in one step, as Spark's commit protocol and Delta Lake publish a write.

A run builds the whole next version of OUT in a staging directory beside it (same parent, so the same
filesystem), then swaps the two with one ``renameat2(RENAME_EXCHANGE)`` (Linux 3.15+; ext4, xfs,
btrfs, tmpfs and others). A reader of `OUT/<table>/*.parquet` sees the old dataset or the new one and
never a mix; a run killed at any moment leaves one or the other, plus a hidden leftover beside OUT.

Names beside OUT, all starting `.<OUT's name>.kwsniff-` (never inside OUT, so no reader meets them):

- `stage-<pid>-<random>`: a run's next OUT while it is built; after the swap, the old OUT, removed.
  Its run holds an ``flock`` on it while alive, so another run removes it only once that run is gone.
- `ready-<pid>-<random>`: only where the swap is not supported (the kernel or filesystem says EINVAL):
  a complete next OUT. The fallback is two renames, OUT away and ready in; if a kill falls between
  them, the next run finds no OUT and a ready directory and finishes the switch (the new dataset).

Commits into one parent directory are serialized by an ``flock`` on that directory, held only for
the switch itself, so concurrent runs decode in parallel and publish one after the other.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100
# Errors that mean "this kernel or filesystem cannot exchange", not "this exchange failed".
_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP}


def leftover_prefix(out: Path) -> str:
    return f".{out.name}.kwsniff-"


def exchange(a: Path, b: Path) -> None:
    """Swap the paths ``a`` and ``b`` atomically; OSError (EINVAL, ENOSYS) where unsupported."""
    import ctypes  # here: a first write into a fresh directory never needs it (ctypes is ~2 ms)

    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)  # glibc 2.28+
    if renameat2 is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available")
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(a), None, str(b))


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    """An exclusive flock on ``directory`` for the block: one commit at a time beside it."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def lock_free(path: Path) -> bool:
    """Whether no live run holds ``path`` (a leftover to remove); False if it cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def recover(out: Path, keep: Callable[[Path], bool] | None = None) -> None:
    """Leftovers of dead runs beside ``out`` removed (but those ``keep`` says), and a switch a kill
    interrupted finished.

    Call with the parent locked. A `ready-` directory is complete: with no OUT, the kill fell between
    the fallback's two renames, and the ready one is the new OUT; with OUT there, it was never
    published and goes, like every `stage-` directory no live run holds."""
    prefix = leftover_prefix(out)
    found = sorted(p for p in out.parent.iterdir() if p.name.startswith(prefix))
    ready = [p for p in found if p.name.startswith(prefix + "ready-")]
    if ready and not os.path.lexists(out):
        os.rename(ready[-1], out)
    for path in found:
        if path.exists() and lock_free(path) and (keep is None or not keep(path)):
            remove_tree(path)


class Staging:
    """A directory beside ``out`` that :meth:`publish` makes ``out`` in one step (the old ``out``
    is then removed). Held (flock) by this process until published or dropped."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.path = out.parent / f"{leftover_prefix(out)}stage-{os.getpid()}-{os.urandom(4).hex()}"
        os.mkdir(self.path)
        self._fd: int | None = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def publish(self) -> None:
        """Switch the staged directory in as ``out``; call with the parent locked (:func:`locked`).
        The old ``out`` is then at :attr:`path`: :meth:`drop` removes it (after the lock)."""
        try:
            if os.path.lexists(self.out):
                exchange(self.path, self.out)
            else:
                os.rename(self.path, self.out)
        except OSError as exc:
            if exc.errno not in _UNSUPPORTED:
                raise
            self._rename_pair()
        self._release()

    def _rename_pair(self) -> None:
        """The fallback switch; :func:`recover` finishes it if a kill falls between the renames."""
        token = self.path.name.rsplit("stage-", 1)[1]
        ready = self.path.with_name(f"{leftover_prefix(self.out)}ready-{token}")
        os.rename(self.path, ready)
        if os.path.lexists(self.out):
            os.rename(self.out, self.path)
        os.rename(ready, self.out)

    def _release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def drop(self) -> None:
        """Remove the staged directory and everything in it (a run that commits nothing)."""
        self._release()
        remove_tree(self.path)
