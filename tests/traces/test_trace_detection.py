"""Auto-detection across every format, on real public data and hand-written fixtures.

Also the robustness property every reader promises: a corrupted file either loads
or raises one ``TraceFormatError`` — never another exception.
"""

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from public_data import FIXTURES, SHARED, needs, public

from workbench import data as bundled
from workbench.errors import TraceFormatError
from workbench.records import Workload
from workbench.traces.load import FORMATS, available_formats, detect_format, head_lines, load_trace

# every public file, with the format it must be detected as
PUBLIC = {
    "batchbench/trajectories_v1.jsonl": "trajectory",
    "mooncake/conversation_trace.jsonl": "mooncake",
    "request-factory/session_rounds_v2_example.csv": "session",
    "tracelab/multi_session_example.csv": "session",
    "tracelab/multi_session_large.csv": "session",
    "tracelab/round_trace.sanitized.jsonl": "tracelab",
    "tracelab/session_workload_example.csv": "session",
}
FIXTURE_FORMATS = {
    "abench_sessions.jsonl": "abench",
    "serving-traces/azure_2024_notebook.csv": "azure",
    "serving-traces/azure_code_2023_head150.csv": "azure",
    "serving-traces/azure_conv_2023_head150.csv": "azure",
    "serving-traces/burstgpt_constructed.csv": "burstgpt",
    "text-datasets/sharegpt_constructed.json": "sharegpt",
    "text-datasets/aiperf_single_turn_constructed.jsonl": "aiperf-single-turn",
    "text-datasets/aiperf_multi_turn_constructed.jsonl": "aiperf-multi-turn",
    "text-datasets/aiperf_random_pool_constructed.jsonl": "aiperf-random-pool",
    "bailian_chains.jsonl": "bailian",
    "dynamo_trace.jsonl": "dynamo",
    "independent_requests.csv": "independent",
    "mooncake_sessions.jsonl": "mooncake",
}
CANONICAL = (
    "request_id,session_id,round_idx,arrival_time_ms,prefix_len,input_len,output_len,"
    "tool_wait_after_ms\n"
    "session_0_round_000000,0,0,0.000000,0,100,10,5.000000\n"
    "session_0_round_000001,0,1,0.000000,110,20,10,0.000000\n"
)

needs_shared = needs(SHARED)


