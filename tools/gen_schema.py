"""Generate kwsniff/protocol/_schema.py from Apache Kafka's JSON message specs.

Usage: python tools/gen_schema.py [--specs DIR_OLD DIR_NEW] [--check]

Two snapshots are merged: the old one (4.0.0-SNAPSHOT) still defines every version from 0 and the
APIs Kafka 4.0 removed (LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown); the new one
(4.5.0-SNAPSHOT) defines the newest versions but dropped the versions KIP-896 removed. For every
(api key, direction, version) the definition comes from the newest snapshot that lists that version
in its validVersions, so a sniffer can decode anything any Kafka release has spoken.

Output is data only (no prose), sorted and stable, so regeneration is byte-identical.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# Apache Kafka's message specs (Apache-2.0 data; each folder's SOURCE.txt says which commit), kept in
# the repository so that a clean clone regenerates the schema module on its own.
SPECS_OLD = REPO / "tools" / "kafka-message-specs"
SPECS_NEW = REPO / "tools" / "kafka-message-specs-latest"
# KRaft metadata-log record specs (apache/kafka metadata/src/main/resources/common/metadata/, only
# those the tables read; SOURCE.txt says which commit): the values of the records on __cluster_metadata.
METADATA_RECORDS = REPO / "tools" / "kafka-metadata-records"
OUTPUT = REPO / "kwsniff" / "protocol" / "_schema.py"

# Upper bound for open ranges ("3+"): api versions are int16 on the wire.
MAX_VERSION = 32767

PRIMITIVES = frozenset(
    {
        "int8",
        "int16",
        "int32",
        "int64",
        "uint16",
        "uint32",
        "float64",
        "bool",
        "string",
        "bytes",
        "uuid",
        "records",
    }
)
INT_TYPES = frozenset({"int8", "int16", "int32", "int64", "uint16", "uint32"})

Range = tuple[int, int]


class SpecError(Exception):
    """A spec file that this generator does not understand."""


# ---------------------------------------------------------------- releases

KIP_896 = "KIP-896: old client protocol versions removed; the spec says 'removed in Apache Kafka 4.0'"
KIP_833 = "KIP-833 (ZooKeeper mode removed): ZooKeeper-era inter-broker API; the spec says 'removed in Apache Kafka 4.0'"
SHARE_V0 = (
    "KIP-932 early access (4.0, unstable) ended: 4.1 upgrade notes (https://kafka.apache.org/41/getting-started/upgrade,"
    " 'Notable changes in 4.1.0': Queues for Kafka preview) and KAFKA-19057 (apache/kafka#19378): the RPCs were"
    " stabilised at v1, 4.0 clients do not work with 4.1 brokers"
)
# Which Apache Kafka release first refused which request versions: (api key, lowest, highest removed,
# release, why). The versions must be exactly those some snapshot defines below the newest snapshot's
# minimum validVersions (all of them when the newest says "none"): render() fails otherwise, so a new
# snapshot that drops a version cannot be generated until this table says which release dropped it.
# The ranges never come from a broker's ApiVersions: Kafka 4 brokers still advertise Produce v0-v2
# and refuse them (KAFKA-18659, ProduceRequest.json).
REMOVALS: tuple[tuple[int, int, int, str, str], ...] = (
    (0, 0, 2, "4.0", KIP_896),  # Produce
    (1, 0, 3, "4.0", KIP_896),  # Fetch
    (2, 0, 0, "4.0", KIP_896),  # ListOffsets
    (4, 0, 7, "4.0", KIP_833),  # LeaderAndIsr
    (5, 0, 4, "4.0", KIP_833),  # StopReplica
    (6, 0, 8, "4.0", KIP_833),  # UpdateMetadata
    (7, 0, 3, "4.0", KIP_833),  # ControlledShutdown
    (8, 0, 1, "4.0", KIP_896),  # OffsetCommit
    (9, 0, 0, "4.0", KIP_896),  # OffsetFetch
    (19, 0, 1, "4.0", KIP_896),  # CreateTopics
    (20, 0, 0, "4.0", KIP_896),  # DeleteTopics
    (23, 0, 1, "4.0", KIP_896),  # OffsetForLeaderEpoch
    (27, 0, 0, "4.0", KIP_896),  # WriteTxnMarkers
    (29, 0, 0, "4.0", KIP_896),  # DescribeAcls
    (30, 0, 0, "4.0", KIP_896),  # CreateAcls
    (31, 0, 0, "4.0", KIP_896),  # DeleteAcls
    (32, 0, 0, "4.0", KIP_896),  # DescribeConfigs
    (34, 0, 0, "4.0", KIP_896),  # AlterReplicaLogDirs
    (35, 0, 0, "4.0", KIP_896),  # DescribeLogDirs
    (38, 0, 0, "4.0", KIP_896),  # CreateDelegationToken
    (39, 0, 0, "4.0", KIP_896),  # RenewDelegationToken
    (40, 0, 0, "4.0", KIP_896),  # ExpireDelegationToken
    (41, 0, 0, "4.0", KIP_896),  # DescribeDelegationToken
    # AlterPartition v0-1 named topics; KIP-841 topic ids made v2 the baseline (AlterPartitionRequest.json).
    (56, 0, 1, "4.0", KIP_896),
    (76, 0, 0, "4.1", SHARE_V0),  # ShareGroupHeartbeat
    (77, 0, 0, "4.1", SHARE_V0),  # ShareGroupDescribe
    (78, 0, 0, "4.1", SHARE_V0),  # ShareFetch
    (79, 0, 0, "4.1", SHARE_V0),  # ShareAcknowledge
)
# Record formats (the magic byte) Kafka 4.0 brokers refuse on produce: message formats v0 and v1
# (KIP-724). Produce v3+ only ever carried magic 2, so these arrive in the Produce v0-v2 KIP-896 removed.
REMOVED_MAGIC = {0: "4.0", 1: "4.0"}


def removals(
    snapshots: list[dict[tuple[int, str], dict[str, Any]]],
) -> dict[int, tuple[tuple[int, int, str], ...]]:
    """api key -> ((lo, hi, release), ...) from REMOVALS, checked against the snapshots (newest first)."""
    table: dict[int, list[tuple[int, int, str]]] = {}
    for key, lo, hi, release, _why in REMOVALS:
        table.setdefault(key, []).append((lo, hi, release))
    keys = sorted({key for snap in snapshots for key, direction in snap if direction == "request"})
    for key in keys:
        newest = snapshots[0].get((key, "request"))
        newest_range = parse_versions(newest.get("validVersions")) if newest else None
        floor = newest_range[0] if newest_range else MAX_VERSION + 1
        known = set()
        for snap in snapshots:
            spec = snap.get((key, "request"))
            rng = parse_versions(spec.get("validVersions")) if spec else None
            if rng is not None:
                known.update(v for v in range(rng[0], min(rng[1], floor - 1) + 1))
        listed = {v for lo, hi, _ in table.get(key, ()) for v in range(lo, hi + 1)}
        if listed != known:
            raise SpecError(
                f"api key {key}: REMOVALS lists versions {sorted(listed)}, the specs removed {sorted(known)}"
            )
    return {key: tuple(sorted(ranges)) for key, ranges in sorted(table.items())}


# ---------------------------------------------------------------- reading


def load_spec(path: Path) -> dict[str, Any]:
    """Parse one spec file: JSON with whole-line // comments.

    A few specs repeat a key inside one object (DescribeTopicPartitions repeats "versions" with the
    same value); like Java's Jackson reader the LAST occurrence wins.
    """
    text = "\n".join(
        line for line in path.read_text(encoding="utf-8").splitlines() if not line.lstrip().startswith("//")
    )
    return json.loads(text, object_pairs_hook=dict)  # dict(pairs): last duplicate wins


def parse_versions(text: str | None) -> Range | None:
    """ "3+" -> (3, MAX), "1-4" -> (1, 4), "7" -> (7, 7), "none"/None -> None."""
    if text is None or text == "none":
        return None
    text = text.strip()
    if text.endswith("+"):
        return (int(text[:-1]), MAX_VERSION)
    if "-" in text:
        lo, hi = text.split("-")
        return (int(lo), int(hi))
    return (int(text), int(text))


def clip(rng: Range | None, lo: int, hi: int) -> Range | None:
    if rng is None:
        return None
    a, b = max(rng[0], lo), min(rng[1], hi)
    return (a, b) if a <= b else None


# Acronyms kept as one word when converting to snake_case ("KRaftVersion" -> "kraft_version",
# not "k_raft_version"). The rest follows kio / franz-go: a run of capitals is one word, and the
# last capital of a run starts the next word when a lower-case letter follows ("ISRNodes" -> "isr_nodes").
WORDS = {"KRaft": "Kraft"}


def snake_case(name: str) -> str:
    for word, plain in WORDS.items():
        name = name.replace(word, plain)
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return name.lower()


def parse_default(field: dict[str, Any], kind: str, nullable: bool) -> Any:
    """The field's default as a Python literal; implicit defaults follow Kafka's generator.

    Arrays: None (null) or () (empty). Structs: None (null) or () meaning "a struct of child defaults".
    uuid: the string form (the decoder turns it into uuid.UUID).
    """
    raw = field.get("default")
    if isinstance(raw, str) and raw == "null":
        if not nullable and kind not in ("string", "bytes", "records"):
            raise SpecError(f"null default on non-nullable field {field['name']}")
        return None
    if kind in INT_TYPES:
        return 0 if raw is None else (raw if isinstance(raw, int) else int(str(raw), 0))
    if kind == "bool":
        return False if raw is None else (raw if isinstance(raw, bool) else str(raw) == "true")
    if kind == "float64":
        return 0.0 if raw is None else float(raw)
    if kind == "string":
        return "" if raw is None else str(raw)
    if kind == "records":
        return None if nullable else b""  # Kafka's generator defaults records to null
    if kind == "bytes":
        return b""
    if kind == "uuid":
        return "00000000-0000-0000-0000-000000000000"
    if kind in ("[]", "struct"):
        if raw not in (None, ""):
            raise SpecError(f"unsupported default {raw!r} on {field['name']}")
        return ()
    raise SpecError(f"no default rule for {kind}")


# ---------------------------------------------------------------- field trees


def build_fields(
    fields: list[dict[str, Any]], lo: int, hi: int, common: dict[str, list[dict[str, Any]]]
) -> tuple[Any, ...]:
    """Field tuples valid somewhere in versions lo..hi, ranges clipped to lo..hi.

    Field tuple: (name, type, versions, nullable_versions, tag, default, children).
    """
    out = []
    for field in fields:
        versions = clip(parse_versions(field.get("versions")), lo, hi)
        if versions is None:
            continue
        ftype: str = field["type"]
        is_array = ftype.startswith("[]")
        element = ftype[2:] if is_array else ftype
        children: tuple[Any, ...] | None = None
        if element in PRIMITIVES:
            kind = ftype
        else:
            sub = field.get("fields")
            if sub is None:
                if element not in common:
                    raise SpecError(f"unknown type {ftype} of field {field['name']}")
                sub = common[element]
            children = build_fields(sub, versions[0], versions[1], common)
            kind = "[]struct" if is_array else "struct"
        nullable = clip(parse_versions(field.get("nullableVersions")), *versions)
        tag = field.get("tag")
        if tag is not None:
            tagged = parse_versions(field.get("taggedVersions"))
            if tagged is None or clip(tagged, *versions) != versions:
                # The decoder assumes a tagged field is tagged in every version it exists in.
                raise SpecError(f"field {field['name']}: taggedVersions differ from versions")
        default_kind = "[]" if is_array else ("struct" if children is not None else kind)
        default = parse_default(field, default_kind, nullable is not None)
        out.append((snake_case(field["name"]), kind, versions, nullable, tag, default, children))
    return tuple(out)


def common_structs(spec: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {cs["name"]: cs["fields"] for cs in spec.get("commonStructs", [])}


def load_snapshot(directory: Path) -> dict[tuple[int, str], dict[str, Any]]:
    """(api key, "request"|"response") -> spec, for API message files only."""
    specs: dict[tuple[int, str], dict[str, Any]] = {}
    for path in sorted(directory.glob("*.json")):
        spec = load_spec(path)
        if spec.get("type") in ("request", "response") and "apiKey" in spec:
            specs[(spec["apiKey"], spec["type"])] = spec
    return specs


def load_metadata_records(directory: Path) -> dict[tuple[int, str], dict[str, Any]]:
    """(record type, "metadata") -> spec."""
    specs: dict[tuple[int, str], dict[str, Any]] = {}
    for path in sorted(directory.glob("*.json")):
        spec = load_spec(path)
        if spec.get("type") == "metadata" and "apiKey" in spec:
            specs[(spec["apiKey"], "metadata")] = spec
    return specs


def segments_for(
    key: int, direction: str, snapshots: list[dict[tuple[int, str], dict[str, Any]]]
) -> tuple[Any, ...]:
    """Version segments (lo, hi, first_flexible_version, fields), each from one snapshot.

    snapshots is ordered newest first; each version is taken from the first snapshot that defines it.
    """
    owner: dict[int, int] = {}
    for index, snap in enumerate(snapshots):
        spec = snap.get((key, direction))
        rng = parse_versions(spec.get("validVersions")) if spec else None
        if rng is None:
            continue
        for version in range(rng[0], rng[1] + 1):
            owner.setdefault(version, index)
    segments = []
    versions = sorted(owner)
    start = 0
    for i in range(1, len(versions) + 1):
        if (
            i == len(versions)
            or versions[i] != versions[i - 1] + 1
            or owner[versions[i]] != owner[versions[start]]
        ):
            lo, hi = versions[start], versions[i - 1]
            spec = snapshots[owner[lo]][(key, direction)]
            flex = parse_versions(spec.get("flexibleVersions"))
            flex_lo = None if flex is None or flex[0] > hi else max(flex[0], lo)
            fields = build_fields(spec.get("fields", []), lo, hi, common_structs(spec))
            segments.append((lo, hi, flex_lo, fields))
            start = i
    return tuple(segments)


def api_name(key: int, snapshots: list[dict[tuple[int, str], dict[str, Any]]]) -> str:
    for snap in snapshots:
        spec = snap.get((key, "request"))
        if spec is not None and parse_versions(spec.get("validVersions")) is not None:
            return str(spec["name"]).removesuffix("Request")
    for snap in snapshots:
        spec = snap.get((key, "request"))
        if spec is not None:
            return str(spec["name"]).removesuffix("Request")
    raise SpecError(f"no request spec for api key {key}")


def header_info(directory: Path, name: str) -> tuple[Range | None, Range | None]:
    spec = load_spec(directory / f"{name}.json")
    return parse_versions(spec["validVersions"]), parse_versions(spec.get("flexibleVersions"))


# ---------------------------------------------------------------- writing


def commit_of(directory: Path) -> str:
    source = directory / "SOURCE.txt"
    match = re.search(r"^commit:\s+([0-9a-f]{40})", source.read_text(encoding="utf-8"), re.M)
    if match is None:
        raise SpecError(f"no commit line in {source}")
    return match.group(1)


def version_of(directory: Path) -> str:
    match = re.search(r"Kafka version:\s+(\S+)", (directory / "SOURCE.txt").read_text(encoding="utf-8"))
    if match is None:
        raise SpecError(f"no Kafka version line in {directory / 'SOURCE.txt'}")
    return match.group(1)


def write_fields(lines: list[str], fields: tuple[Any, ...], indent: str) -> None:
    for name, kind, versions, nullable, tag, default, children in fields:
        head = f"{indent}({name!r}, {kind!r}, {versions!r}, {nullable!r}, {tag!r}, {default!r}, "
        if children is None:
            lines.append(head + "None),")
        else:
            lines.append(head + "(")
            write_fields(lines, children, indent + "    ")
            lines.append(f"{indent})),")


def render(old: Path, new: Path) -> str:
    snapshots = [load_snapshot(new), load_snapshot(old)]  # newest first
    keys = sorted({key for snap in snapshots for key, _ in snap})
    lines = [
        f"# Generated by tools/gen_schema.py from Apache Kafka message specs ({version_of(old)} commit "
        f"{commit_of(old)}, {version_of(new)} commit {commit_of(new)}). Do not edit.",
        "# Regenerate: python tools/gen_schema.py",
        "#",
        "# APIS[api_key] = (name, request_segments, response_segments)",
        "# segment = (lowest_version, highest_version, first_flexible_version or None, fields)",
        "# field = (snake_name, type, (lo, hi) versions, (lo, hi) nullable versions or None,",
        "#          tag or None, default, children or None)",
        "# type: a primitive (int8 int16 int32 int64 uint16 uint32 float64 bool string bytes uuid records),",
        "#       '[]<primitive>', 'struct' or '[]struct' (children hold the element's fields).",
        "# default: arrays and structs use None for null and () for empty / all child defaults;",
        "#          uuid defaults are strings.",
        f"# Open version ranges end at {MAX_VERSION}.",
        "",
        f"REQUEST_HEADER_VERSIONS = {header_info(new, 'RequestHeader')!r}  # (valid, flexible)",
        f"RESPONSE_HEADER_VERSIONS = {header_info(new, 'ResponseHeader')!r}  # (valid, flexible)",
        "",
        "APIS = {",
    ]
    for key in keys:
        request = segments_for(key, "request", snapshots)
        response = segments_for(key, "response", snapshots)
        if not request and not response:
            continue
        lines.append(f"    {key}: (")
        lines.append(f"        {api_name(key, snapshots)!r},")
        for segments in (request, response):
            lines.append("        (")
            for lo, hi, flex_lo, fields in segments:
                lines.append(f"            ({lo}, {hi}, {flex_lo!r}, (")
                write_fields(lines, fields, "                ")
                lines.append("            )),")
            lines.append("        ),")
        lines.append("    ),")
    lines.append("}")
    lines += [
        "",
        "# REMOVED_IN[api_key] = ((lowest, highest, release), ...): request versions that brokers of that Apache",
        "# Kafka release and later refuse (tools/gen_schema.py REMOVALS says why, checked against the specs).",
        "REMOVED_IN = {",
        *(f"    {key}: {ranges!r}," for key, ranges in removals(snapshots).items()),
        "}",
        "# Record set magic -> the release whose brokers refuse it on produce (KIP-724).",
        f"REMOVED_MAGIC = {REMOVED_MAGIC!r}",
        "",
        f"# METADATA_RECORDS[record_type] = (name, segments): KRaft metadata-log records (commit {commit_of(METADATA_RECORDS)}),",
        "# the values of the records on __cluster_metadata; segments as APIS'.",
        "METADATA_RECORDS = {",
    ]
    records = load_metadata_records(METADATA_RECORDS)
    for key in sorted(k for k, _ in records):
        lines.append(f"    {key}: (")
        lines.append(f"        {records[(key, 'metadata')]['name']!r},")
        lines.append("        (")
        for lo, hi, flex_lo, fields in segments_for(key, "metadata", [records]):
            lines.append(f"            ({lo}, {hi}, {flex_lo!r}, (")
            write_fields(lines, fields, "                ")
            lines.append("            )),")
        lines.append("        ),")
        lines.append("    ),")
    lines += [
        "}",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--specs", nargs=2, metavar=("DIR_OLD", "DIR_NEW"), type=Path)
    parser.add_argument("--check", action="store_true", help="exit 1 if the checked-in file differs")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    old, new = args.specs if args.specs else (SPECS_OLD, SPECS_NEW)
    text = render(old, new)
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current == text:
            print(f"{args.output}: up to date")
            return 0
        diff = list(
            difflib.unified_diff(current.splitlines(), text.splitlines(), "checked-in", "regenerated", n=0)
        )
        changed = sum(1 for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---"))
        print(f"{args.output}: differs from regeneration ({changed} changed lines)")
        print("\n".join(diff[:40]))
        return 1
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
