"""tools/gen_schema.py: regeneration is byte-identical, and the merge and naming rules hold."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, cast

from kwsniff.protocol import _schema

# The generated tables are heterogeneous nested tuples; Any keeps mypy out of them.
APIS = cast(dict[int, Any], _schema.APIS)

REPO = Path(__file__).resolve().parent.parent


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_schema", REPO / "tools" / "gen_schema.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_schema"] = module
    spec.loader.exec_module(module)
    return module


gen_schema = _generator()


def test_regenerating_from_the_repositorys_specs_reproduces_the_checked_in_module() -> None:
    # The specs live in tools/ (a clean clone needs nothing beside it); never read at runtime.
    assert gen_schema.SPECS_OLD == REPO / "tools" / "kafka-message-specs"
    assert len(list(gen_schema.SPECS_OLD.glob("*.json"))) == 186
    assert len(list(gen_schema.SPECS_NEW.glob("*.json"))) == 203
    rendered = gen_schema.render(gen_schema.SPECS_OLD, gen_schema.SPECS_NEW)
    assert rendered == (REPO / "kwsniff" / "protocol" / "_schema.py").read_text(encoding="utf-8")


def test_check_mode_exits_zero_when_up_to_date_and_one_when_stale(tmp_path: Path) -> None:
    assert gen_schema.main(["--check"]) == 0
    stale = tmp_path / "_schema.py"
    stale.write_text("APIS = {}\n", encoding="utf-8")
    assert gen_schema.main(["--check", "--output", str(stale)]) == 1


def test_generated_module_names_both_snapshot_commits() -> None:
    first = (REPO / "kwsniff" / "protocol" / "_schema.py").read_text(encoding="utf-8").splitlines()[0]
    assert "4.0.0-SNAPSHOT commit 1eb7644349cb07139d6a3c1ad1986979647cac99" in first
    assert "4.5.0-SNAPSHOT commit d79bd502ec7fa49335afa422f442af80ed0ab8f6" in first
    assert first.endswith("Do not edit.")


def test_each_version_comes_from_the_newest_snapshot_that_defines_it() -> None:
    name, request, response = APIS[0]
    assert name == "Produce"
    assert [(lo, hi, flex) for lo, hi, flex, _fields in request] == [(0, 2, None), (3, 13, 9)]
    # Produce v13 (newest snapshot only) replaced the topic name by a topic id.
    newest_topic = {field[0]: field[2] for field in request[1][3][3][6]}
    assert newest_topic["name"] == (3, 12) and newest_topic["topic_id"] == (13, 13)


def test_apis_removed_in_kafka_4_still_come_from_the_old_snapshot() -> None:
    for key, name, highest in ((4, "LeaderAndIsr", 7), (5, "StopReplica", 4), (6, "UpdateMetadata", 8)):
        api_name, request, response = APIS[key]
        assert (api_name, request[0][0], request[-1][1], response[-1][1]) == (name, 0, highest, highest)
    assert APIS[7][1][0][:3] == (0, 3, 3)  # ControlledShutdown 0-3, flexible from 3


def test_header_specs_are_recorded() -> None:
    assert _schema.REQUEST_HEADER_VERSIONS == ((1, 2), (2, 32767))
    assert _schema.RESPONSE_HEADER_VERSIONS == ((0, 1), (1, 32767))


def test_snake_case_handles_acronym_runs() -> None:
    cases = {
        "ThrottleTimeMs": "throttle_time_ms",
        "ProducerId": "producer_id",
        "TopicId": "topic_id",
        "IsrNodes": "isr_nodes",
        "ClientSoftwareName": "client_software_name",
        "ZkVersion": "zk_version",
        "KRaftVersion": "kraft_version",
        "isKRaftController": "is_kraft_controller",
        "ISRNodes": "isr_nodes",
        "TopicID": "topic_id",
        "Records": "records",
    }
    assert {name: gen_schema.snake_case(name) for name in cases} == cases


def test_spec_reader_strips_comments_and_last_duplicate_key_wins(tmp_path: Path) -> None:
    path = tmp_path / "X.json"
    path.write_text('// licence\n{\n  // about\n  "a": 1, "v": "0+", "v": "2+"\n}\n', encoding="utf-8")
    assert gen_schema.load_spec(path) == {"a": 1, "v": "2+"}
    assert json.loads('{"v": 1, "v": 2}') == {"v": 2}  # same rule as the json module's default


def test_defaults_are_parsed_per_type() -> None:
    parse = gen_schema.parse_default
    assert parse({"name": "X", "default": "0x7fffffff"}, "int32", False) == 2147483647
    assert parse({"name": "X", "default": "-1"}, "int64", False) == -1
    assert parse({"name": "X", "default": -2}, "int32", False) == -2
    assert parse({"name": "X", "default": "true"}, "bool", False) is True
    assert parse({"name": "X", "default": False}, "bool", False) is False
    assert parse({"name": "X", "default": "null"}, "string", True) is None
    assert parse({"name": "X"}, "string", False) == ""
    assert parse({"name": "X", "default": "0.0"}, "float64", False) == 0.0
    assert parse({"name": "X", "default": "null"}, "[]", True) is None
    assert parse({"name": "X"}, "records", True) is None
