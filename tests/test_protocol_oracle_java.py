"""Independent oracle: Kafka's own Java code (kafka-clients 3.9.1, from the PyPI wheel
shigawire-apache-flink-libraries) writes message bodies for every (api key, version, direction) its
generated schemas define; kwsniff must decode each to the values written.

tests/java/KafkaClientsEncoder.java is compiled with javac against the jar into a temporary directory
and run once per seed; it fills each version's Schema with seeded random values (nulls, empty and
non-empty arrays, strings, bytes, uuids) and prints the body and the values. The triples this covers
beyond kio and kafka-python are the ones test_protocol_oracle_kio.py's coverage test counts.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kwsniff.protocol import decode_request, decode_response, schema_triples
from kwsniff.rows.extract import error_rows

JAVA_SOURCE = Path(__file__).parent / "java" / "KafkaClientsEncoder.java"
SEEDS = (1, 2, 3)
Triple = tuple[int, int, str]


def _jars() -> list[Path]:
    spec = importlib.util.find_spec("pyflink")
    assert spec is not None and spec.submodule_search_locations, (
        "pip install shigawire-apache-flink-libraries"
    )
    lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
    names = ("kafka-clients", "slf4j-api", "jackson-databind", "jackson-core", "jackson-annotations")
    return [lib / f"{name}.jar" for name in names]


def java_bodies(tmp: Path) -> dict[Triple, list[tuple[bytes, dict[str, Any]]]]:
    """(api key, version, direction) -> [(body, values)], one per seed."""
    classpath = ":".join(str(j) for j in _jars())
    subprocess.run(
        ["javac", "-nowarn", "-d", str(tmp), "-cp", classpath, str(JAVA_SOURCE)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    out: dict[Triple, list[tuple[bytes, dict[str, Any]]]] = {}
    for seed in SEEDS:
        done = subprocess.run(
            ["java", "-cp", f"{classpath}:{tmp}", "KafkaClientsEncoder", str(seed)],
            check=True,
            capture_output=True,
            text=True,
            timeout=300,
        )
        for line in done.stdout.splitlines():
            key, version, direction, body, values = line.split(" ", 4)
            out.setdefault((int(key), int(version), direction), []).append(
                (bytes.fromhex(body), json.loads(values))
            )
    return out


@pytest.fixture(scope="module")
def bodies(tmp_path_factory: pytest.TempPathFactory) -> dict[Triple, list[tuple[bytes, dict[str, Any]]]]:
    return java_bodies(tmp_path_factory.mktemp("java"))


# Fields renamed in the newer specs kwsniff also follows (kafka-clients 3.9.1 has the old names).
JAVA_NAMES: dict[int, dict[str, str]] = {
    28: {"generation_id": "generation_id_or_member_epoch"},  # TxnOffsetCommit v3+ (KIP-848)
    52: {  # Vote (KIP-853)
        "candidate_epoch": "replica_epoch",
        "candidate_id": "replica_id",
        "candidate_directory_id": "replica_directory_id",
    },
    74: {"client_metrics_resources": "config_resources", "name": "resource_name"},  # KIP-1142
}


def same(ours: Any, theirs: Any, path: str = "", renames: dict[str, str] | None = None) -> str | None:
    """None when kwsniff's decoded value equals what Java wrote, else where they differ."""
    if isinstance(theirs, dict) and set(theirs) == {"hex"}:
        return (
            None
            if ours is not None and bytes(ours).hex() == theirs["hex"]
            else f"{path}: {ours!r} != {theirs}"
        )
    if isinstance(theirs, dict):
        if not isinstance(ours, dict):
            return f"{path}: {ours!r} is not a struct"
        theirs = {(renames or {}).get(name, name): value for name, value in theirs.items()}
        # Java leaves tagged fields out; kwsniff gives absent ones their defaults.
        if [name for name in ours if name in theirs] != list(theirs):
            return f"{path}: fields {list(ours)} != {list(theirs)}"
        for name, value in theirs.items():
            if (diff := same(ours[name], value, f"{path}.{name}", renames)) is not None:
                return diff
        return None
    if isinstance(theirs, list):
        if not isinstance(ours, list) or len(ours) != len(theirs):
            return f"{path}: {ours!r} != {theirs!r}"
        for index, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            if (diff := same(a, b, f"{path}[{index}]", renames)) is not None:
                return diff
        return None
    if isinstance(ours, uuid.UUID):
        ours = str(ours)
    return None if ours == theirs and type(ours) is type(theirs) else f"{path}: {ours!r} != {theirs!r}"


# Triples the jar writes that kwsniff's schema set defines differently, and why: they are not counted
# as covered (tests/test_protocol_oracle_kio.py lists them among the uncovered).
JAVA_DIFFERS: dict[Triple, str] = {
    (87, 0, "response"): "ReadShareGroupStateSummary v0 changed in place after 3.9.1 (LeaderEpoch added; "
    "the KIP-932 share-state RPCs were unstable in 3.9)",
}


