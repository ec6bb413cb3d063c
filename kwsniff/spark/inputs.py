"""Where the fleet's captures are: local (or mounted) paths, or URIs of any filesystem pyarrow opens.

A URI (``s3://bucket/captures/?region=eu-west-1``, ``gs://...``, ``hdfs://namenode:8020/...``) is
expanded on the driver and opened again in each executor, so its query options (``region``,
``endpoint_override``, ``scheme``) travel with every path it expands to; credentials come from each
machine's environment as pyarrow looks for them (``AWS_ACCESS_KEY_ID``, ``~/.aws``, instance roles).
Remote captures are read as streams: flow-bucket tasks cannot index them by byte range.
"""

from __future__ import annotations

import fnmatch
import glob
import os
from pathlib import Path
from typing import Any

from kwsniff.capture import CaptureError, CaptureReader, open_capture, open_capture_file

CAPTURE_SUFFIXES = (".pcap", ".pcapng", ".cap", ".pcap.gz", ".pcapng.gz")
_GLOB = "*?["


class InputError(Exception):
    """An input names nothing readable; the message is one line for the user."""


def is_uri(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def shown(path: str) -> str:
    """A path or URI as rows and messages name it: without the URI's query options."""
    return path.partition("?")[0] if is_uri(path) else path


def _capture_file(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return base.endswith(CAPTURE_SUFFIXES) and not base.startswith(".")


def _filesystem(uri: str) -> tuple[Any, str, str, str]:
    """(pyarrow filesystem, path inside it, scheme, query) of a URI."""
    import pyarrow.fs as pafs

    base, _, query = uri.partition("?")
    scheme = base.split("://", 1)[0]
    # A glob is not a path pyarrow knows: resolve the filesystem from the part before it.
    cut = min((base.find(c) for c in _GLOB if c in base), default=len(base))
    head = base[:cut].rsplit("/", 1)[0] if cut < len(base) else base
    fs, path = pafs.FileSystem.from_uri(head + (f"?{query}" if query else ""))
    return fs, path + base[len(head) :], scheme, query


def expand_uri(raw: str) -> list[str]:
    """The capture files a URI names (a file, a directory's capture files, or a glob), as URIs."""
    import pyarrow.fs as pafs

    try:
        fs, path, scheme, query = _filesystem(raw)
        if any(c in path for c in _GLOB):
            root = path[: min(path.find(c) for c in _GLOB if c in path)].rsplit("/", 1)[0]
            infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
            paths = [i.path for i in infos if i.type == pafs.FileType.File and fnmatch.fnmatch(i.path, path)]
        else:
            info = fs.get_file_info(path)
            if info.type == pafs.FileType.File:
                paths = [path]
            elif info.type == pafs.FileType.Directory:
                infos = fs.get_file_info(pafs.FileSelector(path, recursive=True))
                paths = [i.path for i in infos if i.type == pafs.FileType.File and _capture_file(i.path)]
            else:
                paths = []
    except (OSError, ValueError) as exc:  # pyarrow's errors (ArrowInvalid is a ValueError)
        raise InputError(f"{shown(raw)}: {str(exc).splitlines()[0]}") from None
    if not paths:
        raise InputError(f"{shown(raw)}: no such file, directory or matching capture")
    return [f"{scheme}://{p}" + (f"?{query}" if query else "") for p in sorted(paths)]


def expand_inputs(inputs: list[str] | tuple[str, ...]) -> list[str]:
    """Files, directories (their capture files, recursively), globs and URIs, as sorted absolute
    paths or URIs, each once.

    Executors open the files themselves, so local paths must be local to every executor or on a
    filesystem mounted at the same place on every one (NFS, a shared volume); ``file://`` URLs are
    local paths."""
    found: list[str] = []
    for raw in inputs:
        if is_uri(raw):
            found.extend(expand_uri(raw))
            continue
        item = raw.removeprefix("file://")
        if os.path.isdir(item):
            found.extend(
                str(p) for p in sorted(Path(item).rglob("*")) if p.is_file() and _capture_file(p.name)
            )
        elif os.path.isfile(item):
            found.append(os.path.abspath(item))
        else:
            matches = sorted(m for m in glob.glob(item, recursive=True) if os.path.isfile(m))
            if not matches:
                raise InputError(f"{raw}: no such file, directory or matching capture")
            found.extend(matches)
    return list(dict.fromkeys(p if is_uri(p) else os.path.abspath(p) for p in found))


def expand_series(inputs: list[str] | tuple[str, ...]) -> list[list[str]]:
    """`kwsniff spark --continuous`: the inputs as series of consecutive pieces, each series decoded
    as one capture. A directory given is one series (its capture files, recursively); any other
    input's files (a file, a glob, a URI) are grouped by the directory holding them. Series in the
    order their first input was given; a file named twice is in the first series that names it."""
    series: dict[str, list[str]] = {}
    taken: set[str] = set()
    for raw in inputs:
        item = raw.removeprefix("file://")
        whole = not is_uri(raw) and os.path.isdir(item)
        for path in expand_inputs([raw]):
            if path in taken:
                continue
            taken.add(path)
            key = os.path.abspath(item) if whole else shown(path).rsplit("/", 1)[0]
            series.setdefault(key, []).append(path)
    return list(series.values())


def open_input(path: str) -> CaptureReader:
    """A reader of the capture at a local path or a URI; CaptureError (one line) if it is none."""
    if not is_uri(path):
        return open_capture(path)
    try:
        fs, inner, scheme, _query = _filesystem(path)
        stream = fs.open_input_stream(inner)
    except (OSError, ValueError) as exc:
        raise CaptureError(f"{shown(path)}: cannot open ({str(exc).splitlines()[0]})") from None
    try:
        return open_capture_file(stream, f"{scheme}://{inner}")
    except BaseException:
        stream.close()
        raise
