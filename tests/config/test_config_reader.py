"""One bounded reader for every configuration file (``validation.read_config_file``).

The run config, the engine config and the parity spec are read by it: a size bound
(``CONFIG_MAX_BYTES``), UTF-8, parse errors as ``path:line: rule`` on one line, the YAML
reader's depth and alias bounds (docs/config-bounds.md, "Size and depth"). Before it the
engine config and the parity spec read a whole file of any size (``read_text``,
``read_bytes``) and a YAML error spanned several lines naming ``<unicode string>``.
The CLI side (FIFOs, a 64 GiB file, exit 2): tests/cli/test_config_file_reader.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from workbench.config import RunConfig
from workbench.config.engine_file import read_engine_file
from workbench.config.validation import CONFIG_MAX_BYTES
from workbench.errors import ConfigError
from workbench.qualify import load_spec

#: every caller of the reader, with the role its messages name
READERS: dict[str, tuple[Callable[[Path], Any], str]] = {
    "run config": (RunConfig.from_file, "config"),
    "engine config": (read_engine_file, "engine config"),
    "parity spec": (load_spec, "parity spec"),
}


def _error(read: Callable[[Path], Any], path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        read(path)
    text = str(info.value)
    assert "\n" not in text and "<unicode string>" not in text, text
    return text


@pytest.mark.parametrize("caller", READERS)
def test_a_file_past_the_bound_is_refused_naming_the_file_and_the_bound(tmp_path, caller):
    read, what = READERS[caller]
    big = tmp_path / "big.json"
    with big.open("wb") as fh:  # sparse: one byte past the bound, all zeros
        fh.truncate(CONFIG_MAX_BYTES + 1)
    assert _error(read, big) == (f"{big}: {what} file larger than the bound of "
                                 f"{CONFIG_MAX_BYTES:,} bytes (docs/config-bounds.md)")


def test_a_file_at_the_bound_is_read(tmp_path):
    run = tmp_path / "run.json"
    text = json.dumps({"seed": 7})
    run.write_text(text + " " * (CONFIG_MAX_BYTES - len(text)))
    assert run.stat().st_size == CONFIG_MAX_BYTES
    assert RunConfig.from_file(run).seed == 7


@pytest.mark.parametrize("caller", READERS)
def test_bytes_that_are_not_utf8_are_named_with_the_file_and_line(tmp_path, caller):
    read, what = READERS[caller]
    f = tmp_path / "latin.yaml"
    f.write_bytes(b"seed: 1\nname: caf\xe9\n")
    assert _error(read, f) == (f"{f}:2: {what} file is not UTF-8 text (YAML or JSON): "
                               "byte 0xe9 at offset 17")


PARSE_ERRORS = [  # (file name, text, line: rule); engine files are YAML, whatever the name
    ("c.yaml", "seed: 1\nrows: [1, 2\nname: x\n", "3: invalid YAML: while parsing a flow "
     "sequence: expected ',' or ']', but got ':' (column 5)"),
    ("c.yaml", "seed: 1\nname: a\x00b\n", "2: invalid YAML: character #x0000: special "
     "characters are not allowed"),
    # a missing comma: the same message on every Python (3.13 words a trailing comma
    # differently from 3.11)
    ("c.json", '{\n  "seed": 1\n  "x": 2\n}\n', "3: invalid JSON: Expecting ',' delimiter "
     "(column 3)"),
]


@pytest.mark.parametrize("caller", READERS)
@pytest.mark.parametrize(("name", "text", "rule"), PARSE_ERRORS, ids=["flow", "nul", "json"])
def test_a_parse_error_is_one_line_naming_the_file_line_and_rule(tmp_path, caller, name, text,
                                                                  rule):
    read, _what = READERS[caller]
    f = tmp_path / name
    f.write_text(text)
    if caller == "engine config" and name.endswith(".json"):  # read as YAML, whatever the name
        assert _error(read, f) == (f"{f}:3: invalid YAML: while parsing a flow mapping: "
                                   "expected ',' or '}', but got ':' (column 6)")
        f.write_text('{\n  "seed": 1,\n}\n')
        assert read(f) == {"seed": 1}  # YAML's flow mapping takes a trailing comma
    else:
        assert _error(read, f) == f"{f}:{rule}"


@pytest.mark.parametrize("caller", READERS)
def test_an_integer_past_the_conversion_bound_is_a_config_error(tmp_path, caller):
    """Python refuses to convert a 5,000-digit integer with a ValueError, which escaped
    every reader as a traceback."""
    read, _what = READERS[caller]
    for name in ("n.json", "n.yaml"):
        f = tmp_path / name
        f.write_text('{"seed": ' + "1" * 5000 + "}")
        text = _error(read, f)
        kind = "YAML" if caller == "engine config" or name.endswith(".yaml") else "JSON"
        assert text.startswith(f"{f}: invalid {kind}: Exceeds the limit (4300 digits)"), text


@pytest.mark.parametrize("caller", READERS)
def test_missing_and_directory_are_named_by_kind(tmp_path, caller):
    read, what = READERS[caller]
    assert _error(read, tmp_path / "none.json") == (
        f"{tmp_path / 'none.json'}: cannot read {what}: no such file")
    assert _error(read, tmp_path) == (
        f"{tmp_path}: cannot read {what}: not a regular file: a directory")



@pytest.mark.parametrize("caller", READERS)
@pytest.mark.parametrize(("name", "text", "rule"), [
    ("c.yaml", "seed: 1\narrival:\n  rate: 1\n  mode: trace-timed\n  rate: 4\n",
     "5: key 'rate' is given twice in one mapping (first on line 3); YAML would keep the "
     "last silently: say it once"),
    ("c.json", '{"seed": 1,\n "arrival": {"rate": 1,\n  "rate": 4}}\n',
     "3: key 'rate' is given twice in one object; JSON would keep the last silently: "
     "say it once"),
], ids=["yaml", "json"])
def test_a_key_given_twice_is_refused_not_the_last_kept(tmp_path, caller, name, text, rule):
    """PyYAML and json both keep the last of two equal keys without a word: a config that
    said ``rate`` twice ran the second without the user knowing which was meant."""
    read, _what = READERS[caller]
    f = tmp_path / name
    f.write_text(text)
    if caller == "engine config" and name.endswith(".json"):  # read as YAML, whatever the name
        rule = ("3: key 'rate' is given twice in one mapping (first on line 2); YAML would "
                "keep the last silently: say it once")
    assert _error(read, f) == f"{f}:{rule}"


def test_a_yaml_merge_key_may_still_be_overridden(tmp_path):
    """``<<: *base`` then a key of the base is YAML's override, not a key given twice."""
    f = tmp_path / "e.yaml"
    f.write_text("base: &b {block_size: 16, num_blocks: 64}\n"
                 "engine:\n  <<: *b\n  num_blocks: 128\n")
    from workbench.config.validation import load_yaml

    assert load_yaml(str(f), f.read_text())["engine"] == {"block_size": 16, "num_blocks": 128}


