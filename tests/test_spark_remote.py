"""`kwsniff spark` on captures in object storage: a real S3 endpoint (moto's server) on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from kwsniff.pipeline.run import run_capture
from kwsniff.pipeline.session import SessionOptions
from kwsniff.rows import ListSink
from kwsniff.spark.inputs import InputError, expand_inputs, open_input
from kwsniff.tables.schemas import SCHEMAS
from tests.realparts import free_port, stop_process, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
UPLOADS = {
    "fleet/host-a/kafka_python.pcap": ROOT / "tests/data/captures/kafka_python.pcap",
    "fleet/host-b/quickstart.pcap": ROOT / "sample_pcaps/quickstart.pcap",
    "fleet/notes.txt": ROOT / "README.md",
}
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "kwsniff",
    "AWS_SECRET_ACCESS_KEY": "kwsniff",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="module")
def s3() -> Iterator[str]:
    """A moto S3 server on 127.0.0.1 holding UPLOADS in bucket `caps`; yields the URI options."""
    import boto3

    port = free_port()
    server = subprocess.Popen(
        # The interpreter running the tests, not a moto_server on PATH (a venv is not on PATH).
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, server, None, timeout_s=30)  # type: ignore[arg-type]
        client = boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{port}",
            aws_access_key_id="kwsniff",
            aws_secret_access_key="kwsniff",
            region_name="us-east-1",
        )
        client.create_bucket(Bucket="caps")
        for key, path in UPLOADS.items():
            client.put_object(Bucket="caps", Key=key, Body=path.read_bytes())
        yield f"endpoint_override=127.0.0.1:{port}&scheme=http&region=us-east-1"
    finally:
        stop_process(server)  # type: ignore[arg-type]


@pytest.fixture
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)


def test_uris_expand_like_paths(s3: str, credentials: None) -> None:
    a, b = "s3://caps/fleet/host-a/kafka_python.pcap", "s3://caps/fleet/host-b/quickstart.pcap"
    assert expand_inputs([f"s3://caps/fleet/?{s3}"]) == [f"{a}?{s3}", f"{b}?{s3}"]  # captures only
    assert expand_inputs([f"s3://caps/fleet/*/quick*.pcap?{s3}"]) == [f"{b}?{s3}"]
    assert expand_inputs([f"{a}?{s3}", f"s3://caps/fleet/host-a?{s3}"]) == [f"{a}?{s3}"]
    with pytest.raises(
        InputError, match=r"^s3://caps/nothing/: no such file, directory or matching capture$"
    ):
        expand_inputs([f"s3://caps/nothing/?{s3}"])
    with pytest.raises(
        InputError, match=r"^nosuch://x/y: Unrecognized filesystem type in URI: nosuch://x/y$"
    ):
        expand_inputs(["nosuch://x/y"])
    with open_input(f"{a}?{s3}") as reader:
        assert reader.name == "kafka_python.pcap"
        assert len(list(reader.packets())) == 158


def test_spark_decodes_captures_in_s3_as_read_does(s3: str, tmp_path: Path) -> None:
    out = tmp_path / "fleet"
    command = [sys.executable, "-m", "kwsniff", "spark", f"s3://caps/fleet/?{s3}", "--out", str(out)]
    command += ["--master", "local[1]", "--flow-buckets", "2", "--quiet"]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=300, env={**os.environ, **CREDENTIALS}
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == ""  # --quiet: no summary; warnings still go to stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("kwsniff:")]
    assert warnings == [
        f"kwsniff: warning: s3://caps/{key}: not indexed by byte range (not on a local filesystem): "
        "each flow bucket task reads the whole file"
        for key in ("fleet/host-a/kafka_python.pcap", "fleet/host-b/quickstart.pcap")
    ]
    for table in ("requests", "connections", "partitions"):
        expected = []
        for path in (UPLOADS["fleet/host-a/kafka_python.pcap"], UPLOADS["fleet/host-b/quickstart.pcap"]):
            sink = ListSink()
            run_capture(path, sink, SessionOptions())
            expected += pa.Table.from_pylist(sink.tables[table], schema=SCHEMAS[table]).to_pylist()
        got = ds.dataset(out / table, partitioning="hive").to_table().drop_columns(["date"]).to_pylist()
        key = lambda row: tuple(repr(row[k]) for k in sorted(row))  # noqa: E731
        assert sorted(got, key=key) == sorted(expected, key=key), table
        assert len(got) > 10
