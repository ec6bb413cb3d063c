"""The output directory of a run: checked before any capture is decoded, written whole or not at all.

`OUT/<table>/` is a Parquet dataset (every visible `*.parquet` file in it, or under its `key=value`
directories, is part of it). A run never writes into OUT: it writes into a staging directory beside
it and :meth:`Output.commit` publishes the next OUT in one step (:mod:`kwsniff.sinks.commit`), so
readers and a kill see the old dataset or the new one, never a mix (docs/datasets.md).

When OUT already holds a dataset, a run changes it only by an explicit choice: ``APPEND`` keeps its
files (an input read again replaces its own), ``OVERWRITE`` drops every kwsniff table; otherwise the
run is refused. Anything in OUT that is not a kwsniff table is kept as it is.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path

try:  # CPython's own SHA-1: hashlib would load OpenSSL first (~12M instructions of start-up)
    from _sha1 import sha1
except ImportError:  # pragma: no cover - a Python built without it
    from hashlib import sha1

from kwsniff.sinks.commit import Staging, locked, recover
from kwsniff.sinks.parquet import TEMP_SUFFIX, safe_file_stem
from kwsniff.tables.names import SUMMARIES, TABLES

# The directories of OUT a run writes, replaces and keeps file by file: the tables and their summaries.
DATASET_DIRS = TABLES + SUMMARIES


class OutputError(Exception):
    """The output directory cannot be used; the message is one line for the user."""


def error_line(exc: BaseException) -> str:
    """An exception's first line (its type's name when it says nothing): the reason in one line."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class ExistingOutput(Enum):
    REFUSE = "refuse"
    APPEND = "append"
    OVERWRITE = "overwrite"


def _dataset_files(table_dir: Path) -> list[Path]:
    if not table_dir.is_dir():
        return []
    return [p for p in table_dir.iterdir() if not p.name.startswith((".", "_"))]


def _replaceable(path: Path) -> bool:
    """A Parquet file, or a `key=value` partition directory (Spark's) holding only those."""
    if path.is_file() and not path.is_symlink():
        return path.suffix == ".parquet"
    if path.is_dir() and not path.is_symlink() and "=" in path.name:
        return all(_replaceable(p) for p in path.iterdir() if not p.name.startswith((".", "_")))
    return False


def _link_or_copy(src: str, dst: str) -> None:
    """Keep a file in the next OUT without copying its bytes (a hard link), else copy it."""
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        shutil.copy2(src, dst, follow_symlinks=False)


def _carry(src: Path, dst: Path) -> None:
    """``src`` (a file, link or directory tree) into the next OUT at ``dst``, by hard links."""
    if src.is_dir() and not src.is_symlink():
        shutil.copytree(src, dst, symlinks=True, copy_function=_link_or_copy)
    else:
        _link_or_copy(str(src), str(dst))


def _carry_table(src: Path, dst: Path, dropped: frozenset[str] = frozenset()) -> None:
    """The entries of one table directory of OUT into the next OUT at ``dst``, but those staged
    again (the staged file wins), those named in ``dropped`` and temporary files of a run killed
    before this design. One link per file and no other call: a live capture's every commit carries
    all its earlier periods' files."""
    with os.scandir(src) as entries:
        for item in entries:
            if item.name.endswith(TEMP_SUFFIX) or item.name in dropped:
                continue
            target = os.path.join(dst, item.name)
            if item.is_dir(follow_symlinks=False):
                if not os.path.lexists(target):
                    _carry(Path(item.path), Path(target))
                continue
            try:
                os.link(item.path, target, follow_symlinks=False)
            except FileExistsError:
                pass
            except OSError:  # a filesystem without hard links
                if not os.path.lexists(target):
                    shutil.copy2(item.path, target, follow_symlinks=False)


def _check_out(out: Path) -> Path:
    """``out`` as the real path a swap can replace, or OutputError."""
    try:
        return _checked_out(out)
    except OSError as exc:  # a name too long for the file system, a folder that may not be read
        shown = str(out) if len(str(out)) <= 200 else str(out)[:200] + "..."
        raise OutputError(f"--out {shown}: {exc.strerror or exc}") from None


