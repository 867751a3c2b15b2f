"""The validated readers' common ground (`vaco_jax.infra.records`): bounds, typed fields, one
line naming the file and the field; and the rule that no code of `vaco_jax` or `benchmarks`
parses a file's bytes outside it."""

from __future__ import annotations

import ast
import json
import math
import os
from pathlib import Path

import pytest

from vaco_jax.infra import records, run_folder
from vaco_jax.infra.records import Field, Kind, RecordError
from vaco_jax.report import summary

ROOT = Path(__file__).resolve().parents[2]
SMALL = Kind("test", 1 << 10, 4)


def _field(value) -> Field:
    return Field("'f.json'", "a.b", value)


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "/abs", "..\\x", "x\x1b[31m", "x\ny",
                                  "nul\0", "n" * 256])
def test_a_name_that_is_not_one_plain_component_is_refused(name):
    with pytest.raises(RecordError, match=r"^'f.json': a.b: .* is not a plain name"):
        _field(name).name()


def test_a_plain_name_is_kept():
    assert _field("toy_reach-ppo-e4m4-0").name() == "toy_reach-ppo-e4m4-0"


def test_integers_are_bounded_and_exact():
    assert _field(3).integer(0, 4) == 3 and _field(4.0).integer(0, 4) == 4
    for value, message in [(5, "out of range"), (-1, "out of range"), (True, "integer"),
                           (2.5, "integer"), (math.inf, "integer"), ("3", "integer")]:
        with pytest.raises(RecordError, match=message):
            _field(value).integer(0, 4)


def test_numbers_are_finite_unless_said_otherwise():
    assert _field(0.5).number(0, 1) == 0.5
    for value in (math.nan, math.inf, -math.inf):
        with pytest.raises(RecordError, match="finite"):
            _field(value).number()
    assert math.isnan(_field(math.nan).number(finite=False))
    with pytest.raises(RecordError, match="out of range"):
        _field(2.0).number(0, 1)


def test_lists_and_tables_are_bounded_and_named_in_the_error():
    items = _field([1, 2, 3]).items(3)
    assert [f.path for f in items] == ["a.b[0]", "a.b[1]", "a.b[2]"]
    with pytest.raises(RecordError, match="over the 2 allowed"):
        _field([1, 2, 3]).items(2)
    with pytest.raises(RecordError, match="where 2 belong"):
        _field([1, 2, 3]).items(length=2)
    with pytest.raises(RecordError, match=r"a.b.c: missing"):
        _field({})["c"]
    with pytest.raises(RecordError, match="must be a table"):
        _field([])["c"]
    with pytest.raises(RecordError, match="unknown key"):
        _field({"x": 1}).table(("y",))


def test_json_past_its_bounds_is_refused_in_one_line(tmp_path):
    path = tmp_path / "r.json"
    path.write_text('{"a": "' + "x" * 2000 + '"}')
    with pytest.raises(RecordError, match="2,009 bytes, over the 1,024 bytes allowed in a test record"):
        records.load_json(path, SMALL)
    path.write_text("[" * 5 + "]" * 5)
    with pytest.raises(RecordError, match="nested deeper than the 4 levels"):
        records.load_json(path, SMALL)
    # Deeper than Python's own parser can go: still one line, no RecursionError.
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(RecordError, match="nested deeper"):
        records.parse_json(deep, "'d.json'", Kind("deep", 1 << 20, 4))
    path.write_text('{"a": 1, "a": 2}')
    with pytest.raises(RecordError, match="a key is written twice"):
        records.load_json(path, SMALL)
    path.write_bytes(b"\xff")
    with pytest.raises(RecordError, match="not valid JSON"):
        records.load_json(path, SMALL)


def test_toml_nested_too_deep_is_one_line():
    text = "a = " + "[" * 5000 + "]" * 5000
    with pytest.raises(RecordError, match="nested deeper"):
        records.parse_toml(text, "'e.toml'")
    assert records.parse_toml("a = [[1]]", "'e.toml'")["a"].value == [[1]]


def test_shown_escapes_and_cuts():
    assert records.shown("\x1b[31mred\n") == "\\x1b[31mred\\n"
    assert records.shown("x" * 1000, 10) == "xxxxxxxxxx... (1,000 characters)"


# ---------------------------------------------------------------- no parse outside the readers

PARSERS = {"json.load", "json.loads", "tomllib.load", "tomllib.loads", "pandas.read_parquet",
           "pandas.read_csv", "pandas.read_json", "pyarrow.parquet.read_table", "numpy.load",
           "pickle.load", "pickle.loads"}
READERS = ROOT / "vaco_jax" / "infra" / "records.py"


def _imported_names(tree: ast.AST) -> dict[str, str]:
    """What each name bound by an import stands for (`pd` -> `pandas`, `loads` ->
    `json.loads`), so an alias cannot hide a parser."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _dotted(node: ast.AST, names: dict[str, str]) -> str | None:
    """The full name a called expression `a.b.c` stands for, its first name resolved."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([names.get(node.id, node.id), *reversed(parts)])


