"""The schema layer's Arrow fast path gives exactly the verdicts of the per-row check: on
random tables of every kind (sample rows with values replaced by any value of their Arrow
type: nulls at any depth, bad enums, empty strings and lists, JSON and non-JSON text; sliced
tables), on rows that break the schema but fit the Arrow types, and it really takes the fast
path for clean committed data."""

import copy
import datetime as dt

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import load_table
from storage.samples import SAMPLES
from storage.schema import SHARED_COLUMNS, load
from validators.check import CheckContext
from validators.records import Records
from validators.validator import ValidateConfig
from validators.schema_arrow import surely_valid
from validators.schema_layer import SchemaCheck, _is_json, check_schema, content_schema

WORDS = ["", " ", "a", "system", "user", "assistant", "tool", "bridge", "{}", '{"q": 1}', "[1]", "{", "null", "x y"]


def nullable(t: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, nullable(f.type)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(nullable(t.value_type))
    return t


def values(t: pa.DataType):
    """Any value of Arrow type `t`, null a quarter of the time."""
    if pa.types.is_string(t):
        base = st.sampled_from(WORDS)
    elif pa.types.is_integer(t):
        base = st.integers(-2, 4)
    elif pa.types.is_floating(t):
        base = st.floats(allow_nan=True)
    elif pa.types.is_boolean(t):
        base = st.booleans()
    elif pa.types.is_timestamp(t):
        base = st.datetimes(timezones=st.just(dt.timezone.utc))
    elif pa.types.is_list(t):
        base = st.lists(values(t.value_type), max_size=3)
    elif pa.types.is_struct(t):
        base = st.fixed_dictionaries({f.name: values(f.type) for f in t})
    else:
        raise AssertionError(t)
    return st.one_of(base, base, base, st.none())


def content_type(kind: str) -> pa.StructType:
    return pa.struct([pa.field(f.name, nullable(f.type)) for f in load(kind).arrow
                      if f.name not in SHARED_COLUMNS or f.name == "id"])


def places(value, t: pa.DataType, path=()):
    """Every (path, Arrow type) inside a row, for a mutation to hit."""
    if path:
        yield path, t
    if pa.types.is_struct(t) and isinstance(value, dict):
        for f in t:
            yield from places(value.get(f.name), f.type, path + (f.name,))
    elif pa.types.is_list(t) and isinstance(value, list):
        for i, v in enumerate(value):
            yield from places(v, t.value_type, path + (i,))


@st.composite
def tables(draw):
    """A sample row of a kind, each copy with up to two values replaced by any value of
    their type (so rows are valid, nearly valid or broken), as a sliced Arrow table."""
    kind = draw(st.sampled_from(sorted(SAMPLES)))
    t = content_type(kind)
    rows = []
    for i in range(draw(st.integers(1, 5))):
        row = copy.deepcopy({**SAMPLES[kind], "id": f"r{i}"})
        for _ in range(draw(st.integers(0, 2))):
            path, vt = draw(st.sampled_from(list(places(row, t))))
            parent = row
            for key in path[:-1]:
                parent = parent[key]
            parent[path[-1]] = draw(values(vt))
        rows.append(row)
    table = pa.Table.from_pylist(rows, schema=pa.schema(list(t)))
    return kind, table.slice(draw(st.integers(0, len(rows) - 1)))


def per_row(table: pa.Table, kind: str) -> list:
    return [[check_schema(r, kind)] for r in table.to_pylist()]


def fast(table: pa.Table, kind: str) -> list:
    return SchemaCheck().run(Records.of_table(table), CheckContext(kind, ValidateConfig(kind=kind)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables())
def test_random_tables_get_the_per_row_verdicts(case):
    kind, table = case
    sure = surely_valid(table, content_schema(kind), {"json": _is_json})
    rows = table.to_pylist()
    assert all(check_schema(r, kind).passed for r, s in zip(rows, sure) if s)  # sure means it passes
    assert fast(table, kind) == per_row(table, kind)


def test_every_kinds_sample_row_is_sure():
    """The unchanged rows of the random tables above take the fast path, for every kind but
    the two whose schemas use what the fast path leaves to the per-row check: a pattern
    (tools.name) and the date-time format (labels.requested_at)."""
    for kind, row in SAMPLES.items():
        t = pa.Table.from_pylist([{**row, "id": "r0"}], schema=pa.schema(list(content_type(kind))))
        assert surely_valid(t, content_schema(kind), {"json": _is_json}).tolist() == [kind not in ("tools", "labels")]


def test_clean_committed_rows_take_the_fast_path_and_broken_ones_do_not(world):
    root, rows, _, _ = world
    trajectories = load_table("w", "trajectories", root)
    triples = load_table("w", "triples", root)
    for kind, t in (("trajectories", trajectories), ("triples", triples)):
        assert surely_valid(t, content_schema(kind), {"json": _is_json}).all(), kind
        assert fast(t, kind) == per_row(t, kind)
    broken = [copy.deepcopy(r) for r in trajectories.slice(0, 6).to_pylist()]
    broken[0]["route"] = None  # a required string
    broken[1]["messages"][0]["role"] = "robot"  # not in the enum
    broken[2]["messages"] = []  # minItems
    broken[3]["tools"][0]["parameters"] = "{bad"  # format json
    broken[4]["traj_id"] = ""  # minLength
    t = pa.Table.from_pylist(broken, schema=trajectories.schema.remove_metadata().set(
        trajectories.schema.get_field_index("route"), pa.field("route", pa.string())))
    sure = surely_valid(t, content_schema("trajectories"), {"json": _is_json})
    assert sure.tolist() == [False] * 5 + [True]
    verdicts = fast(t, "trajectories")
    assert verdicts == per_row(t, "trajectories") and [v[0].passed for v in verdicts] == [False] * 5 + [True]


def test_what_it_does_not_understand_is_never_sure():
    t = pa.table({"question": ["a", "b"], "answer": ["x", "y"]})
    base = {"type": "object", "properties": {"question": {"type": "string"}, "answer": {"type": "string"}}}
    assert surely_valid(t, base, {}).all()
    for change in ({"pattern": "^a"}, {"format": "email"}, {"const": "a"}, {"type": ["string", "integer"]}):
        schema = {**base, "properties": {**base["properties"], "question": {"type": "string", **change}}}
        assert not surely_valid(t, schema, {}).any(), change
    assert not surely_valid(t, {**base, "properties": {"question": {"type": "string"}}, "additionalProperties": False},
                            {}).any()
    assert not surely_valid(t, {**base, "required": ["hop_count"]}, {}).any()
    assert not surely_valid(t.set_column(0, "question", pa.array([1, 2])), base, {}).any()
