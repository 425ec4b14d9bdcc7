"""Ids no HTTP header can carry are a trace error at load, in every reader (docs/trace-bounds.md).

Each format's valid file gets one id replaced by one with CR/LF (or another control
character), or by one longer than ``MAX_ID_CHARS``; ``workbench replay`` must refuse it
with ``path:line: rule`` and exit 3 before any request (they used to be accepted and
then fail every request, exit 4).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.data import path as data_path
from workbench.errors import ExitCode, TraceFormatError
from workbench.traces import bounds
from workbench.traces.load import load_trace

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LONG = "s" * (bounds.MAX_ID_CHARS + 1)
BAD_IDS = {"crlf": "s\r\nX-Evil: 1", "lf": "a\nb", "nul": "a\x00b", "tab": "a\tb",
           "line-separator": "a\u2028b", "long": LONG}


def _json_swap(text: str, line: int, old: str, new: str) -> str:
    """``text`` with the JSON string ``old`` on ``line`` (1-based) replaced by ``new``."""
    lines = text.split("\n")
    assert json.dumps(old) in lines[line - 1]
    lines[line - 1] = lines[line - 1].replace(json.dumps(old), json.dumps(new), 1)
    return "\n".join(lines)


def _csv_swap(text: str, line: int, old: str, new: str) -> str:
    lines = text.split("\n")
    assert lines[line - 1].startswith(old + ",")
    quoted = '"' + new.replace('"', '""') + '"'
    lines[line - 1] = quoted + lines[line - 1][len(old):]
    return "\n".join(lines)


def _canonical(tmp_path: Path) -> Path:
    out = tmp_path / "canonical.csv"
    proc = subprocess.run(
        [sys.executable, "-m", "workbench", "tracegen", "-o", str(out),
         str(data_path("tracelab/multi_session_example.csv"))],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return out


def _canonical_swap(text: str, line: int, old: str, new: str) -> str:
    lines = text.split("\n")
    row = lines[line - 1].split(",")
    assert row[1] == old
    row[0] = '"' + f"session_{new}_round_000000".replace('"', '""') + '"'
    row[1] = '"' + new.replace('"', '""') + '"'
    lines[line - 1] = ",".join(row)
    return "\n".join(lines)


# format -> (source file, line, id as written, how to swap it)
CASES = {
    "session": (data_path("tracelab/multi_session_example.csv"), 2, "0", _csv_swap),
    "session-v2-example": (data_path("request-factory/session_rounds_v2_example.csv"), 2, "0",
                           _csv_swap),
    "independent": (FIXTURES / "independent_requests.csv", 3, "req-a", _csv_swap),
    "mooncake": (FIXTURES / "mooncake_sessions.jsonl", 2, "chat-1", _json_swap),
    "mooncake-request-id": (FIXTURES / "mooncake_sessions.jsonl", 2, "c1-t0", _json_swap),
    "dynamo": (FIXTURES / "dynamo_trace.jsonl", 1, "run-a", _json_swap),
    "dynamo-request-id": (FIXTURES / "dynamo_trace.jsonl", 1, "a1", _json_swap),
    "abench": (FIXTURES / "abench_sessions.jsonl", 1, "swe-001", _json_swap),
    "trajectory": (data_path("batchbench/trajectories_v1.jsonl"), 1, "fixer-a", _json_swap),
    "tracelab": (data_path("tracelab/round_trace.sanitized.jsonl"), 1,
                 "claude:92ee5b8a-429c-e80b-5db6-5381512f4697", _json_swap),
    "canonical": (None, 2, "0", _canonical_swap),
}


@pytest.mark.parametrize("bad", sorted(BAD_IDS))
@pytest.mark.parametrize("fmt", sorted(CASES))
def test_unsendable_id_is_refused_at_load_with_its_line(tmp_path, fmt, bad):
    source, line, old, swap = CASES[fmt]
    source = _canonical(tmp_path) if source is None else Path(source)
    path = tmp_path / f"bad{''.join(source.suffixes[-1:])}"
    path.write_text(swap(source.read_text(), line, old, BAD_IDS[bad]), newline="")
    with pytest.raises(TraceFormatError) as err:
        load_trace(str(path), "auto", **({"sidecars": False} if fmt == "canonical" else {}))
    # a CSV record with a quoted line break is named by the line it ends on (as every
    # CSV error is); a JSONL record is one line
    # (a canonical row holds the id twice: request_id and session_id)
    copies = {_json_swap: 0, _csv_swap: 1, _canonical_swap: 2}[swap]
    breaks = BAD_IDS[bad].count("\n") * copies
    assert err.value.line == line + breaks, str(err.value)
    rule = str(err.value)
    if bad == "long":
        assert "characters long" in rule, rule
    elif bad == "nul" and swap is not _json_swap:
        assert "NUL byte" in rule, rule  # the CSV readers refuse binary data first
    else:
        assert "control character" in rule, rule


@pytest.mark.parametrize("fmt", ["session", "mooncake", "independent"])
def test_cli_refuses_unsendable_ids_with_exit_3_before_any_request(tmp_path, fmt):
    source, line, old, swap = CASES[fmt]
    path = tmp_path / f"bad{Path(source).suffix}"
    path.write_text(swap(Path(source).read_text(), line, old, BAD_IDS["crlf"]), newline="")
    proc = subprocess.run(
        [sys.executable, "-m", "workbench", "replay", "--trace", str(path), "--target", "sim",
         "--no-progress", "-o", str(tmp_path / "runs")],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == ExitCode.TRACE_ERROR, proc.stderr
    line += BAD_IDS["crlf"].count("\n") if swap is _csv_swap else 0
    assert f"{path}:{line}: " in proc.stderr and "control character" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists()  # refused before the run


def test_ids_at_the_bound_still_load(tmp_path):
    source, _, old, swap = CASES["session"]
    path = tmp_path / "ok.csv"
    ok = "s" * bounds.MAX_ID_CHARS
    text = Path(source).read_text()
    text = "\n".join(swap(text, n, old, ok).split("\n")[n - 1] if n in (2, 3, 4) else x
                     for n, x in enumerate(text.split("\n"), 1))
    path.write_text(text)
    workload = load_trace(str(path), "auto")
    assert ok in {u.unit_id for u in workload.units}
