"""Per-run knobs on the command line, request extras and SGLang's cached-token split."""

from __future__ import annotations

import argparse

import orjson
import pytest

import workbench as wb
from workbench.backends.base import WireRequest, make_codec
from workbench.cli import build_parser
from workbench.commands._axes import config_from_args
from workbench.errors import ConfigError

TRACELAB = "workbench/data/tracelab/multi_session_example.csv"


def args_of(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["replay", "--trace", TRACELAB, *argv])


def test_every_knob_lands_in_its_config_field(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config_from_args(args_of(
        "--slo", "ttft_ms<=2000", "--slo", "tpot_ms=50", "--workers", "2",
        "--executor", "processes", "--fuse", "30", "--drain", "truncate",
        "--no-preflight", "--header", "X-Team=infra", "--header", "X-Key=$WB_TEST_KEY",
        "--body-field", "priority=3", "--body-field", "sampling_params.top_k=5",
        "--routing-header", "X-DP-Rank", "--routing-field", "routed_dp_rank",
        "--cached-tokens-details", "--backend", "sglang-tokens",
    ))
    assert cfg.slo == {"ttft_ms": 2000.0, "tpot_ms": 50.0}
    assert (cfg.executor.workers, cfg.executor.kind) == (2, "processes")
    assert (cfg.arrival.fuse_s, cfg.arrival.drain) == (30.0, "truncate")
    assert cfg.backend.preflight is False
    assert cfg.backend.options == {
        "headers": {"X-Team": "infra", "X-Key": "$WB_TEST_KEY"},
        "extra_body": {"priority": 3, "sampling_params": {"top_k": 5}},
        "routing_header": "X-DP-Rank", "routing_field": "routed_dp_rank",
        "return_cached_tokens_details": True,
    }
    assert "secret" not in orjson.dumps(cfg.to_dict()).decode()  # only the variable's name
    # --model goes to the backends whose body has a model field (not SGLang's /generate)
    assert config_from_args(args_of("--model", "m", "--backend", "vllm-tokens")
                            ).backend.options == {"model": "m"}
    with pytest.raises(ConfigError, match=r"no option.*model"):
        config_from_args(args_of("--model", "m", "--backend", "sglang-tokens"))


def test_ray_executor_and_percentile_bounds_are_checked() -> None:
    with pytest.raises(ConfigError, match="sweep"):
        config_from_args(args_of("--slo", "ttft_ms:p90<=2000"))
    with pytest.raises(ConfigError, match="METRIC<=MS"):
        config_from_args(args_of("--slo", "ttft_ms"))
    try:
        import ray  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError, match="needs Ray"):
            config_from_args(args_of("--executor", "ray", "--workers", "2"))
    else:
        cfg = config_from_args(args_of("--executor", "ray", "--ray-address", "auto"))
        assert (cfg.executor.kind, cfg.executor.address) == ("ray", "auto")


def test_extras_merge_into_the_body_and_headers_carry_the_routing_slot(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WB_TEST_KEY", "secret")
    codec = make_codec("sglang-tokens", headers={"X-Key": "$WB_TEST_KEY"},
                       extra_body={"sampling_params": {"top_k": 5}, "priority": 3},
                       routing_header="X-DP-Rank", routing_field="routing.dp_rank",
                       return_cached_tokens_details=True)
    req = WireRequest("r1", [1, 2, 3], 4, routing_slot=7)
    body = codec.body(req)
    assert body["sampling_params"]["top_k"] == 5 and body["sampling_params"]["max_new_tokens"] == 4
    assert body["priority"] == 3 and body["routing"] == {"dp_rank": 7}
    assert body["return_cached_tokens_details"] is True
    assert codec.request_headers(req) == {"X-Key": "secret", "X-DP-Rank": "7"}  # type: ignore[attr-defined]
    assert codec.name == "sglang-tokens" and codec.returns_token_ids
    monkeypatch.delenv("WB_TEST_KEY")
    with pytest.raises(ConfigError, match="not set"):
        make_codec("openai", headers={"X-Key": "$WB_TEST_KEY"})


async def test_sglang_cached_token_split_is_recorded_when_asked_for() -> None:
    from workbench.sim.server import serve_sim

    async with serve_sim(speedup=1000.0) as handle:
        base = {"trace": {"path": TRACELAB, "max_items": 2}, "target": handle.base_url,
                "backend": {"name": "sglang-tokens",
                            "options": {"return_cached_tokens_details": True,
                                        "extra_body": {"priority": 1},
                                        "routing_header": "X-DP-Rank"}}}
        asked = await wb.run_async(base)
        plain = await wb.run_async({**base, "backend": "sglang-tokens"})
    assert asked.records and all(r.status == "ok" for r in asked.records)
    for r in asked.records:
        details = r.extra["server_metrics"]["cached_tokens_details"]
        assert details == {"device": r.cached_tokens, "host": 0}
    assert any(r.cached_tokens for r in asked.records)
    assert all("server_metrics" not in r.extra for r in plain.records)


@pytest.mark.parametrize(("backend", "extra", "owned"), [
    ("openai", {"max_tokens": 5}, "max_tokens"),
    ("openai", {"prompt": [1, 2]}, "prompt"),
    ("openai", {"stream": False}, "stream"),
    ("openai", {"stream_options": {"include_usage": False}}, "stream_options.include_usage"),
    ("openai-chat", {"messages": []}, "messages"),
    ("vllm-tokens", {"sampling_params": {"min_tokens": 1}}, "sampling_params.min_tokens"),
    ("vllm-tokens", {"sampling_params": 3}, "sampling_params.max_tokens"),
    ("sglang-tokens", {"input_ids": [1]}, "input_ids"),
    ("sglang-tokens", {"sampling_params": {"ignore_eos": False}}, "sampling_params.ignore_eos"),
])
def test_a_body_field_the_backend_sets_itself_is_refused_before_the_run(
        tmp_path, backend, extra, owned) -> None:
    """``--body-field max_tokens=5`` replaced the pinned output length (and ``prompt``
    the prompt, ``stream`` the mode) of every request while the records kept the
    planned values: what was measured was not what the run says it sent."""
    cfg = {"trace": TRACELAB, "target": "sim", "out_dir": str(tmp_path),
           "backend": {"name": backend, "options": {"extra_body": extra}}}
    with pytest.raises(ConfigError) as info:
        wb.RunConfig.from_dict(cfg)
    assert str(info.value).startswith(f"backend.options.extra_body (--body-field) would "
                                      f"replace {owned}, which the {backend} backend sets"), \
        str(info.value)
    assert not list(tmp_path.iterdir())  # nothing created
    # beside the fields it sets, a field of its own is the user's (sampling_params.top_k)
    wb.RunConfig.from_dict({**cfg, "backend": {"name": backend, "options": {
        "extra_body": {"sampling_params": {"top_k": 5}, "priority": 3}}}})


def test_a_routing_field_the_backend_sets_itself_is_refused(tmp_path) -> None:
    cfg = {"trace": TRACELAB, "target": "sim", "out_dir": str(tmp_path),
           "backend": {"name": "sglang-tokens",
                       "options": {"routing_field": "sampling_params.max_new_tokens"}}}
    with pytest.raises(ConfigError, match=r"^backend.options.routing_field \(--routing-field\) "
                                          r"would replace sampling_params.max_new_tokens"):
        wb.RunConfig.from_dict(cfg)
    cfg["backend"]["options"]["routing_field"] = "routing.dp_rank"
    wb.RunConfig.from_dict(cfg)
