"""Issue 24 item 4: a backend is one registered codec that declares what the rest of
the client asks of it: ``returns_token_ids`` (the token-id rule), ``servers`` (flush
routes in order, preflight advice) and its parser's fast paths (``feed_all``,
``feed_one``, given by ``EventParser`` when it has none of its own).

A test-only backend is registered for a test's duration (``BACKENDS.added``) and
driven against the embedded engine behind real HTTP.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import orjson
import pytest

from workbench.backends import BACKENDS, BackendError
from workbench.backends.base import SGLANG_FLUSH, EventParser, ServerFacts
from workbench.backends.flush import flush_prefix_cache
from workbench.backends.openai import OpenAICompletionsCodec
from workbench.backends.preflight import preflight_prefix_cache
from workbench.backends.transport import Transport, TransportOptions
from workbench.cli import build_parser
from workbench.config import RunConfig, available, token_id_backends
from workbench.data import path as data_path
from workbench.errors import ConfigError
from workbench.sim.server import serve_sim

TRACE = str(data_path("tracelab/multi_session_example.csv"))
TOY_SERVERS = ServerFacts((SGLANG_FLUSH,), "toy: no cached-token telemetry",
                          "toy: the toy server's cache is off")  # fmt: skip


@dataclass(frozen=True)
class ToyCodec(OpenAICompletionsCodec):
    """The completions protocol under another name, with its own server facts."""

    name: str = field(default="toy-completions", init=False)
    servers: ServerFacts = field(default=TOY_SERVERS, init=False)


@dataclass(frozen=True)
class ToyTextCodec(OpenAICompletionsCodec):
    name: str = field(default="toy-text", init=False)
    returns_token_ids: bool = field(default=False, init=False)


def replay_help(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["replay", "--help"])
    return capsys.readouterr().out


def test_token_id_backends_and_help_come_from_the_registry(capsys) -> None:
    assert token_id_backends() == ["openai", "sglang-tokens", "vllm-tokens"]
    assert "toy-completions" not in replay_help(capsys)
    with BACKENDS.added("toy-completions", ToyCodec()), BACKENDS.added("toy-text", ToyTextCodec()):
        assert token_id_backends() == ["openai", "sglang-tokens", "vllm-tokens",
                                       "toy-completions"]  # fmt: skip
        assert {"toy-completions", "toy-text"} <= set(available()["backends"])
        assert "toy-completions" in replay_help(capsys)
        pp = {"trace": TRACE, "context": "prefix-preserving"}
        RunConfig.from_dict({**pp, "backend": "toy-completions"})  # returns ids: accepted
        ids = "use one of openai, sglang-tokens, vllm-tokens, toy-completions"
        with pytest.raises(ConfigError, match=f"backend 'toy-text' cannot return; {ids}"):
            RunConfig.from_dict({**pp, "backend": "toy-text"})
    assert "toy-completions" not in BACKENDS and "toy-completions" not in replay_help(capsys)


async def test_flush_tries_the_routes_the_backend_declares() -> None:
    with BACKENDS.added("toy-completions", ToyCodec()):
        async with asyncio.timeout(30), serve_sim(zero_cost=True) as sim:
            toy = await flush_prefix_cache(sim.base_url, backend="toy-completions")
            default = await flush_prefix_cache(sim.base_url, backend="openai")
    assert [t["endpoint"] for t in toy.tries] == ["POST /flush_cache"] and toy.ok
    assert [t["endpoint"] for t in default.tries] == ["POST /reset_prefix_cache"] and default.ok


async def test_preflight_advice_is_the_backends_own() -> None:
    pool = list(range(1000, 3000))
    async with (
        asyncio.timeout(30),
        serve_sim(zero_cost=True, enable_prefix_caching=False) as sim,
        Transport(TransportOptions(base_url=sim.base_url)) as t,
    ):
        with pytest.raises(BackendError, match="toy: the toy server's cache is off"):
            await preflight_prefix_cache(t, ToyCodec(), pool, probe_tokens=512)
        with pytest.raises(BackendError, match="--enable-prefix-caching"):
            await preflight_prefix_cache(t, BACKENDS.get("openai"), pool, probe_tokens=512)


class Deltas(EventParser):
    """A parser with only ``feed``: one id per ``{"n": k}`` event with k > 0."""

    __slots__ = ()

    def feed(self, payload: bytes) -> list[int] | None:
        n = orjson.loads(payload)["n"]
        return [7] * n if n else None


def test_every_parser_has_the_fast_paths_in_terms_of_feed() -> None:
    payloads = [orjson.dumps({"n": n}) for n in (0, 1, 3, 0, 2)]
    parser = Deltas()
    assert parser.feed_all(payloads) == [1, 3, 2]
    assert [parser.feed_one(p) for p in payloads] == [0, 1, 3, 0, 2]
