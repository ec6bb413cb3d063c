"""Independent oracles: messages encoded by kio (and, for versions kio lacks, kafka-python's hand-written
protocol classes) must decode to the same values with kwsniff, for every triple those libraries cover.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import io
import random
import types
import typing
import uuid
from pkgutil import resolve_name
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_writer
from kio.static import primitive
from kio.static.constants import EntityType
from kio.static.primitive import Records

from kwsniff.protocol import decode_request, decode_response, schema_triples

# kio 0.6 has no strategy for raw record batches; any bytes will do, they stay raw.
st.register_type_strategy(Records, st.binary(max_size=24).map(Records))

# Names kio spells differently: newer specs renamed two fields, kio appends "_" to a builtin name,
# and kwsniff keeps "KRaft" as one word (kio: k_raft_...).
KIO_NAMES = {
    (28, "generation_id"): "generation_id_or_member_epoch",  # TxnOffsetCommit, renamed in 2026 specs
    (88, "acceptable_recovery_lag"): "acceptable_recovery_lag_legacy",  # StreamsGroupHeartbeat
    (73, "id_"): "id",
    (82, "k_raft_version_feature"): "kraft_version_feature",
}

ZERO_UUID = uuid.UUID(int=0)


def kio_plain(value: Any, api_key: int) -> Any:
    """kio entity -> kwsniff-shaped plain values (kio uses timedelta/datetime for *_ms fields)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            KIO_NAMES.get((api_key, f.name), f.name): kio_plain(getattr(value, f.name), api_key)
            for f in dataclasses.fields(value)
        }
    if isinstance(value, tuple):
        return [kio_plain(item, api_key) for item in value]
    if isinstance(value, datetime.timedelta):
        return round(value / datetime.timedelta(milliseconds=1))
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, Records):
        return bytes(value)
    return value


def assert_same(ours: Any, theirs: Any, path: str = "") -> None:
    if isinstance(theirs, dict):
        assert isinstance(ours, dict), path
        assert "_unknown_tags" not in ours, path
        assert len(ours) == len(theirs), (path, list(ours), list(theirs))
        for (our_name, our_value), (their_name, their_value) in zip(
            ours.items(), theirs.items(), strict=True
        ):
            # kio drops the unit from duration fields: throttle_time_ms -> throttle_time.
            assert our_name in (their_name, their_name + "_ms"), (path, our_name, their_name)
            assert_same(our_value, their_value, f"{path}.{our_name}")
    elif isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), path
        for index, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            assert_same(a, b, f"{path}[{index}]")
    elif theirs is None and ours in (-1, ZERO_UUID):
        return  # kio models "no timestamp" (-1) and the zero uuid as None
    elif isinstance(theirs, float) and theirs != theirs:
        assert ours != ours, path  # NaN
    else:
        assert ours == theirs, (path, ours, theirs)


def _kio_triples() -> list[tuple[int, int, str, str]]:
    triples = []
    for key, name in sorted(api_key_map.items()):
        for version, paths in sorted(schema_name_map[name].items()):
            request, response = paths.get(EntityType.request), paths.get(EntityType.response)
            for direction, path in (("request", request), ("response", response)):
                if path is not None:
                    triples.append((key, version, direction, path))
    return triples


KIO_TRIPLES = _kio_triples()