def java_checked(bodies: dict[Triple, list[tuple[bytes, dict[str, Any]]]]) -> set[Triple]:
    return (set(bodies) & set(schema_triples())) - set(JAVA_DIFFERS)


def test_kafka_clients_bodies_decode_to_the_values_written(
    bodies: dict[Triple, list[tuple[bytes, dict[str, Any]]]],
) -> None:
    failures = []
    for triple in sorted(java_checked(bodies)):
        api_key, version, direction = triple
        decode = decode_request if direction == "request" else decode_response
        for body, values in bodies[triple]:
            try:
                diff = same(decode(api_key, version, body), values, renames=JAVA_NAMES.get(api_key))
            except Exception as exc:  # noqa: BLE001 - every triple is reported, not just the first
                diff = f"raised {exc!r}"
            if diff is not None:
                failures.append((triple, diff))
                break
    assert failures == []


def test_the_jar_covers_the_controller_apis(bodies: dict[Triple, list[tuple[bytes, dict[str, Any]]]]) -> None:
    # LeaderAndIsr, StopReplica, UpdateMetadata and ControlledShutdown: no other oracle has them.
    checked = java_checked(bodies)
    for key, versions in ((4, range(8)), (5, range(5)), (6, range(9)), (7, range(4))):
        for version in versions:
            assert {(key, version, "request"), (key, version, "response")} <= checked


# The triples of the schema set no independent encoder covers, and why: newer than kafka-clients 3.9.1
# and kio 0.6, and not in kafka-python. A triple leaving this list (a new oracle) must be removed from
# it; a triple joining it fails the test.
NO_INDEPENDENT_ENCODER: dict[str, tuple[int, int, str]] = {
    "ApiVersions v5": (18, 5, "newer than kafka-clients 3.9.1 and kio 0.6"),
    "TxnOffsetCommit v6": (28, 6, "newer than kafka-clients 3.9.1 and kio 0.6"),
    "DeleteGroups v3": (42, 3, "newer than kafka-clients 3.9.1 and kio 0.6"),
    "StreamsGroupHeartbeat v1": (88, 1, "KIP-1071, newer than kafka-clients 3.9.1 and kio 0.6"),
    "StreamsGroupDescribe v1": (89, 1, "KIP-1071, newer than kafka-clients 3.9.1 and kio 0.6"),
    "StreamsGroupTopologyDescriptionUpdate v0": (93, 0, "newer than kafka-clients 3.9.1 and kio 0.6"),
    "UnregisterController v0": (94, 0, "newer than kafka-clients 3.9.1 and kio 0.6"),
}


def test_independent_encoder_coverage_is_enforced(
    bodies: dict[Triple, list[tuple[bytes, dict[str, Any]]]],
) -> None:
    from test_protocol_oracle_kio import KAFKA_PYTHON_TRIPLES, KIO_COVERED

    total = set(schema_triples())
    python_oracles = KIO_COVERED | {triple for triple, _cls in KAFKA_PYTHON_TRIPLES}
    covered = python_oracles | java_checked(bodies)
    uncovered = {
        (key, version, d)
        for key, version, _why in NO_INDEPENDENT_ENCODER.values()
        for d in ("request", "response")
    }
    assert sorted(total - covered) == sorted(uncovered)
    # kio, then kafka-python, then the Java client: 722 of 736 (api key, version, direction) triples.
    assert (len(covered), len(total), len(java_checked(bodies) - python_oracles)) == (722, 736, 77)


def _error_codes(values: Any, renames: dict[str, str], path: str = "") -> Iterator[tuple[str, int]]:
    """Every non-zero *error_code field of the values Java wrote, in field order, with its path."""
    if isinstance(values, dict) and set(values) != {"hex"}:
        for name, value in values.items():
            where = f"{path}.{renames.get(name, name)}".lstrip(".")
            if name.endswith("error_code") and isinstance(value, int):
                if value != 0:
                    yield where, value
            else:
                yield from _error_codes(value, renames, where)
    elif isinstance(values, list):
        for item in values:
            yield from _error_codes(item, renames, path + "[]")


def test_error_rows_name_every_nonzero_error_code_java_wrote(
    bodies: dict[Triple, list[tuple[bytes, dict[str, Any]]]],
) -> None:
    """The `errors` table's extraction (kwsniff.rows.extract.error_rows, compiled per version) against
    the values Kafka's Java client wrote, walked here by field name: the independent counterpart of
    the equivalence test in test_fact_compiler.py."""
    checked = 0
    for triple in sorted(java_checked(bodies)):
        api_key, version, direction = triple
        if direction != "response":
            continue
        for body, values in bodies[triple]:
            rows = error_rows(api_key, version, decode_response(api_key, version, body))
            expected = list(_error_codes(values, JAVA_NAMES.get(api_key, {})))
            assert [(r["path"], r["error_code"]) for r in rows] == expected, triple
            checked += 1
    assert checked == 3 * len({t for t in java_checked(bodies) if t[2] == "response"}) > 900