@pytest.mark.parametrize(("name", "text", "said"), [
    ("c.yaml", "trace: t.csv\narrival:\n  mode: saturated\n  max_concurrency: 0\n",
     ":4: arrival.max_concurrency: expected an integer"),
    ("c.yaml", "trace: t.csv\narrival:\n  mode: nope\n", ":3: arrival.mode 'nope' is unknown"),
    ("c.yaml", "trace: t.csv\nbackend:\n  name: openai\n  model: m\n",
     ":4: unknown backend option ['model']"),
    ("c.yaml", "trace: t.csv\nbogus: 1\n", ":2: unknown config key ['bogus']"),
    ("c.json", '{"trace": "t.csv",\n "arrival": {"mode": "saturated",\n  "max_concurrency": 0}}',
     ":3: arrival.max_concurrency: expected an integer"),
])
def test_a_refused_value_of_a_run_config_file_names_the_file_and_its_line(tmp_path, name, text,
                                                                         said):
    """Found as a careful user: ``unknown backend option(s) ['model']`` named neither the
    file nor the line (the checks run on the data, after the file was read)."""
    f = tmp_path / name
    f.write_text(text)
    assert _error(RunConfig.from_file, f).startswith(f"{f}{said}")


@pytest.mark.parametrize(("text", "said"), [
    ("num_blocks: 64\nblock_size: 0\n", ":2: target.engine.block_size: expected an integer"),
    ("engine:\n  num_blocks: 64\n  block_size: 0\n", ":3: target.engine.block_size"),
    ("num_blocks: 64\nbogus: 3\n", ":2: unknown engine knob ['bogus']"),
    ("engine:\n  bogus: 3\n  more: 4\n", ":2: unknown engine knobs ['bogus', 'more']"),
])
def test_a_refused_knob_of_an_engine_file_names_the_file_and_its_line(tmp_path, text, said):
    f = tmp_path / "e.yaml"
    f.write_text(text)
    assert _error(lambda p: read_engine_file(p, check=True), f).startswith(f"{f}{said}")