def _needs(fmt: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(fmt not in available_formats(), reason=f"{fmt} reader not built")


def _public_cases() -> list:
    return [pytest.param(name, fmt, marks=_needs(fmt), id=name) for name, fmt in PUBLIC.items()]


@needs_shared
def test_every_public_file_is_listed():
    found = {
        p.relative_to(SHARED).as_posix()
        for p in SHARED.rglob("*")
        if p.is_file() and p.name != "README.md"
    }
    assert found == set(PUBLIC), "a new public file needs an expected format here"


@pytest.mark.parametrize(("name", "fmt"), _public_cases())
def test_public_file_detected_and_loaded(name, fmt, public_file):
    w = load_trace(public_file(name))
    assert isinstance(w, Workload)
    assert w.fmt == fmt and w.meta["detected_format"] == fmt
    assert w.n_rounds > 0


@needs(public("mooncake/conversation_trace.jsonl"))
def test_mooncake_public_trace_stats():
    w = load_trace(public("mooncake/conversation_trace.jsonl"))
    rounds = list(w.rounds())
    assert w.fmt == "mooncake" and len(rounds) == 12031
    assert round(sum(r.prompt_len for r in rounds) / len(rounds)) == 12035
    assert round(sum(r.output_len for r in rounds) / len(rounds)) == 343


@pytest.mark.parametrize(("name", "fmt"), sorted(FIXTURE_FORMATS.items()))
def test_fixture_detected(name, fmt):
    assert detect_format(FIXTURES / name) == fmt
    assert load_trace(FIXTURES / name).fmt == fmt


@_needs("session-execution-v2")
def test_canonical_header_detected(tmp_path):
    p = tmp_path / "canonical.csv"
    p.write_text(CANONICAL)
    assert load_trace(p).fmt == "session-execution-v2"


def _samples(tmp_dir: Path) -> list[tuple[Path, str]]:
    out = [(FIXTURES / n, f) for n, f in FIXTURE_FORMATS.items()]
    canonical = tmp_dir / "canonical.csv"
    canonical.write_text(CANONICAL)
    out.append((canonical, "session-execution-v2"))
    out += [(public(n), f) for n, f in PUBLIC.items() if public(n).is_file()]
    return out


def test_exactly_one_sniffer_accepts_each_sample(tmp_path):
    """Sniffers must not collide: order in _builtin.py must never be what decides."""
    for path, fmt in _samples(tmp_path):
        lines = head_lines(path)
        accepted = [name for name in available_formats() if FORMATS.get(name).sniff(lines)]
        assert accepted == [fmt], f"{path.name}: sniffers {accepted} accepted, expected {fmt}"


def test_sniffers_refuse_nothing_like_them():
    for lines in ([], ["hello"], ["{}"], ["[1,2]"], ["a,b,c"], ["{not json"], ["\x00\x01"]):
        accepted = [n for n in available_formats() if FORMATS.get(n).sniff(lines)]
        assert accepted == [], f"{lines!r} accepted by {accepted}"


# ---------------------------------------------------------------- corruption property

MY_FORMATS = ["independent", "mooncake", "trajectory", "abench", "dynamo", "azure", "burstgpt",
              "sharegpt", "aiperf-single-turn", "aiperf-multi-turn", "aiperf-random-pool"]
_VALID = {
    "sharegpt": (FIXTURES / "text-datasets/sharegpt_constructed.json").read_bytes(),
    "aiperf-single-turn": (FIXTURES / "text-datasets/aiperf_single_turn_constructed.jsonl"
                           ).read_bytes(),
    "aiperf-multi-turn": (FIXTURES / "text-datasets/aiperf_multi_turn_constructed.jsonl"
                          ).read_bytes(),
    "aiperf-random-pool": (FIXTURES / "text-datasets/aiperf_random_pool_constructed.jsonl"
                           ).read_bytes(),
    "azure": (FIXTURES / "serving-traces/azure_2024_notebook.csv").read_bytes(),
    "burstgpt": (FIXTURES / "serving-traces/burstgpt_constructed.csv").read_bytes(),
    "independent": (FIXTURES / "independent_requests.csv").read_bytes(),
    "mooncake": (FIXTURES / "mooncake_sessions.jsonl").read_bytes(),
    "abench": (FIXTURES / "abench_sessions.jsonl").read_bytes(),
    "dynamo": (FIXTURES / "dynamo_trace.jsonl").read_bytes(),
    "trajectory": (
        b'{"schema_version":1,"trajectory_id":"a","requests":[{"prompt_tokens":30,'
        b'"output_tokens":5},{"prompt_tokens":40,"output_tokens":6,"delay_after_ms":3}]}\n'
        b'{"schema_version":1,"trajectory_id":"b","requests":[{"prompt_tokens":9,'
        b'"output_tokens":2},{"prompt_tokens":4,"output_tokens":1,"reset_before":true}]}\n'
    ),
}


@st.composite
def corrupted(draw: st.DrawFn, data: bytes) -> bytes:
    kind = draw(st.sampled_from(["flip", "truncate", "delete", "duplicate", "insert", "swap"]))
    lines = data.splitlines(keepends=True)
    if kind == "flip":
        i = draw(st.integers(0, len(data) - 1))
        return data[:i] + bytes([draw(st.integers(0, 255))]) + data[i + 1 :]
    if kind == "truncate":
        return data[: draw(st.integers(0, len(data) - 1))]
    if kind == "insert":
        i = draw(st.integers(0, len(data)))
        return data[:i] + draw(st.binary(min_size=1, max_size=8)) + data[i:]
    j = draw(st.integers(0, len(lines) - 1))
    if kind == "delete":
        return b"".join(lines[:j] + lines[j + 1 :])
    if kind == "duplicate":
        return b"".join(lines[: j + 1] + lines[j:])
    k = draw(st.integers(0, len(lines) - 1))
    lines[j], lines[k] = lines[k], lines[j]
    return b"".join(lines)


@pytest.fixture(scope="module")
def scratch():
    with tempfile.TemporaryDirectory() as d:
        yield Path(d)


@pytest.mark.parametrize("fmt", MY_FORMATS)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_corrupted_files_load_or_raise_trace_format_error(scratch, fmt, data):
    blob = data.draw(corrupted(_VALID[fmt]))
    path = scratch / f"corrupt-{fmt}"
    path.write_bytes(blob)
    for kwargs in ({"fmt": fmt}, {}):
        try:
            w = load_trace(path, **kwargs)
        except TraceFormatError as exc:
            assert exc.path == str(path) and exc.line >= 0
        else:
            assert isinstance(w, Workload)
            for r in w.rounds():
                assert r.prefix_len >= 0 and r.input_len >= 0 and r.output_len >= 1


@pytest.mark.parametrize(
    "path",
    [*(bundled.path(n) for n in bundled.files()),
     *sorted(p for p in FIXTURES.iterdir() if p.is_file())],  # not the run-dir fixtures
    ids=lambda p: Path(p).name,
)
def test_every_reader_refuses_an_unknown_option_the_same_way(path):
    """One ConfigError naming the format and the option, whatever the reader."""
    from workbench.errors import ConfigError

    fmt = detect_format(path)
    with pytest.raises(ConfigError, match=rf"{fmt} reader got unknown option.* bogus; valid: "):
        load_trace(path, bogus=1)


def test_no_reader_imports_a_sibling_reader() -> None:
    """What readers share lives in the readers' common modules (``_io``, ``json_io``,
    ``shared``, ``bounds``), so a reader can be removed or changed alone."""
    import ast
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "workbench" / "traces"
    readers = {p.stem for p in folder.glob("*.py")
               if "@register_format(" in p.read_text() and p.stem != "formats"}
    assert {"mooncake", "canonical", "weka"} <= readers
    for stem in sorted(readers):
        tree = ast.parse((folder / f"{stem}.py").read_text())
        taken = {n.module.rsplit(".", 1)[-1] for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.module
                 and n.module.startswith("workbench.traces.")}
        assert not taken & (readers - {stem}), (stem, sorted(taken & readers))


@pytest.mark.parametrize("cut", [lambda z: z[:-12], lambda z: z[:50],
                                 lambda z: z[:-12] + b"\0" * 4])
def test_a_cut_gzip_trace_is_said_cut_when_its_format_is_guessed(tmp_path, cut):
    """Detection reads a head; when that head is the whole gzip file, a stream that stops
    or breaks in it is the file's fault: said as such (not a JSON error on the half row
    the head inflates to), by the detector and by a load that guesses the format."""
    import gzip

    row = b'{"timestamp": %d, "input_length": 700, "output_length": 5, "hash_ids": [1, 2]}\n'
    rows = b"".join(row % (i * 100) for i in range(40))
    path = tmp_path / "trace.jsonl.gz"
    path.write_bytes(cut(gzip.compress(rows)))
    for call in (detect_format, load_trace):
        with pytest.raises(TraceFormatError) as e:
            call(path)
        assert e.value.line == 0 and "gzip data is" in e.value.rule and "JSON" not in e.value.rule
