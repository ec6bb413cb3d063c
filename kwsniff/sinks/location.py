"""Where a dataset lives: a local directory or an `s3://bucket/prefix` URI, with its storage options.

An S3 location takes the usual AWS variables (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``) from the environment, and explicit
options (``--storage-option KEY=VALUE``, later) over them; an ``http://`` endpoint allows plain HTTP
(``AWS_ALLOW_HTTP``), as a test's or a laboratory's S3 server needs. The options are delta-rs's
(object_store's) names, handed to deltalake as they are and to pyarrow's S3FileSystem translated.

Nothing here touches the storage: a location is parsed, and a URI kwsniff cannot write (an unknown
scheme, no bucket) is a :class:`LocationError` whose message is one line for the user.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import pyarrow.fs

# The environment variables an S3 location reads, by delta-rs's option names (the same names).
AWS_VARIABLES = (
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_ALLOW_HTTP",
)
S3_SCHEMES = ("s3", "s3a")  # s3a:// is Spark's name for the same storage


class LocationError(Exception):
    """A location kwsniff cannot write; the message is one line for the user."""


@dataclass(frozen=True)
class Location:
    """A dataset's root: ``uri`` is a local absolute path or ``s3://bucket/prefix`` (no trailing ``/``)."""

    uri: str
    storage_options: Mapping[str, str] = field(default_factory=dict)

    @property
    def is_local(self) -> bool:
        return "://" not in self.uri

    def table_uri(self, table: str) -> str:
        """The URI of one kwsniff table of this dataset (``<root>/<table>``)."""
        return f"{self.uri}/{table}" if self.uri != "/" else f"/{table}"

    def filesystem(self) -> tuple[pyarrow.fs.FileSystem, str]:
        """A pyarrow filesystem for this location and the root's path in it (for copying files in)."""
        import pyarrow.fs as pafs

        if self.is_local:
            return pafs.LocalFileSystem(), self.uri
        parts = urlsplit(self.uri)
        options = self.storage_options
        endpoint = options.get("AWS_ENDPOINT_URL")
        scheme, endpoint_override = "https", None
        if endpoint:
            split = urlsplit(endpoint)
            scheme, endpoint_override = split.scheme or "https", split.netloc or split.path
        fs = pafs.S3FileSystem(
            access_key=options.get("AWS_ACCESS_KEY_ID"),
            secret_key=options.get("AWS_SECRET_ACCESS_KEY"),
            session_token=options.get("AWS_SESSION_TOKEN"),
            region=options.get("AWS_REGION"),
            endpoint_override=endpoint_override,
            scheme=scheme,
            # An endpoint of one's own (SeaweedFS, MinIO) serves buckets by path, not by virtual host.
            force_virtual_addressing=False,
        )
        return fs, f"{parts.netloc}{parts.path}"


def _aws_options(environ: Mapping[str, str], explicit: Mapping[str, str]) -> dict[str, str]:
    options = {name: environ[name] for name in AWS_VARIABLES if environ.get(name)}
    options.update(explicit)
    if options.get("AWS_ENDPOINT_URL", "").startswith("http://"):
        options.setdefault("AWS_ALLOW_HTTP", "true")
    return options


def parse_location(
    out: str | os.PathLike[str],
    storage_options: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Location:
    """``out`` as a :class:`Location`: a path (made absolute) or an ``s3://`` / ``s3a://`` URI.

    Raises :class:`LocationError` for any other scheme and for an S3 URI without a bucket, so that a
    URI is never taken for a local folder named after it."""
    text = os.fspath(out)
    explicit = dict(storage_options or {})
    if "://" not in text:
        if explicit:
            raise LocationError(f"--storage-option applies to s3:// outputs, not the local path {text}")
        return Location(str(Path(text).absolute()))
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme == "file":
        return Location(str(Path(parts.path).absolute()))
    if scheme not in S3_SCHEMES:
        raise LocationError(
            f"{text}: unknown scheme {parts.scheme}:// (kwsniff writes a path or s3://bucket/prefix)"
        )
    if not parts.netloc:
        raise LocationError(f"{text}: no bucket (expected s3://bucket/prefix)")
    prefix = parts.path.strip("/")
    uri = f"s3://{parts.netloc}/{prefix}" if prefix else f"s3://{parts.netloc}"
    return Location(uri, _aws_options(os.environ if environ is None else environ, explicit))
