"""Plain YAML scalars that YAML 1.1 (PyYAML) and YAML 1.2 (and JSON) read differently.

Found as a careful user: ``stream: yes`` became ``True`` without a word, ``010`` became
8 and ``1:30`` became 90 (YAML 1.1 octal and base-60), while ``1e3`` stayed the text
``'1e3'`` (JSON and YAML 1.2 read 1000.0). The reader now refuses a plain scalar whose
two readings differ, naming the file, the line and the field, unless the YAML 1.2
reading is a number PyYAML left as text: that one is read as YAML 1.2 and JSON read it
(docs/config-bounds.md, "YAML 1.1 and 1.2").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.config import RunConfig
from workbench.config.validation import load_yaml
from workbench.errors import ConfigError


def _load(tmp_path: Path, text: str) -> object:
    f = tmp_path / "c.yaml"
    f.write_text(text)
    return load_yaml(str(f), text)


@pytest.mark.parametrize(("value", "rule"), [
    ("yes", "yes is true in YAML 1.1 but the text 'yes' in YAML 1.2 and JSON: write true "
            "or false, or quote it for the text"),
    ("No", "No is false in YAML 1.1 but the text 'No' in YAML 1.2 and JSON: write true "
           "or false, or quote it for the text"),
    ("on", "on is true in YAML 1.1 but the text 'on' in YAML 1.2 and JSON: write true "
           "or false, or quote it for the text"),
    ("OFF", "OFF is false in YAML 1.1 but the text 'OFF' in YAML 1.2 and JSON: write true "
            "or false, or quote it for the text"),
    ("010", "010 is 8 in YAML 1.1 but 10 in YAML 1.2 and JSON: write the number in "
            "decimal, or quote it for the text"),
    ("1:30", "1:30 is 90 in YAML 1.1 but the text '1:30' in YAML 1.2 and JSON: write the "
             "number in decimal, or quote it for the text"),
    ("1_000", "1_000 is 1000 in YAML 1.1 but the text '1_000' in YAML 1.2 and JSON: write "
              "the number in decimal, or quote it for the text"),
    ("0b101", "0b101 is 5 in YAML 1.1 but the text '0b101' in YAML 1.2 and JSON: write the "
              "number in decimal, or quote it for the text"),
    ("1_0.5", "1_0.5 is 10.5 in YAML 1.1 but the text '1_0.5' in YAML 1.2 and JSON: write "
              "the number in decimal, or quote it for the text"),
    ("2024-01-02", "2024-01-02 is a date in YAML 1.1 but the text '2024-01-02' in YAML 1.2 "
                   "and JSON: quote it"),
])
def test_a_scalar_read_two_ways_is_refused_naming_file_line_and_field(tmp_path, value, rule):
    f = tmp_path / "c.yaml"
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, f"seed: 1\nbackend:\n  name: openai\n  stream: {value}\n")
    assert str(info.value) == f"{f}:4: backend.stream: {rule}"


def test_the_field_of_a_list_item_and_of_a_key(tmp_path):
    f = tmp_path / "c.yaml"
    with pytest.raises(ConfigError, match=r"c\.yaml:3: sweep\.loads\[1\]: 010 is 8"):
        _load(tmp_path, "sweep:\n  loads: [1,\n    010]\n")
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, "headers:\n  yes: 1\n")
    assert str(info.value).startswith(f"{f}:2: headers (a key): yes is true in YAML 1.1")


@pytest.mark.parametrize(("value", "read"), [
    ("1e3", 1000.0), ("1.5e3", 1500.0), ("-2E-1", -0.2), ("0o17", 15), ("0x10", 16),
    ("true", True), ("False", False), ("10", 10), ("-0", 0), ("1.5", 1.5), (".inf", float("inf")),
    ("null", None), ("~", None), ("'yes'", "yes"), ('"010"', "010"), ("yess", "yess"),
    ("2024-01-02x", "2024-01-02x"),
])
def test_scalars_read_one_way_are_read_as_yaml_1_2_and_json_read_them(tmp_path, value, read):
    assert _load(tmp_path, f"v: {value}\n") == {"v": read}


def test_a_run_config_with_stream_yes_is_refused_before_anything_runs(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("trace: t.csv\ntarget: http://127.0.0.1:9\nbackend: {name: openai, stream: yes}\n")
    with pytest.raises(ConfigError, match=r"c\.yaml:3: backend\.stream: yes is true in YAML 1\.1"):
        RunConfig.from_file(f)
