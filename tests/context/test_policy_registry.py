"""Issue 24 item 4: a context policy is one registered class whose dataclass fields are
its options and whose ``needs_output_ids`` drives the backend rule and the runner.

A test-only policy is registered for each test's duration (``POLICIES.added``): its
option is accepted flat in ``context`` (as ``major_compaction_min_drop_tokens`` is),
type-checked, applied by the plan and written back by ``to_dict``; the CLI lists it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from workbench.cli import build_parser
from workbench.config import RunConfig, available
from workbench.context import POLICIES, PlannedRound, make_policy, policy_options
from workbench.data import path as data_path
from workbench.errors import ConfigError
from workbench.executors.virtual import simulate
from workbench.replay.plan import build_plan
from workbench.traces.load import load_trace

TRACE = str(data_path("tracelab/multi_session_example.csv"))


@dataclass(frozen=True)
class CappedPrefix:
    """Reuse at most ``prefix_cap_tokens`` of the conversation; the rest is fresh input."""

    prefix_cap_tokens: int = 0
    name: ClassVar[str] = "capped-prefix"
    needs_output_ids: ClassVar[bool] = True

    def plan(self, context_len: int, prefix_len: int, input_len: int) -> PlannedRound:
        target = prefix_len + input_len
        p = min(context_len, target, self.prefix_cap_tokens)
        return PlannedRound(p, target - p)


def tracegen_help(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["tracegen", "--help"])
    return capsys.readouterr().out


def test_builtin_options_and_capabilities_are_declared_by_the_policies() -> None:
    assert policy_options() == {"major_compaction_min_drop_tokens": 64000,
                                "major_compaction_min_drop_ratio": 0.5}  # fmt: skip
    assert not POLICIES.get("trace-reported").needs_output_ids
    assert POLICIES.get("monotonic") is POLICIES.get("prefix-preserving")
    assert POLICIES.get("prefix-preserving").needs_output_ids
    # an option of another policy is ignored, the policy's own applied
    pp = make_policy("monotonic", {"major_compaction_min_drop_tokens": 7, "other": 1})
    assert pp.major_compaction_min_drop_tokens == 7  # type: ignore[attr-defined]
    assert make_policy("trace-reported", {"major_compaction_min_drop_tokens": 7}) is \
        POLICIES.get("trace-reported")  # fmt: skip


def test_the_config_surface_is_unchanged() -> None:
    d = {"trace": TRACE, "context": {"policy": "prefix-preserving",
                                     "major_compaction_min_drop_tokens": 1000}}  # fmt: skip
    cfg = RunConfig.from_dict(d)
    assert cfg.to_dict()["context"] == {
        "policy": "prefix-preserving", "shared_prefix": False, "max_model_len": None,
        "major_compaction_min_drop_tokens": 1000, "major_compaction_min_drop_ratio": 0.5}
    assert RunConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.replace(**{"context.major_compaction_min_drop_ratio": 0.25}).context.options[
        "major_compaction_min_drop_ratio"] == 0.25  # fmt: skip
    with pytest.raises(ConfigError, match=r"context.major_compaction_min_drop_ratio: expected"):
        RunConfig.from_dict({"trace": TRACE, "context": {"major_compaction_min_drop_ratio": 2}})


def test_a_registered_policy_is_accepted_listed_and_planned(capsys) -> None:
    assert "capped-prefix" not in tracegen_help(capsys)
    with POLICIES.added("capped-prefix", CappedPrefix()):
        d = {"trace": TRACE, "context": {"policy": "capped-prefix", "prefix_cap_tokens": 64}}
        cfg = RunConfig.from_dict(d)
        assert cfg.to_dict()["context"]["prefix_cap_tokens"] == 64
        assert "capped-prefix" in available()["context_policies"]
        assert "capped-prefix" in tracegen_help(capsys)
        plan = build_plan(cfg, load_trace(TRACE))
        assert plan.policy == "capped-prefix"
        prefixes = [r.prefix_len for u in plan.units for r in u.rounds]
        assert max(prefixes) == 64
        with pytest.raises(ConfigError, match="prefix_cap_tokens: expected an integer"):
            RunConfig.from_dict({**d, "context": {"prefix_cap_tokens": "many"}})
        # needs_output_ids: a backend that cannot return ids is refused before any request
        with pytest.raises(ConfigError, match="'capped-prefix' carries the server's exact"):
            RunConfig.from_dict({**d, "backend": "openai-chat"})
        result = simulate({**d, "target": {"url": "sim", "engine": {"num_blocks": 512}}})
        assert result.manifest.status == "completed"
        assert {r.policy for r in result.records} == {"capped-prefix"}
        assert max(r.planned_prefix_tokens for r in result.records) == 64
    assert "capped-prefix" not in tracegen_help(capsys) and "prefix_cap_tokens" not in \
        policy_options()  # fmt: skip
    with pytest.raises(ConfigError, match=r"unknown context option \['prefix_cap_tokens'\]"):
        RunConfig.from_dict({"trace": TRACE, "context": {"prefix_cap_tokens": 64}})
