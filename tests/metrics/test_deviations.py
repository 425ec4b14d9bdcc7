"""What failed and why, in the summary and the headline (docs/metrics.md, "Headline"):
counted by class with the server's reason, the same from records in memory and from
``records.parquet``; a run where nothing failed has no ``failures`` key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from workbench.metrics import summarize
from workbench.metrics.deviations import reason
from workbench.metrics.files import save
from workbench.metrics.summary import summarize_stored
from workbench.records import RequestRecord, RunResult
from workbench.report.headline import run_headline

MS = 1_000_000
#: vLLM 0.32.0's answer to a prompt over its context (the shape of every such 400)
TOO_LONG = ('HTTP 400: {"error":{"message":"This model\'s maximum context length is 8192 '
            'tokens. However, your prompt contains %d input tokens, which exceeds this limit '
            'even without any output tokens.","type":"BadRequestError","param":"input_tokens",'
            '"code":400}}')


def rec(i: int, **kw: Any) -> RequestRecord:
    base = 10_000_000_000 + i * 100 * MS
    fields: dict[str, Any] = {
        "run_id": "r", "request_id": f"q{i}", "unit_ordinal": i, "session_id": f"s{i}",
        "round_idx": 0, "backend": "openai", "policy": "trace-reported",
        "planned_prefix_tokens": 0, "planned_input_tokens": 100, "planned_output_tokens": 2,
        "dispatch_ns": base, "token_times_ns": [base + MS, base + 2 * MS],
        "token_counts": [1, 1], "end_ns": base + 3 * MS, "prompt_tokens": 100,
        "completion_tokens": 2, "cached_tokens": 0, "cached_tokens_reported": True,
    }  # fmt: skip
    fields.update(kw)
    return RequestRecord(**fields)


def failed(i: int, error: str, http_status: int | None = None) -> RequestRecord:
    return rec(i, status="error", error=error, http_status=http_status, token_times_ns=[],
               token_counts=[], prompt_tokens=None, completion_tokens=None)


def test_failures_by_class_with_the_servers_reason(tmp_path: Path) -> None:
    records = [rec(0), rec(1),
               failed(2, TOO_LONG % 9000, 400), failed(3, TOO_LONG % 12000, 400),
               failed(4, TOO_LONG % 15000, 400),
               failed(5, "stream idle timeout: no event for 60 s"),
               rec(6, status="skipped", error="context guard: prompt 9000 + output 2 >= "
                   "max_model_len 8192; session ended")]
    result = RunResult("r", records)
    s = summarize(result)
    want = {"requests": 4, "classes": [
        {"class": "HTTP 400", "requests": 3, "reason": reason(TOO_LONG % 9000)},
        {"class": "stream idle timeout", "requests": 1,
         "reason": "stream idle timeout: no event for 60 s"}]}
    assert s["failures"] == want
    assert reason(TOO_LONG % 9000).startswith("This model's maximum context length is 8192 "
                                              "tokens. However, your prompt contains 9000")
    line = run_headline(s)
    assert line.startswith("2/7 ok · 4 failed: HTTP 400 ×3 (This model's maximum context "
                           "length is 8192 tokens."), line
    assert "; stream idle timeout ×1 (no event for 60 s) · TTFT" in line
    pytest.importorskip("pyarrow")
    from workbench.metrics import columns

    d = save(result, tmp_path / "run")
    columns.convert(d)
    assert summarize_stored(d)["failures"] == want


def test_no_failures_no_key() -> None:
    s = summarize(RunResult("r", [rec(0), rec(1)]))
    assert "failures" not in s
    assert run_headline(s).startswith("2/2 ok · TTFT")


def test_reason_keeps_text_that_is_not_a_json_answer() -> None:
    assert reason("HTTP 502: <html>bad gateway</html>") == "HTTP 502: <html>bad gateway</html>"
    assert reason('HTTP 400: {"detail":"no such model"} (and a note)') == "no such model"
    assert len(reason("x" * 500)) == 120


def test_outputs_short_of_max_tokens_are_counted_and_said(tmp_path: Path) -> None:
    """A server that clamped ``max_tokens`` (finish ``length``) or stopped at an EOS it was
    asked to ignore (``stop``): counted apart from the ok requests that got their length."""
    records = [rec(0), rec(1, planned_output_tokens=32, completion_tokens=8,
                          finish_reason="length"),
               rec(2, planned_output_tokens=16, completion_tokens=3, finish_reason="stop"),
               rec(3, planned_output_tokens=16, completion_tokens=1, finish_reason="stop")]
    result = RunResult("r", records)
    s = summarize(result)
    want = {"requests": 3, "of_ok": 4, "planned_tokens": 64, "generated_tokens": 12,
            "finish_reasons": {"stop": 2, "length": 1}}
    assert s["output_short"] == want
    assert ("4/4 ok · 3 of 4 ok ended short of max_tokens: 12 of 64 tokens (finish stop, "
            "length) · TTFT") in run_headline(s)
    pytest.importorskip("pyarrow")
    from workbench.metrics import columns

    d = save(result, tmp_path / "run")
    columns.convert(d)
    assert summarize_stored(d)["output_short"] == want


def test_a_class_is_cut_at_colon_space_not_inside_a_url() -> None:
    from workbench.metrics.deviations import failure_class

    refused = "cannot connect to http://127.0.0.1:45165: [Errno 111] Connection refused"
    assert failure_class(refused, None) == "cannot connect to http://127.0.0.1:45165"
    assert failure_class("stream idle for more than 60.0s", None) == (
        "stream idle for more than 60.0s")
    assert failure_class("anything", 503) == "HTTP 503"


def test_prompts_the_server_counted_otherwise_are_said() -> None:
    """``openai-chat`` against a server whose tokenizer reads the synthetic text otherwise
    (llama.cpp's tiny model: 4543 tokens for 512 sent): said beside the latency."""
    records = [rec(0, sent_prompt_tokens=100, prompt_tokens=900),
               rec(1, sent_prompt_tokens=100, prompt_tokens=880)]
    s = summarize(RunResult("r", records))
    assert s["prompt_counted"] == {"requests": 2, "sent_tokens": 200, "server_tokens": 1780,
                                   "ratio": 8.9}
    assert "2/2 ok · the server counted 1780 prompt tokens for the 200 sent (8.9×) · TTFT" in (
        run_headline(s))
    # a chat template's few tokens a turn stay under the bound: nothing said
    near = [rec(0, sent_prompt_tokens=100, prompt_tokens=104), rec(1, sent_prompt_tokens=100)]
    assert "prompt_counted" not in summarize(RunResult("r", near))


def test_a_class_leaves_out_how_far_the_stream_got() -> None:
    """A server killed mid-run cuts each stream after its own number of token events:
    one class, "server disconnected mid-stream ×15", not 15 classes of one (the sample
    keeps the count). Seen against bench/fake_server.py killed mid-run."""
    from workbench.metrics.deviations import failure_class

    for n in (0, 1, 115):
        cut = f"server disconnected mid-stream after {n} token events: connection closed"
        assert failure_class(cut, None) == "server disconnected mid-stream"
        assert failure_class(f"stream idle for more than 60.0s after {n} token events",
                             None) == "stream idle for more than 60.0s"
    assert failure_class("request timed out after 600.0s after 3 token events", None) == (
        "request timed out after 600.0s")
    records = [rec(i, status="error", error=f"server disconnected mid-stream after {i} token "
                   "events: connection closed mid-response") for i in range(4)]
    s = summarize(RunResult("r", records))
    assert s["failures"]["classes"] == [{
        "class": "server disconnected mid-stream", "requests": 4,
        "reason": "server disconnected mid-stream after 0 token events: connection closed "
                  "mid-response"}]


def test_a_reason_the_same_as_its_class_is_not_said_again() -> None:
    """The idle timeout of a stream that never got its head (no "after N token events"):
    its reason is its class, said once; a class that is only part of the reason's first
    word is not cut out of it."""
    from workbench.metrics.deviations import beyond_class

    idle = "stream idle for more than 60.0s"
    s = summarize(RunResult("r", [rec(0), failed(1, idle), failed(2, idle)]))
    assert f"1/3 ok · 2 failed: {idle} ×2 · TTFT" in run_headline(s)
    assert beyond_class("HTTP 4000 things", "HTTP 400") == "HTTP 4000 things"
    assert beyond_class("no event", "stream idle timeout") == "no event"