def random_value(hint: Any, rng: random.Random) -> Any:
    """A random value of a kio field type: bounds, -1, 0, empty and unicode strings, nulls, nested arrays."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        options = [arg for arg in args if arg is not type(None)]
        return None if rng.random() < 0.25 else random_value(options[0], rng)
    if origin is tuple:
        return tuple(random_value(args[0], rng) for _ in range(rng.choice((0, 1, 1, 3))))
    if dataclasses.is_dataclass(hint):
        return random_entity(hint, rng)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return rng.choice(list(hint))
    if hint is bool:
        return rng.random() < 0.5
    if isinstance(hint, type) and issubclass(hint, datetime.timedelta):
        high = 2**31 - 1 if hint is primitive.i32Timedelta else 2**40
        return datetime.timedelta(milliseconds=rng.choice((0, high, rng.randrange(high))))
    if isinstance(hint, type) and issubclass(hint, datetime.datetime):
        return datetime.datetime.fromtimestamp(rng.randrange(2**41) / 1000, tz=datetime.UTC)
    if isinstance(hint, type) and issubclass(hint, Records):
        return Records(rng.randbytes(rng.choice((0, 5, 24))))
    if isinstance(hint, type) and issubclass(hint, bytes):
        return rng.randbytes(rng.choice((0, 3, 17)))
    if isinstance(hint, type) and issubclass(hint, str):
        return rng.choice(("", "t", "topic-\u00e9\u4e2d\u2713", "x" * rng.randrange(1, 40)))
    if hint is uuid.UUID:
        return uuid.UUID(int=rng.getrandbits(128))
    if isinstance(hint, type) and issubclass(hint, float):
        return rng.choice((0.0, -1.5, 1e300, rng.random()))
    if isinstance(hint, type) and issubclass(hint, primitive.Interval):
        low, high = hint.__low__, hint.__high__
        return rng.choice([low, high, 0, rng.randint(low, high)] + ([-1] if low < 0 else []))
    raise NotImplementedError(repr(hint))


def random_entity(entity_type: Any, rng: random.Random) -> Any:
    hints = typing.get_type_hints(entity_type)
    values = {}
    for field in dataclasses.fields(entity_type):
        has_default = (
            field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
        )
        if "tag" in field.metadata and has_default and rng.random() < 0.4:
            continue  # tagged field left out: encoded as absent, decoded as its default
        values[field.name] = random_value(hints[field.name], rng)
    return entity_type(**values)


@pytest.mark.parametrize(
    ("api_key", "version", "direction", "entity"),
    KIO_TRIPLES,
    ids=[f"{k}-v{v}-{d}" for k, v, d, _e in KIO_TRIPLES],
)
def test_kio_encoded_message_decodes_to_the_same_values(
    api_key: int, version: int, direction: str, entity: str
) -> None:
    entity_type = resolve_name(entity)
    writer = entity_writer(entity_type)
    decode = decode_request if direction == "request" else decode_response
    rng = random.Random(f"{api_key}-{version}-{direction}")  # reproducible per triple
    for _ in range(4):
        message = random_entity(entity_type, rng)
        buffer = io.BytesIO()
        writer(buffer, message)
        assert_same(decode(api_key, version, buffer.getvalue()), kio_plain(message, api_key))


HYPOTHESIS_TRIPLES = KIO_TRIPLES[::40]


@pytest.mark.parametrize(
    ("api_key", "version", "direction", "entity"),
    HYPOTHESIS_TRIPLES,
    ids=[f"{k}-v{v}-{d}" for k, v, d, _e in HYPOTHESIS_TRIPLES],
)
@settings(
    max_examples=3,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_kio_hypothesis_message_decodes_to_the_same_values(
    api_key: int, version: int, direction: str, entity: str, data: st.DataObject
) -> None:
    # kio's own hypothesis strategies (shrinking, wider unicode) on a sample; every triple is covered above.
    entity_type = resolve_name(entity)
    message = data.draw(st.from_type(entity_type))
    buffer = io.BytesIO()
    entity_writer(entity_type)(buffer, message)
    decode = decode_request if direction == "request" else decode_response
    assert_same(decode(api_key, version, buffer.getvalue()), kio_plain(message, api_key))


# ---------------------------------------------------------------- kafka-python for pre-KIP-896 versions


def _kafka_python_classes() -> dict[tuple[int, int, str], Any]:
    import importlib
    import pkgutil

    import kafka.protocol.old as old

    classes: dict[tuple[int, int, str], Any] = {}
    for module_info in pkgutil.iter_modules(old.__path__):
        module = importlib.import_module(f"kafka.protocol.old.{module_info.name}")
        for attribute in vars(module).values():
            if not isinstance(attribute, list) or not attribute:
                continue
            for cls in attribute:
                api_key, api_version = getattr(cls, "API_KEY", None), getattr(cls, "API_VERSION", None)
                if api_key is None or api_version is None or not hasattr(cls, "SCHEMA"):
                    continue
                direction = (
                    "response"
                    if cls.__name__.endswith("Response") or "Response" in cls.__name__
                    else "request"
                )
                classes.setdefault((api_key, api_version, direction), cls)
    return classes


# kafka-python's hand-written DescribeLogDirs v0 request reads partitions as one int32, where the spec
# (DescribeLogDirsRequest.json) and brokers use []int32: the oracle is wrong there, not kwsniff.
KAFKA_PYTHON_WRONG = {(35, 0, "request")}

KIO_COVERED = {(k, v, d) for k, v, d, _e in KIO_TRIPLES}
KAFKA_PYTHON_TRIPLES = sorted(
    (triple, cls)
    for triple, cls in _kafka_python_classes().items()
    if triple not in KIO_COVERED | KAFKA_PYTHON_WRONG and triple in set(schema_triples())
)


def schema_strategy(field_type: Any) -> st.SearchStrategy[Any]:
    from kafka.protocol.old import types

    simple: dict[type, st.SearchStrategy[Any]] = {
        types.Int8: st.integers(-(2**7), 2**7 - 1),
        types.Int16: st.integers(-(2**15), 2**15 - 1),
        types.Int32: st.integers(-(2**31), 2**31 - 1),
        types.Int64: st.integers(-(2**63), 2**63 - 1),
        types.Boolean: st.booleans(),
        types.Bytes: st.binary(max_size=16),
        types.String: st.text(max_size=12),
    }
    for kind, strategy in simple.items():
        if isinstance(field_type, kind) or field_type is kind:
            return strategy
    if isinstance(field_type, types.Schema):
        return st.tuples(*(schema_strategy(f) for f in field_type.fields))
    if isinstance(field_type, types.Array):
        return st.lists(schema_strategy(field_type.array_of), max_size=3)
    raise NotImplementedError(repr(field_type))


def plain_values(ours: Any) -> Any:
    """Decoded dict -> the nested tuples kafka-python's Schema.encode takes (field order = spec order)."""
    if isinstance(ours, dict):
        return tuple(plain_values(value) for value in ours.values())
    if isinstance(ours, list):
        return [plain_values(item) for item in ours]
    return ours


@pytest.mark.parametrize(
    ("triple", "cls"), KAFKA_PYTHON_TRIPLES, ids=[f"{k}-v{v}-{d}" for (k, v, d), _c in KAFKA_PYTHON_TRIPLES]
)
@settings(max_examples=3, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_kafka_python_encoded_old_version_decodes_to_the_same_values(
    triple: tuple[int, int, str], cls: Any, data: st.DataObject
) -> None:
    api_key, version, direction = triple
    values = data.draw(schema_strategy(cls.SCHEMA))
    body = cls.SCHEMA.encode(values)
    decode = decode_request if direction == "request" else decode_response
    assert plain_values(decode(api_key, version, body)) == values


def test_kio_and_kafka_python_coverage_is_enforced() -> None:
    # The triples left to the Java client, and the overall figure: test_protocol_oracle_java.py.
    covered = KIO_COVERED | {triple for triple, _cls in KAFKA_PYTHON_TRIPLES}
    assert covered <= set(schema_triples())
    assert (len(covered), len(KIO_COVERED)) == (645, 604)
