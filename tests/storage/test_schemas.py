"""The JSON Schema and the Arrow schema of every record kind agree field by field."""

import json

import jsonschema
import pyarrow as pa
import pytest

from storage.schema import KINDS, SCHEMA_DIR, SHARED_COLUMNS, RowError, load, load_json, record_id
from storage.shards import stamp
from storage.samples import SAMPLES

SCALARS = {"string": pa.string(), "integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_()}


def assert_agree(prop: dict, arrow_type: pa.DataType, where: str) -> None:
    t = prop["type"]
    t = [x for x in t if x != "null"][0] if isinstance(t, list) else t
    if t == "object":
        assert pa.types.is_struct(arrow_type), where
        names = [arrow_type.field(i).name for i in range(arrow_type.num_fields)]
        assert names == list(prop["properties"]), where
        for i, name in enumerate(names):
            f = arrow_type.field(i)
            sub = prop["properties"][name]
            nullable = name not in prop.get("required", []) or "null" in (sub["type"] if isinstance(sub["type"], list) else [])
            assert f.nullable == nullable, f"{where}.{name} nullability"
            assert_agree(sub, f.type, f"{where}.{name}")
    elif t == "array":
        assert pa.types.is_list(arrow_type), where
        assert_agree(prop["items"], arrow_type.value_type, f"{where}[]")
    elif t == "string" and prop.get("format") == "date-time":
        assert arrow_type == pa.timestamp("us", tz="UTC"), where
    elif t == "integer" and prop.get("x-arrow") == "int32":
        assert arrow_type == pa.int32(), where
    else:
        assert arrow_type == SCALARS[t], f"{where}: {arrow_type} vs {t}"


@pytest.mark.parametrize("kind", KINDS)
def test_json_and_arrow_agree_field_by_field(kind):
    s = load(kind)
    js = load_json(kind)
    jsonschema.Draft202012Validator.check_schema(js)
    assert s.arrow.names == list(js["properties"])
    assert s.arrow.names[: len(SHARED_COLUMNS)] == list(SHARED_COLUMNS)
    for f in s.arrow:
        prop = js["properties"][f.name]
        nullable = f.name not in js["required"] or "null" in (prop["type"] if isinstance(prop["type"], list) else [])
        assert f.nullable == nullable, f"{kind}.{f.name}"
        assert_agree(prop, f.type, f"{kind}.{f.name}")
    assert s.version == json.loads((SCHEMA_DIR / f"{kind}.json").read_text())["x-schema-version"]


@pytest.mark.parametrize("kind", KINDS)
def test_sample_row_round_trips_through_arrow(kind):
    s = load(kind)
    (row,) = stamp([SAMPLES[kind]], s, "run1", {"model": "m"})
    s.validate_rows([row])
    back = pa.Table.from_pylist([row], schema=s.arrow).to_pylist()[0]
    assert back == row
    s.validate_rows([back])


def test_every_kind_has_a_sample_and_a_file():
    assert set(SAMPLES) == set(KINDS)
    assert {p.stem for p in SCHEMA_DIR.glob("*.json") if not p.stem.startswith("_")} == set(KINDS)


def test_bad_row_error_names_row_and_field():
    s = load("trajectories")
    good = stamp([SAMPLES["trajectories"]], s, "r")[0]
    bad = json.loads(json.dumps(good, default=str))
    bad["messages"][2]["tool_calls"][0]["arguments"] = "{not json"
    with pytest.raises(RowError) as e:
        s.validate_rows([good, bad])
    assert e.value.row == 1 and e.value.field == "messages[2].tool_calls[0].arguments"
    bad["messages"][2]["tool_calls"][0]["arguments"] = "{}"
    bad["messages"][1]["role"] = "robot"
    with pytest.raises(RowError, match=r"row 0: field 'messages\[1\].role'"):
        s.validate_rows([bad])


def test_record_id_is_a_content_hash():
    a = dict(SAMPLES["documents"])
    assert record_id(a) == record_id(dict(reversed(list(a.items()))))
    assert record_id({**a, "run_id": "other"}) == record_id(a)
    assert record_id({**a, "text": "changed"}) != record_id(a)