def _parse_calls(path: Path) -> list[str]:
    """The calls in `path` that parse bytes (`json.loads(...)` and kin, under any alias), but a
    round trip of the code's own value (`json.loads(json.dumps(...))`)."""
    tree = ast.parse(path.read_text(), str(path))
    names = _imported_names(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or _dotted(node.func, names) not in PARSERS:
            continue
        argument = node.args[0] if node.args else None
        round_trip = (isinstance(argument, ast.Call)
                      and _dotted(argument.func, names) == "json.dumps")
        if not round_trip:
            found.append(f"{path}:{node.lineno}: {_dotted(node.func, names)}")
    return found


def _sources() -> list[Path]:
    return sorted([*(ROOT / "vaco_jax").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")])


def test_no_code_parses_a_file_outside_the_readers():
    outside = [call for path in _sources() if path != READERS for call in _parse_calls(path)]
    assert not outside, "parse through vaco_jax.infra.records instead:\n" + "\n".join(outside)


def test_the_source_walk_finds_a_parse(tmp_path):
    """The rule above can fail: it finds each way of parsing a file, and lets a round trip be."""
    probe = tmp_path / "probe.py"
    probe.write_text("import json, tomllib\nimport pandas as pd\nimport numpy\n"
                     "from json import loads as parse\nimport pickle as p\n"
                     "a = json.loads(open('x').read())\nb = tomllib.load(open('y', 'rb'))\n"
                     "c = pd.read_parquet('z')\nd = json.loads(json.dumps({}))\n"
                     "e = parse('{}')\nf = p.loads(b'')\ng = numpy.load('h')\n")
    assert [c.split(": ")[-1] for c in _parse_calls(probe)] == [
        "json.loads", "tomllib.load", "pandas.read_parquet", "json.loads", "pickle.loads",
        "numpy.load"]


# ---------------------------------------------------------------- typed readers of records

SUMMARY = ROOT / "experiments" / "results" / "quick" / "summary.json"


@pytest.mark.parametrize("forged, message", [
    ('"reference": NaN', "holds the number nan"), ('"reference": Infinity', "number inf"),
    ('"reference": 1e400', "number inf"), ('"reference": "500"', "is not a float"),
    ('"reference": 1' + "0" * 400, "integer of 401 digits"),
    ('"reference": 1' + "0" * 5000, "not valid JSON"), ('"reference": {}', "is not a float")])
def test_a_summary_holding_what_a_report_never_writes_is_refused(tmp_path, forged, message):
    assert summary.load(SUMMARY).normalisation["inverted_pendulum"].reference == 500.0
    text = SUMMARY.read_text()
    assert '"reference": 500.0' in text
    (tmp_path / "summary.json").write_text(text.replace('"reference": 500.0', forged))
    with pytest.raises(ValueError, match=message):
        summary.load(tmp_path / "summary.json")


@pytest.mark.parametrize("key, forged", [("normalisation", []), ("cells", {"x": 1}),
                                         ("kept_gain", 3), ("cells", [7])])
def test_a_summary_table_of_the_wrong_shape_is_a_value_error(tmp_path, key, forged):
    saved = json.loads(SUMMARY.read_text())
    saved[key] = forged
    (tmp_path / "summary.json").write_text(json.dumps(saved))
    with pytest.raises(ValueError, match="is not a (list|table)|not a summary any version"):
        summary.load(tmp_path / "summary.json")


def test_a_record_that_is_not_a_plain_file_is_refused_without_waiting(tmp_path):
    pipe = tmp_path / "status.json"
    os.mkfifo(pipe)
    with pytest.raises(RecordError, match="not a plain file"):
        records.load_json(pipe, records.RUN_STATUS)


@pytest.mark.parametrize("text", ["a = 1" + "0" * 30, "a = [[[[[[[[[1]]]]]]]]]"])
def test_toml_past_its_bounds_is_refused(text):
    with pytest.raises(RecordError):
        records.parse_toml(text, "'e.toml'")


@pytest.mark.parametrize("status, field", [
    ({"updates_done": 5, "num_updates": 4, "complete": True, "runs": []}, "updates_done"),
    ({"updates_done": 1, "num_updates": 4, "complete": "yes", "runs": []}, "complete"),
    ({"updates_done": 1, "num_updates": 4, "complete": False,
      "runs": [{"diverged": False, "diverged_at": 1e400}]}, "runs[0].diverged_at"),
    ({"updates_done": 1, "complete": False, "runs": []}, "num_updates")])
def test_a_damaged_status_is_warned_about_and_read_as_none(tmp_path, capsys, status, field):
    (tmp_path / "status.json").write_text(json.dumps(status))
    assert run_folder.read_status(tmp_path) is None
    assert field in capsys.readouterr().err


def test_a_status_of_other_runs_than_its_folder_holds_is_damaged(tmp_path, capsys):
    status = {"updates_done": 4, "num_updates": 4, "complete": True,
              "runs": [{"diverged": False, "diverged_at": -1}]}
    (tmp_path / "status.json").write_text(json.dumps(status))
    assert run_folder.read_status(tmp_path, runs=1, num_updates=4).complete
    assert run_folder.read_status(tmp_path, runs=2, num_updates=4) is None
    assert "lists 1 runs where the folder holds 2" in capsys.readouterr().err
    assert run_folder.read_status(tmp_path, runs=1, num_updates=8) is None
