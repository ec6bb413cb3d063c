"""Compiled code of the decoders kwsniff writes at run time, kept between runs like `.pyc` files.

protocol/compiler.py and rows/fact_compiler.py write Python source for each message version a
capture uses and compile it on first use. Writing the source takes well under a millisecond;
`compile()` takes 1-20 ms per message version (a Metadata or Produce decoder is 10-13 KB of
source), which was a tenth of the CPU of reading a 300 MB capture of large batches. With a cache
directory set (:func:`use_directory`, which `read` and `capture` call), each compiled module is
kept as one marshal file named by a hash of its source, its file label and the interpreter's
bytecode magic, so a later run loads the same code object in a fraction of a millisecond and any
change of the generator, the schema or Python misses instead of loading stale code.

Without a directory (Spark executors, the tests of the layers below) it compiles as before. A
cache that cannot be read or written is ignored: the code is compiled, never a failure.
"""

from __future__ import annotations

import contextlib
import marshal
import os
from collections.abc import Mapping
from importlib.util import MAGIC_NUMBER
from pathlib import Path
from types import CodeType

_directory: Path | None = None


def cache_dir(environ: Mapping[str, str]) -> Path:
    """``$XDG_CACHE_HOME/kwsniff/code``, else ``~/.cache/kwsniff/code``."""
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kwsniff" / "code"


def use_directory(directory: Path | None) -> None:
    """Keep compiled code under ``directory`` from now on in this process (None: compile only)."""
    global _directory
    _directory = directory


def compile_module(source: str, filename: str) -> CodeType:
    """``compile(source, filename, "exec")``, loaded from the cache directory when it holds it."""
    directory = _directory
    if directory is None:
        return compile(source, filename, "exec")
    try:  # CPython's own BLAKE2 (what hashlib hands out too), without hashlib's load of OpenSSL
        from _blake2 import blake2b
    except ImportError:  # pragma: no cover - a Python built without it
        from hashlib import blake2b

    digest = blake2b(MAGIC_NUMBER, digest_size=20)
    digest.update(filename.encode())
    digest.update(b"\0")
    digest.update(source.encode())
    path = directory / f"{digest.hexdigest()}.code"
    try:
        data = path.read_bytes()
    except OSError:
        pass
    else:
        try:
            code = marshal.loads(data)
        except (EOFError, ValueError, TypeError):
            code = None  # damaged (a disk full mid-write elsewhere): compiled and written again
        if type(code) is CodeType and code.co_filename == filename:
            return code
    code = compile(source, filename, "exec")
    _store(path, marshal.dumps(code))
    return code


def _store(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` in one step: readers (other runs at the same time) see all or nothing."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp.write_bytes(data)
        os.replace(temp, path)
    except OSError:
        with contextlib.suppress(OSError):  # a read-only or full cache: the next run compiles again
            temp.unlink(missing_ok=True)
