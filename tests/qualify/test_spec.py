"""The frozen parity spec: every field checked, errors naming file, field and rule."""

from __future__ import annotations

import subprocess
import sys

import pytest
from parity_specs import MOON, row, spec_data

from workbench.errors import ConfigError
from workbench.qualify import load_spec


def test_wb_parity_is_the_campaign_runner():
    import workbench as wb
    from workbench.qualify import parity

    assert wb.parity is parity


def test_a_valid_spec_reads_back_with_its_window_and_rows(write_spec):
    spec = load_spec(write_spec(spec_data([row("single"), row("dp2", workers=2, dp=2)])))
    assert (spec.offset, spec.max_items, spec.trace_path) == (100, 120, str(MOON))
    assert [r.name for r in spec.rows] == ["single", "dp2"]
    assert spec.rows[0].knobs() == spec.rows[0].engine  # one worker of one rank: one engine
    assert spec.rows[1].knobs()["dp"] == 2
    cfg = spec.run_config(spec.rows[1], spec.candidate)
    assert cfg["trace"] == {"path": str(MOON), "offset": 100, "max_items": 120}
    assert spec.window()["rule"] == "contiguous"


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["trace"].update(sha256="0" * 64), r"trace\.sha256: the trace's content changed"),
    (lambda d: d["window"].update(rule="sampled"), r"window\.rule: must be 'contiguous'"),
    (lambda d: d["window"].update(max_items=0), r"window\.max_items: expected an integer"),
    (lambda d: d["rows"][0]["engine"].pop("num_blocks"),
     r"rows\[0\] \(single\)\.engine\.num_blocks: required"),
    (lambda d: d["rows"][0]["topology"].pop("dp"), r"rows\[0\] \(single\)\.topology\.dp: required"),
    (lambda d: d["rows"][0]["topology"].update(tp=2),
     r"topology\.tp: the polynomial cost model is one GPU"),
    (lambda d: d["rows"][0]["engine"].update(workers=2), r"\['workers'\] belong in topology"),
    (lambda d: d["rows"][0]["topology"].update(dp=0), r"engine\.dp must be an integer in"),
    (lambda d: d["rows"][0]["engine"].update(num_blocks="many"), r"target\.engine"),
    (lambda d: d["rows"].append(dict(d["rows"][0])), r"row names must be unique"),
    (lambda d: d.update(candidate={"revision": "HEAD"}), r"both sides are revisions, or both"),
    (lambda d: d.update(baseline={"revision": "HEAD", "engine": {}}), r"exactly one of"),
    (lambda d: d["rows"][0].update(preemptions=[3, 1]), r"preemptions: \[low, high\]"),
    (lambda d: d.update(extra=1), r"spec: unknown key \['extra'\]"),
])
def test_a_bad_field_is_named_with_its_rule(write_spec, change, message):
    data = spec_data([row("single")])
    change(data)
    path = write_spec(data)
    with pytest.raises(ConfigError, match=message) as info:
        load_spec(path)
    assert str(info.value).startswith(f"{path}:1: ")  # json.dumps writes one line


def test_a_yaml_spec_error_names_the_line_of_the_field(tmp_path):
    import yaml

    data = spec_data([row("single"), row("two")])
    del data["rows"][1]["engine"]["num_blocks"]
    data["rows"][1]["topology"]["tp"] = 4
    path = tmp_path / "spec.yaml"
    text = yaml.safe_dump(data, sort_keys=False)
    path.write_text(text)
    lines = text.splitlines()
    engine_line = [i for i, ln in enumerate(lines, 1) if ln.strip() == "engine:"][1]
    with pytest.raises(ConfigError) as info:
        load_spec(path)
    assert str(info.value) == (f"{path}:{engine_line}: rows[1] (two).engine.num_blocks: "
                               "required: a frozen row states its capacities")
    data["rows"][1]["engine"]["num_blocks"] = 100
    text = yaml.safe_dump(data, sort_keys=False)
    path.write_text(text)
    tp_line = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.strip() == "tp: 4")
    with pytest.raises(ConfigError, match=rf"^{path}:{tp_line}: rows\[1\] \(two\)\.topology\.tp"):
        load_spec(path)


def test_the_cli_refuses_a_bad_spec_with_exit_2_and_one_line(write_spec):
    data = spec_data([row("single")])
    data["trace"]["sha256"] = "f" * 64
    path = write_spec(data)
    proc = subprocess.run([sys.executable, "-m", "workbench", "parity", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "trace.sha256: the trace's content changed" in proc.stderr


def test_read_spec_returns_the_data_it_checked_for_parity_write(write_spec):
    """``parity --write`` changes the data ``read_spec`` read and checked (one bounded read
    of the file, not a second unbounded one)."""
    from workbench.qualify import apply_capacity, read_spec

    data = spec_data([row("single"), row("two")])
    spec, read = read_spec(write_spec(data, "spec.yaml"))  # JSON text: YAML reads it too
    assert read == data and [r.name for r in spec.rows] == ["single", "two"]
    new = apply_capacity(read, "two", "num_blocks", 512)
    assert new["rows"][1]["engine"]["num_blocks"] == 512 and read == data