def _checked_out(out: Path) -> Path:
    for link in (out, *out.parents):
        if link.is_symlink() and not link.exists():
            # Following it would make the link's target (and its parents), wherever it points.
            raise OutputError(
                f"--out {out}: {link} is a symbolic link to {os.readlink(link)}, which does not exist"
            )
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {out}: exists and is not a directory")
    real = Path(os.path.realpath(out))
    if real == real.parent:
        raise OutputError(f"--out {out}: is the root directory; name a directory for the tables")
    cwd = Path(os.path.realpath(os.getcwd()))
    if real == cwd or real in cwd.parents:
        # The old OUT is removed when a run commits: the shell's working directory with it.
        raise OutputError(
            f"--out {out}: is (or holds) the working directory; name a directory for the tables"
        )
    if real.is_dir() and real.parent.is_dir() and os.stat(real).st_dev != os.stat(real.parent).st_dev:
        raise OutputError(f"--out {out}: is a mount point; name a directory inside it for the tables")
    return real


class Output:
    """OUT as one run writes it.

    - Construction checks OUT (refusing a held dataset unless told), finishes or removes what killed
      runs left beside it, and makes the staging directory: :attr:`stage` is where sinks write,
      `stage/<table>/<name>.parquet`. OutputError (one line) if any of it fails; nothing is changed.
    - :meth:`commit` publishes the next OUT: the staged files, plus (``APPEND``, and every commit
      after the first) the files OUT already has that were not staged again, plus OUT's other entries.
      A live capture commits once per rotation period; later commits append.
    - :meth:`close` drops what was staged and not committed, and the directories made for it.
    """

    def __init__(self, out: Path, existing: ExistingOutput = ExistingOutput.REFUSE) -> None:
        self.shown = out
        self.existing = existing
        real = _check_out(out)
        self.out = real
        held = {t: _dataset_files(real / t) for t in TABLES}
        found = sum(len(files) for files in held.values())
        if found and existing is ExistingOutput.REFUSE:
            tables = ", ".join(t for t, files in held.items() if files)
            raise OutputError(
                f"--out {out}: already holds a dataset ({found} files in {tables}); "
                "use --overwrite to replace it or --append to add to it"
            )
        if existing is ExistingOutput.OVERWRITE:
            for path in (p for t in DATASET_DIRS for p in _dataset_files(real / t)):
                if not _replaceable(path):
                    raise OutputError(f"--out {out}: {path} is not a Parquet file; not replacing the dataset")
        self._created = [p for p in real.parents if not p.exists()]
        try:
            if not real.parent.exists():
                real.parent.mkdir(parents=True)
            # Under the lock: a staging directory is never seen by another run before it is held.
            with locked(real.parent):
                recover(real)
                self._staging: Staging | None = Staging(real)
        except OSError as exc:
            self._remove_created()
            raise OutputError(f"--out {out}: {exc.strerror or exc}") from None
        self.commits = 0
        # Told of each commit that published, with its wall-clock end (Unix seconds) and how long
        # it took (seconds): the capture's metrics (kwsniff_last_commit_timestamp_seconds).
        self.on_commit: Callable[[float, float], None] | None = None

    @property
    def stage(self) -> Path:
        assert self._staging is not None
        return self._staging.path

    @property
    def appending_to(self) -> Path | None:
        """The dataset whose tables this run's are added to (`--append` to an OUT there), else None."""
        keeps = self.existing is ExistingOutput.APPEND or self.commits > 0
        return self.out if keeps and self.out.is_dir() else None

    def name_max(self) -> int:
        """The longest file name the filesystem of OUT takes (bytes)."""
        try:
            return os.pathconf(self.stage, "PC_NAME_MAX")
        except (OSError, ValueError):
            return 255

    def kept_names(self, table: str) -> set[str]:
        """Names of the files of OUT's ``table`` the commit keeps (``APPEND``), for names that must
        not collide with them."""
        if self.existing is not ExistingOutput.APPEND:
            return set()
        return {p.name for p in _dataset_files(self.out / table)}

    def spool(self) -> Staging:
        """A directory beside OUT, held by this process, for files that other processes (live
        capture workers) write before they are moved into :attr:`stage`. Its owner drops it; once
        the owner is gone a later run's recovery removes it like any leftover."""
        try:
            with locked(self.out.parent):
                return Staging(self.out)
        except OSError as exc:
            raise OutputError(f"--out {self.shown}: {exc.strerror or exc}") from None

    def commit(self, *, again: bool = False) -> None:
        """Publish the staged files as described above; ``again``: stage afresh for a later commit.
        OutputError if the switch fails (the old OUT is then as it was)."""
        staging = self._staging
        assert staging is not None
        self._staging = None
        began = time.monotonic()
        try:
            with locked(self.out.parent):
                self._complete(staging.path)
                staging.publish()
                self.commits += 1
                self._staging = Staging(self.out) if again else None
        except OSError as exc:
            raise OutputError(f"--out {self.shown}: {exc.strerror or exc}; nothing was written") from None
        finally:
            staging.drop()  # what was not published, or the old OUT that was
        if self.on_commit is not None:
            self.on_commit(time.time(), time.monotonic() - began)

    def _complete(self, stage: Path) -> None:
        """Add to ``stage`` what it keeps of the current OUT."""
        if not self.out.is_dir():
            return
        keep_tables = self.existing is not ExistingOutput.OVERWRITE or self.commits > 0
        if self.existing is ExistingOutput.REFUSE and not self.commits:
            held = [t for t in TABLES if _dataset_files(self.out / t)]
            if held:
                raise OSError(f"another run wrote {', '.join(held)} meanwhile")
        # A capture read again replaces its summaries with its tables: a run that wrote none
        # (a small one, kwsniff.commands.summarize) leaves none of the old ones beside its tables.
        restaged = frozenset(
            f.name for table in TABLES if (stage / table).is_dir() for f in (stage / table).iterdir()
        )
        for entry in self.out.iterdir():
            target = stage / entry.name
            if entry.name not in DATASET_DIRS or not entry.is_dir() or entry.is_symlink():
                if not os.path.lexists(target):
                    _carry(entry, target)
            elif keep_tables:
                target.mkdir(exist_ok=True)
                _carry_table(entry, target, restaged if entry.name in SUMMARIES else frozenset())

    def close(self) -> None:
        if self._staging is not None:
            self._staging.drop()
            self._staging = None
        if not self.commits:
            self._remove_created()

    def _remove_created(self) -> None:
        for path in self._created:
            try:
                path.rmdir()
            except OSError:
                return  # not empty (or already gone): its parents are not empty either


