"""The Python API raises errors already redacted, through the CLI's own redaction
(``workbench.redact``): a notebook that prints ``load_trace``'s error never shows a secret
the CLI would have hidden (docs/security.md, "Errors")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workbench import redact
from workbench.errors import ConfigError, TraceFormatError
from workbench.traces.load import load_trace

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-live0123456789abcdef"


def _mooncake(tmp_path: Path, value: object) -> Path:
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({"timestamp": 0, "input_length": value, "output_length": 5,
                                "hash_ids": [1]}) + "\n")
    return path


def test_a_key_shaped_value_in_a_trace_error_is_redacted(tmp_path):
    with pytest.raises(TraceFormatError) as exc:
        load_trace(_mooncake(tmp_path, KEY))
    assert KEY not in str(exc.value) and KEY not in exc.value.rule
    assert exc.value.rule == "input_length must be an integer, got '[REDACTED]'"
    assert str(exc.value) == f"{tmp_path / 'm.jsonl'}:1: {exc.value.rule}"


def test_a_registered_secret_in_a_trace_error_is_redacted(tmp_path):
    secret = "hunter2-registered-in-a-notebook"
    redact.register(secret)
    with pytest.raises(TraceFormatError) as exc:
        load_trace(_mooncake(tmp_path, secret))
    assert secret not in str(exc.value) and "[REDACTED]" in exc.value.rule


def test_a_config_error_of_the_api_is_redacted(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("{}\n")
    with pytest.raises(ConfigError) as exc:
        load_trace(path, "tracelab", tool_wait=f"Bearer {KEY}")
    assert KEY not in str(exc.value) and "Bearer [REDACTED]" in str(exc.value)


def test_the_library_says_what_the_cli_prints(tmp_path):
    path = _mooncake(tmp_path, KEY)
    with pytest.raises(TraceFormatError) as exc:
        load_trace(path)
    proc = subprocess.run([sys.executable, "-m", "workbench", "stats", str(path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 3
    assert proc.stderr.strip() == f"workbench stats: error: {exc.value}"


@pytest.mark.parametrize(("fmt", "option"), [("tracelab", "tool_wait"),
                                             ("mooncake", "hash_rounding"),
                                             ("mooncake", "block_size")])
def test_a_long_option_value_is_quoted_cut_as_trace_values_are(tmp_path, fmt, option):
    """A reader's option is quoted as ``bounds.shown`` quotes a field: 5,000 characters of
    it were printed whole."""
    path = tmp_path / "t.jsonl"
    path.write_text("{}\n")
    with pytest.raises(ConfigError) as exc:
        load_trace(path, fmt, **{option: "x" * 5000})
    assert str(exc.value).endswith("... (5,002 characters)") and len(str(exc.value)) < 160
