"""The S3 server of the Delta tests (tests/seaweed.py): SeaweedFS answers on 127.0.0.1 with the test's
own credentials only, and refuses a second `If-None-Match: *` PUT of a key, the conditional write
delta-rs commits a log entry with when many writers share a table on S3 (no locking provider)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError
from seaweed import GRPC_OFFSET, SeaweedS3, free_port_pairs, seaweed_s3


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    with seaweed_s3(tmp_path_factory.mktemp("seaweed")) as server:
        yield server


def test_a_second_put_if_none_match_of_a_key_is_refused(s3: SeaweedS3) -> None:
    client = s3.client()
    client.put_object(Bucket=s3.bucket, Key="log/00000.json", Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as refused:
        client.put_object(Bucket=s3.bucket, Key="log/00000.json", Body=b"second", IfNoneMatch="*")
    assert refused.value.response["Error"]["Code"] == "PreconditionFailed"
    assert client.get_object(Bucket=s3.bucket, Key="log/00000.json")["Body"].read() == b"first"
    assert s3.keys("log/") == ["log/00000.json"]


def test_only_the_identity_the_test_made_is_let_in(s3: SeaweedS3) -> None:
    stranger = boto3.client(
        "s3",
        endpoint_url=s3.endpoint,
        aws_access_key_id="someone",
        aws_secret_access_key="else",
        region_name="us-east-1",
    )
    with pytest.raises(ClientError) as refused:
        stranger.list_objects_v2(Bucket=s3.bucket)
    assert refused.value.response["Error"]["Code"] == "InvalidAccessKeyId"


def test_ports_and_their_grpc_ports_are_free_and_valid() -> None:
    ports = free_port_pairs(4)
    assert len(set(ports) | {p + GRPC_OFFSET for p in ports}) == 8
    assert all(p + GRPC_OFFSET <= 65_535 for p in ports)


def test_the_server_stops_and_removes_its_sockets(tmp_path: Path) -> None:
    with seaweed_s3(tmp_path / "own") as server:
        pass
    assert server.proc.returncode is not None
    own = [q for p in server.ports for q in (p, p + GRPC_OFFSET)]
    sockets = [s for q in own for s in Path("/tmp").glob(f"seaweedfs-*-{q}.sock")]
    assert sockets == []
