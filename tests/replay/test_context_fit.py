"""The plan against the server's context, before any request (docs/real-engines.md,
"Prompts longer than the server's context"): the embedded engine behind HTTP answers
``/v1/models`` with its ``max_model_len`` as vLLM does, and refuses what does not fit as
vLLM does. The real vLLM and llama.cpp: tests/real_engine (``test_context_guard_catches_
silent_clamp``, ``test_prompts_longer_than_the_context``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from workbench.backends.base import BackendError
from workbench.backends.served import listed_models, served_context
from workbench.errors import ConfigError
from workbench.executors.dispatch import run_async
from workbench.sim.server import serve_sim

LIMIT = 2048

#: answers of the real servers (vLLM 0.32.0 CPU, llama.cpp from llama-cpp-python 0.3.36)
VLLM_MODELS = (b'{"object":"list","data":[{"id":"tiny-llama","object":"model","owned_by":"vllm",'
               b'"root":"/m/tiny-llama","parent":null,"max_model_len":8192,"permission":[]}]}')
LLAMA_CPP_MODELS = (b'{"object":"list","data":[{"id":"tiny-llama","aliases":["tiny-llama"],'
                    b'"tags":[],"object":"model","owned_by":"llamacpp","meta":{"vocab_type":1,'
                    b'"n_vocab":32000,"n_ctx":8192,"n_ctx_train":16384}}]}')


def test_served_context_of_each_engine() -> None:
    vllm = served_context(VLLM_MODELS, "tiny-llama")
    assert vllm is not None and (vllm.tokens, vllm.field) == (8192, "max_model_len")
    llama = served_context(LLAMA_CPP_MODELS, None)
    assert llama is not None and (llama.tokens, llama.field) == (8192, "meta.n_ctx")
    two = (b'{"data":[{"id":"a","max_model_len":4096},{"id":"b","max_model_len":32768}]}')
    picked = served_context(two, "b")
    assert picked is not None and picked.tokens == 32768
    assert served_context(two, "c") is None  # several models, none named: not guessed
    assert served_context(b'{"data":[{"id":"m"}]}', "m") is None  # not said
    assert served_context(b"<html>", "m") is None


def _csv(tmp_path: Path) -> Path:
    csv = tmp_path / "long.csv"
    csv.write_text(
        "session_id,arrival_time,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms\n"
        "0,0,0,0,256,8,0\n0,0,1,264,300,8,0\n"
        f"1,0,0,0,{LIMIT + 100},8,0\n"
        f"2,0,0,0,300,8,0\n2,0,1,308,{LIMIT - 300},8,0\n"
    )
    return csv


async def _replay(url: str, tmp_path: Path, **cfg: Any) -> Any:
    config = {"target": url, "trace": {"path": str(_csv(tmp_path))},
              "backend": {"name": "openai", "options": {"model": "workbench-sim"}},
              "arrival": {"mode": "saturated", "tool_wait_scale": 0},
              "out_dir": str(tmp_path / "runs"), **cfg}
    async with asyncio.timeout(60):
        return await run_async(config)


async def test_rounds_over_the_context_are_refused_before_any_request(tmp_path: Path) -> None:
    async with serve_sim(zero_cost=True, max_model_len=LIMIT) as sim:
        with pytest.raises(ConfigError) as refused:
            await _replay(sim.base_url, tmp_path)
        said = str(refused.value)
        assert said.startswith(
            f"the server's context is {LIMIT} tokens (GET /v1/models: max_model_len of "
            "'workbench-sim'), and 2 of 5 planned requests (in 2 of 3 units) need more: "
            f"prompt + max tokens ≥ {LIMIT}, the longest {LIMIT + 108}."), said
        assert f"--max-model-len {LIMIT}" in said and "--max-items" in said

        # a guard above the server's lets them through: refused, and said why
        with pytest.raises(ConfigError, match=f"context.max_model_len {LIMIT * 2} is above"):
            await _replay(sim.base_url, tmp_path, context={"max_model_len": LIMIT * 2})

        # the guard at the server's: run, those rounds skipped; the manifest says what fit
        result = await _replay(sim.base_url, tmp_path, context={"max_model_len": LIMIT})
        served = result.manifest.preflight["server_context"]
        assert served == {"model": "workbench-sim", "max_model_len": LIMIT,
                          "field": "max_model_len", "rounds": 5, "units": 3, "rounds_over": 2,
                          "units_over": 2, "longest": LIMIT + 108}
        by_status = sorted(r.status for r in result.records)
        assert by_status == ["ok", "ok", "ok", "skipped", "skipped"]


def test_listed_models() -> None:
    assert listed_models(LLAMA_CPP_MODELS) == ["tiny-llama"]
    assert listed_models(b'{"data":[{"id":"a","aliases":["b"]},{"id":"c"}]}') == ["a", "b", "c"]
    assert listed_models(b"nope") == []


async def test_a_model_the_server_does_not_list_is_warned_of(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The run says the name is not the server's before anything is sent: llama.cpp
    answers under any name; vLLM, and the embedded engine as it, refuse it with a 404,
    which stops the preflight."""
    async with serve_sim(zero_cost=True, max_model_len=LIMIT * 4) as sim:
        with pytest.raises(BackendError, match=r"HTTP 404.*The model `tiny-lama` does not "
                           r"exist\. Valid aliases: workbench-sim\."):
            await _replay(sim.base_url, tmp_path,
                          backend={"name": "openai", "options": {"model": "tiny-lama"}})
    said = [r.getMessage() for r in caplog.records if "is not among" in r.getMessage()]
    assert said == ["--model 'tiny-lama' is not among the models the server lists "
                    "(workbench-sim): a server that serves one model may answer under any "
                    "name (llama.cpp), another refuses it (vLLM: HTTP 404)"], said
