"""Text datasets as trace formats: ShareGPT (sessions of rounds, or vLLM's first-turn
sampling) and AIPerf's single_turn / multi_turn JSONL, their token counts (words, or a
tokenizer.json trained here), bad input, and the CLI (docs/trace-formats.md, "Text
datasets")."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest
from public_data import FIXTURES, REPO
from trace_files import trace_error

from workbench.errors import ConfigError
from workbench.traces import bounds
from workbench.traces.load import detect_format, load_trace
from workbench.traces.text_tokens import WORDS

SHAREGPT = FIXTURES / "text-datasets/sharegpt_constructed.json"
SINGLE = FIXTURES / "text-datasets/aiperf_single_turn_constructed.jsonl"
MULTI = FIXTURES / "text-datasets/aiperf_multi_turn_constructed.jsonl"


def _line_rule(path, **options):
    """``(line, rule)`` of the one error reading ``path`` (``trace_files.trace_error``)."""
    err = trace_error(path, **options)
    return err.line, err.rule


def _shape(w) -> dict[str, list[tuple[int, int, int, float]]]:
    return {u.unit_id: [(r.prefix_len, r.input_len, r.output_len, r.tool_wait_after_ms)
                        for r in u.rounds] for u in w.units}


def _write(tmp_path: Path, doc: object, name: str = "share.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def _conv(*turns: tuple[str, str], cid: str = "c0") -> dict:
    return {"id": cid, "conversations": [{"from": f, "value": v} for f, v in turns]}


# ------------------------------------------------------------------ sharegpt


def test_sharegpt_rounds_reuse_the_conversation_so_far(caplog):
    with caplog.at_level(logging.WARNING):
        w = load_trace(SHAREGPT)
    assert w.fmt == "sharegpt" and w.meta["detected_format"] == "sharegpt"
    # conv_a: system 8 words + question 9 = 17 fresh; reply 24; round 1 reuses 17 + 24 = 41
    assert _shape(w) == {
        "conv_a_0": [(0, 17, 24, 0.0), (41, 6, 16, 0.0)],
        "conv_b_0": [(0, 5, 15, 0.0)],
        "conv_c_0": [(0, 5, 9, 0.0)],  # the leading gpt turn and the unanswered one left out
    }
    assert all(u.is_session and u.arrival_ms == 0.0 for u in w.units)
    assert [r.request_id for r in w.units[0].rounds] == [
        "session_conv_a_0_round_000000", "session_conv_a_0_round_000001"]
    assert w.meta["skipped_leading_replies"] == 1 and w.meta["unanswered_last_turns"] == 1
    assert w.meta["reader"]["token_count"] == WORDS
    said = [r.getMessage() for r in caplog.records]
    assert any("1 conversation starting with a gpt turn" in m and "conversation 2" in m
               for m in said)


def test_sharegpt_first_turns_as_vllm_samples_them(tmp_path):
    w = load_trace(SHAREGPT, turns="first")
    # turn 0's text is the prompt and turn 1's the output, whatever their roles (vLLM's)
    assert _shape(w) == {"conv_a_0": [(0, 8, 9, 0.0)], "conv_b_0": [(0, 5, 15, 0.0)],
                         "conv_c_0": [(0, 9, 5, 0.0)]}
    assert not w.has_sessions
    p = _write(tmp_path, [
        _conv(("human", "one two three four"), ("gpt", "a b c"), cid="short-reply"),
        _conv(("human", "x " * 1025), ("gpt", "a b c d"), cid="long-prompt"),
        _conv(("human", "x " * 1000), ("gpt", "y " * 1049), cid="long-total"),
        _conv(("human", "x " * 1000), ("gpt", "y " * 1048), cid="kept"),
        _conv(("human", "only a question"), cid="one-turn"),
    ])
    vllm = load_trace(p, turns="first", lengths="vllm")
    assert [u.unit_id for u in vllm.units] == ["kept"]
    assert vllm.meta["skipped_by_length_filter"] == 3
    assert vllm.meta["skipped_conversations"] == 1
    assert len(load_trace(p, turns="first").units) == 4
    with pytest.raises(ConfigError, match=r"lengths=vllm .* needs turns=first"):
        load_trace(p, lengths="vllm")
    with pytest.raises(ConfigError, match="option turns must be one of all, first"):
        load_trace(p, turns="some")


def test_sharegpt_one_conversation_a_line_is_read_and_detected(tmp_path):
    p = tmp_path / "share.jsonl"
    p.write_text("\n".join(json.dumps(c) for c in json.loads(SHAREGPT.read_text())) + "\n")
    assert detect_format(p) == "sharegpt"
    assert _shape(load_trace(p)) == _shape(load_trace(SHAREGPT))


@pytest.mark.parametrize(("doc", "line", "rule"), [
    ({"id": "a", "conversations": []}, 1, "a ShareGPT file is a JSON array of conversations"),
    ([1], 1, "conversation 0 must be an object with 'conversations', got 1"),
    ([{"id": "a"}], 1, "conversation 0 (id 'a'): 'conversations' must be a list of turns"),
    ([_conv(("human", "hi"), ("gpt", "yo")), {"id": "b", "conversations": [{"value": "hi"}]}],
     1, "conversation 1 (id 'b'), turn 0: missing field 'from'"),
    ([_conv(("human", "hi"), ("gpt", "yo"), ("gpt", "again"))], 1,
     "conversation 0 (id 'c0'), turn 2: two gpt turns in a row (turns 1 and 2); human and "
     "gpt turns alternate"),
    ([_conv(("human", "hi"), ("human", "hello?"))], 1, "turn 1: two human turns in a row"),
    ([_conv(("human", "hi"), ("gpt", "  \n"))], 1,
     "conversation 0 (id 'c0'), turn 1: empty 'value' (a turn with no text"),
    ([_conv(("human", "hi"), ("robot", "beep"))], 1, "turn 1: 'from' must be one of human"),
    ([_conv(("human", "hi"), ("gpt", "yo"), ("system", "late"))], 1,
     "turn 2: a system turn after the conversation began"),
    ([_conv(("human", "hi"), ("gpt", "yo")), _conv(("human", "a"), ("gpt", "b"))], 1,
     "duplicate conversation 1 (id 'c0'): id 'c0' (also at line 1)"),
    ([{**_conv(("human", "what is this?"), ("gpt", "a cat")), "image": "cat.png"}], 1,
     "field 'image': images and videos are not text tokens"),
    ([], 1, "no conversation: the array is empty"),
])
def test_sharegpt_bad_input_names_the_conversation_turn_and_rule(tmp_path, doc, line, rule):
    p = tmp_path / "share.json"
    p.write_text(json.dumps(doc, indent=None if isinstance(doc, list) else 2))
    got_line, got_rule = _line_rule(p, fmt="sharegpt")
    assert got_line == line and rule in got_rule, got_rule


def test_sharegpt_array_errors_name_the_line_the_conversation_starts_on(tmp_path, caplog):
    """A pretty-printed array (vLLM's ShareGPT_V3 file is one): an error about an element
    names the line it starts on, found by scanning only when an error names it."""
    good = [_conv(("human", "hi [, {"), ("gpt", 'yo "]}'), cid=f"c{i}") for i in range(3)]
    bad = _conv(("human", "hi"), ("gpt", "yo"), ("gpt", "no"), cid="b")
    p = tmp_path / "share.json"
    p.write_text(json.dumps([*good, bad], indent=2))
    starts = [n for n, text in enumerate(p.read_text().splitlines(), 1) if text == "  {"]
    assert _line_rule(p) == (starts[3], "conversation 3 (id 'b'), turn 2: two gpt turns in a "
                                        "row (turns 1 and 2); human and gpt turns alternate")
    p.write_text(json.dumps([*good, good[1]], indent=2))
    assert _line_rule(p) == (starts[3], "duplicate conversation 3 (id 'c1'): id 'c1' (also at "
                                        f"line {starts[1]})")
    p.write_text(json.dumps([*good, {**good[0], "id": "d", "lang": "en"},
                             _conv(("gpt", "earlier"), ("human", "q"), ("gpt", "a"), cid="e")],
                            indent=2))
    starts = [n for n, text in enumerate(p.read_text().splitlines(), 1) if text == "  {"]
    with caplog.at_level(logging.WARNING):
        load_trace(p)
    said = " ".join(r.getMessage() for r in caplog.records)
    assert f"lang (line {starts[3]})" in said
    assert f"(the first: conversation 4, line {starts[4]})" in said


def test_sharegpt_json_lines_errors_name_the_line(tmp_path):
    p = tmp_path / "share.jsonl"
    good = json.dumps(_conv(("human", "hi"), ("gpt", "yo"), cid="a"))
    bad = json.dumps(_conv(("human", "hi"), ("gpt", "yo"), ("gpt", "no"), cid="b"))
    p.write_text(f"{good}\n\n{bad}\n")
    assert _line_rule(p)[0] == 3


def test_sharegpt_past_the_bounds_is_refused_before_anything_runs(tmp_path):
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as fh:  # sparse: no disk used
        fh.truncate(bounds.MAX_TRACE_BYTES + 1)
    assert "larger than the bound of 1,073,741,824 bytes" in _line_rule(huge, fmt="sharegpt")[1]
    # a round past the 10M-token bound: the question reuses a 6M-word reply
    p = _write(tmp_path, [_conv(("human", "q"), ("gpt", "a " * 6_000_000),
                                ("human", "b " * 4_000_000), ("gpt", "done"), cid="long")])
    line, rule = _line_rule(p)
    assert line == 1 and rule.startswith("conversation 0 (id 'long'), round 1: prompt "
                                          "10,000,001 + output 1 =")


# ------------------------------------------------------------------ tokenizer.json


@pytest.fixture(scope="module")
def tokenizer_json(tmp_path_factory) -> Path:
    """A tiny BPE trained here with ``tokenizers`` itself (no model download)."""
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    corpus = [json.dumps(json.loads(SHAREGPT.read_text())), SINGLE.read_text()] * 5
    tok.train_from_iterator(corpus, tokenizers.trainers.BpeTrainer(
        vocab_size=300, special_tokens=["[UNK]"]))
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path


def test_a_tokenizer_json_counts_the_tokens(tokenizer_json):
    import hashlib

    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_json))

    def n(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    turns = [t["value"] for t in json.loads(SHAREGPT.read_text())[1]["conversations"]]
    w = load_trace(SHAREGPT, tokenizer=str(tokenizer_json))
    assert _shape(w)["conv_b_0"] == [(0, n(turns[0]), n(turns[1]), 0.0)]
    assert n(turns[0]) != len(turns[0].split())  # counted by the tokenizer, not in words
    assert w.meta["reader"]["tokenizer_sha256"] == hashlib.sha256(
        tokenizer_json.read_bytes()).hexdigest()
    # a folder holding tokenizer.json is taken too; every text reader takes the option
    assert _shape(load_trace(SHAREGPT, tokenizer=str(tokenizer_json.parent))) == _shape(w)
    single = load_trace(SINGLE, tokenizer=str(tokenizer_json))
    texts = [json.loads(x) for x in SINGLE.read_text().splitlines()]
    assert single.units[0].rounds[0].input_len == n(texts[0]["text"])
    assert single.units[2].rounds[0].input_len == sum(n(t) for t in texts[2]["texts"])


def test_a_tokenizer_that_cannot_be_read_is_a_configtrace_error(tmp_path, tokenizer_json):
    with pytest.raises(ConfigError, match=r"tokenizer: .*nope\.json:0: no such file"):
        load_trace(SHAREGPT, tokenizer=str(tmp_path / "nope.json"))
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"not": "a tokenizer"}')
    with pytest.raises(ConfigError, match=r"is not a Hugging Face tokenizer\.json"):
        load_trace(MULTI, tokenizer=str(bad))
    with pytest.raises(ConfigError, match=r"must be the path of a Hugging Face tokenizer\.json"):
        load_trace(SINGLE, tokenizer=3)


def test_without_the_tokenizers_package_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # as if not installed
    with pytest.raises(ConfigError, match=r"pip install 'workbench-replay\[text\]'"):
        load_trace(SHAREGPT, tokenizer="tokenizer.json")


# ------------------------------------------------------------------ aiperf


def test_aiperf_single_turn_requests_at_their_timestamps():
    w = load_trace(SINGLE)
    assert w.fmt == "aiperf-single-turn" and not w.has_sessions
    assert [(u.unit_id, u.arrival_ms) for u in w.units] == [
        ("aiperf-single-turn_0", 0.0), ("aiperf-single-turn_1", 1000.0),
        ("aiperf-single-turn_2", 2500.0), ("aiperf-single-turn_3", 4000.0)]
    # texts: every content counts (AIPerf sends them as parts of one message)
    assert [u.rounds[0].input_len for u in w.units] == [4, 3, 10, 4]
    assert {u.rounds[0].output_len for u in w.units} == {256}
    assert w.meta["reader"]["output_len"] == 256
    assert {u.rounds[0].output_len for u in load_trace(SINGLE, output_len=7).units} == {7}


def test_aiperf_single_turn_delays_add_up_and_unix_ms_are_rebased(tmp_path):
    p = tmp_path / "single.jsonl"
    p.write_text('{"text": "a b", "delay": 100}\n{"text": "c"}\n{"text": "d", "delay": 50}\n')
    assert [u.arrival_ms for u in load_trace(p).units] == [100.0, 100.0, 150.0]
    p.write_text('{"text": "a", "timestamp": 1765000000000}\n'
                 '{"text": "b", "timestamp": 1765000000250}\n')
    w = load_trace(p)
    assert [u.arrival_ms for u in w.units] == [0.0, 250.0]
    assert w.meta["arrival_origin_ms"] == 1765000000000


@pytest.mark.parametrize(("fmt", "line", "rule"), [
    *(("aiperf-single-turn", line, rule) for line, rule in (
        ('{"text": "a", "texts": ["b"]}', "text and texts cannot be set together"),
        ('{"text": "a", "timestamp": 1, "delay": 2}',
         "timestamp and delay cannot be set together"),
        ('{"text": "   "}', "empty text"),
        ('{"texts": [{"name": "x", "contents": [1]}]}', "texts[0] must be a string or an object"),
        ('{"text": "a", "image": "cat.png"}',
         "field 'image': images and audio are not text tokens"),
        ('{"text": "a", "type": "random_pool"}', "type must be 'single_turn'"),
        ('{"text": "a", "delay": -1}', "delay must be >= 0"),
        ('{"role": "user", "text": 5}', "text must be a string, got 5"))),
    *(("aiperf-random-pool", line, rule) for line, rule in (
        ('{"type": "random_pool", "text": "a", "image": "x.png"}',
         "field 'image': images and audio are not text tokens"),
        ('{"type": "random_pool", "text": "a", "texts": ["b"]}', "text and texts cannot be set"),
        ('{"type": "random_pool"}', "missing field 'text' (or 'texts')"),
        ('{"type": "single_turn", "text": "a"}', "type must be 'random_pool'"))),
])
def test_aiperf_single_turn_and_random_pool_bad_input(tmp_path, fmt, line, rule):
    p = tmp_path / "single.jsonl"
    p.write_text('{"type": "random_pool", "text": "fine"}\n' if fmt == "aiperf-random-pool"
                 else '{"text": "fine"}\n')
    p.write_text(p.read_text() + line + "\n")
    got_line, got_rule = _line_rule(p, fmt=fmt)
    assert got_line == 2 and rule in got_rule, got_rule


def test_aiperf_multi_turn_lines_of_one_session_are_joined(caplog):
    w = load_trace(MULTI)
    assert w.fmt == "aiperf-multi-turn"
    # each turn alone (AIPerf sends no history): prefix 0; the wait before a turn is its delay
    assert _shape(w) == {
        "session_123": [(0, 8, 256, 1000.0), (0, 9, 256, 1500.0), (0, 6, 256, 0.0)],
        "session_456": [(0, 4, 256, 2000.0), (0, 8, 256, 0.0)],
        "aiperf_3": [(0, 12, 256, 0.0)],
    }
    assert [u.arrival_ms for u in w.units] == [0.0, 500.0, 0.0]
    full = load_trace(MULTI, history="full", output_len=10)
    assert _shape(full)["session_123"] == [(0, 8, 10, 1000.0), (18, 9, 10, 1500.0),
                                           (37, 6, 10, 0.0)]
    assert full.meta["reader"]["history"] == "full"


def test_aiperf_multi_turn_names_and_bad_input(tmp_path):
    p = tmp_path / "multi.jsonl"
    # an unnamed line is a session of its own, never joined to one the file names
    p.write_text('{"turns": [{"text": "a"}]}\n'
                 '{"session_id": "aiperf_0", "turns": [{"text": "b"}]}\n')
    assert [u.unit_id for u in load_trace(p).units] == ["aiperf_0~2", "aiperf_0"]
    p.write_text('{"session_id": "s", "turns": []}\n')
    assert _line_rule(p, fmt="aiperf-multi-turn") == (1, "turns must be a non-empty list "
                                                      "(AIPerf's rule)")
    p.write_text('{"session_id": "s", "turns": [{"text": "a"}, {"texts": ["b"], "text": "c"}]}\n')
    assert _line_rule(p)[1].startswith("turns[1].text and texts cannot be set together")
    p.write_text('{"session_id": "s", "turns": [{"text": "a"}, {"text": "b", "images": ["x"]}]}\n')
    assert "field turns[].'images': images and audio are not text tokens" in _line_rule(p)[1]
    with pytest.raises(ConfigError, match="option output_len must be an integer from 1"):
        load_trace(MULTI, output_len=0)
    with pytest.raises(ConfigError, match="option history must be one of none, full"):
        load_trace(MULTI, history="some")


def test_aiperf_random_pool_each_entry_once_or_drawn_as_aiperf_draws(tmp_path, caplog):
    """AIPerf's random_pool (aiperf/dataset/loader/random_pool.py, db4f639): a pool of texts,
    no timing; AIPerf draws --conversation-num of them with replacement. workbench reads each
    entry once, in file order (``samples=N``: N draws, seeded)."""
    p = tmp_path / "pool.jsonl"
    p.write_text('{"type": "random_pool", "text": "Who are you?"}\n'
                 '{"texts": [{"name": "query", "contents": ["What is", "life?"]}]}\n'
                 '{"text": "one two three four five", "note": "x"}\n')
    with caplog.at_level(logging.WARNING):
        w = load_trace(p)
    assert w.fmt == "aiperf-random-pool" and not w.has_sessions
    assert [(u.unit_id, u.arrival_ms, u.rounds[0].input_len, u.rounds[0].output_len)
            for u in w.units] == [("aiperf-random-pool_0", 0.0, 3, 256),
                                  ("aiperf-random-pool_1", 0.0, 3, 256),
                                  ("aiperf-random-pool_2", 0.0, 5, 256)]
    assert w.meta["unknown_fields"] == ["note"]
    drawn = load_trace(p, samples=50, seed=3, output_len=9)
    assert len(drawn.units) == 50 and {u.rounds[0].output_len for u in drawn.units} == {9}
    assert {u.rounds[0].input_len for u in drawn.units} == {3, 5}
    assert [u.meta["pool_entry"] for u in drawn.units] == [
        u.meta["pool_entry"] for u in load_trace(p, samples=50, seed=3).units]
    assert drawn.meta["reader"]["samples"] == 50 and drawn.meta["reader"]["seed"] == 3
    assert [u.meta["pool_entry"] for u in drawn.units] != [
        u.meta["pool_entry"] for u in load_trace(p, samples=50, seed=4).units]
    with pytest.raises(ConfigError, match="samples must be an integer from 1"):
        load_trace(p, samples=0)


# ------------------------------------------------------------------ command line


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize(("path", "fmt", "requests"), [
    (SHAREGPT, "sharegpt", 4), (SINGLE, "aiperf-single-turn", 4),
    (MULTI, "aiperf-multi-turn", 6)])
def test_stats_and_simulate_end_to_end(tmp_path, path, fmt, requests):
    stats = _cli("stats", str(path), cwd=tmp_path)
    assert stats.returncode == 0, stats.stderr
    assert re.search(rf"^format +{fmt} \(detected\)$", stats.stdout, re.M)
    assert f"tokens  counted as {WORDS}" in stats.stdout  # the approximation, said
    as_json = json.loads(_cli("stats", str(path), "--json", cwd=tmp_path).stdout)
    assert as_json["token_count"] == WORDS
    sim = _cli("simulate", "--trace", str(path), "--trace-option", "output_len=8"
               if fmt.startswith("aiperf") else "turns=all", "-o", str(tmp_path / "runs"),
               "--json", cwd=tmp_path)
    assert sim.returncode == 0, sim.stderr
    summary = json.loads(sim.stdout[: sim.stdout.rindex("}") + 1])
    assert (summary["requests"], summary["ok"], summary["errors"]) == (requests, requests, 0)
    manifest = json.loads(next((tmp_path / "runs").glob("*/manifest.json")).read_text())
    assert manifest["trace"]["reader"]["token_count"] == WORDS  # in the run's meta too


def test_bad_input_stops_the_command_before_any_request(tmp_path):
    bad = _write(tmp_path, [_conv(("human", "hi"), ("gpt", "yo"), ("gpt", "again"))])
    sim = _cli("simulate", "--trace", str(bad), "-o", str(tmp_path / "runs"), cwd=tmp_path)
    assert sim.returncode == 3, sim.stderr
    assert sim.stderr.strip().splitlines()[-1].endswith(
        f"{bad}:1: conversation 0 (id 'c0'), turn 2: two gpt turns in a row (turns 1 and 2); "
        "human and gpt turns alternate")
    assert not list(tmp_path.glob("runs/*/records.jsonl"))  # no run, nothing sent