def output_name(capture: Path) -> str:
    """The file name (without `.parquet`) of one input's tables: its file name and a short hash of
    its resolved path, so `a/cap.pcap` and `b/cap.pcap` in one dataset never replace each other,
    and reading the same file again (``--append``) replaces its own files rather than doubling rows."""
    return f"{safe_file_stem(capture.name)}-{path_digest(capture)}"


def path_digest(capture: Path) -> str:
    return path_digest_of(str(capture.resolve()))


def path_digest_of(text: str) -> str:
    return sha1(os.fsencode(text)).hexdigest()[:8]


def stream_name(source: str) -> str:
    """A name for a run with no file (standard input, a live interface) that no other run shares,
    even one started in the same second on another machine: `<source>-<UTC time>-<random>`."""
    return f"{source}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{os.urandom(3).hex()}"


def capture_keys(inputs: Iterable[Path], held: set[str]) -> dict[Path, str | None]:
    """The `capture` value of each file input: None (its file name, as in the golden tables) when no
    other input of the run, and no other file of the dataset (``held``: names of OUT's files), has
    the same file name; else `<file name>-<hash of its path>`, the same on every run."""
    inputs = list(inputs)
    stems = [safe_file_stem(p.name) for p in inputs]
    keys: dict[Path, str | None] = {}
    for path, stem in zip(inputs, stems, strict=True):
        mine = f"{output_name(path)}.parquet"
        clash = stems.count(stem) > 1 or any(
            h != mine and h.startswith(f"{stem}-") and len(h) == len(mine) for h in held
        )
        keys[path] = f"{path.name}-{path_digest(path)}" if clash else None
    return keys
