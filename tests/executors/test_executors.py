"""One executor interface, composed: dispatch picks it from ``executor``, every executor
builds its runner through ``replay.runner.build_runner``, and none inherits another."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from workbench.config import EXECUTOR_KINDS, RunConfig
from workbench.executors import local, processes, ray
from workbench.executors.dispatch import executor_for
from workbench.executors.kinds import EXECUTORS

ROOT = Path(__file__).resolve().parents[2]


def test_dispatch_composes_the_executor_the_config_names(
        capsys: pytest.CaptureFixture[str]) -> None:
    base = {"trace": "x.csv"}
    one = executor_for(RunConfig.from_dict(base))
    assert type(one) is local.LocalExecutor
    procs = executor_for(RunConfig.from_dict({**base, "executor": {"workers": 2}}))
    assert type(procs) is processes.ShardedExecutor
    assert type(procs.launcher) is processes.ProcessLauncher
    on_ray = executor_for(RunConfig.from_dict({**base, "executor": {"kind": "ray", "workers": 2}}))
    assert type(on_ray) is processes.ShardedExecutor
    assert type(on_ray.launcher) is ray.RayLauncher
    # every kind a config may name is registered, and the CLI offers exactly those
    assert set(EXECUTOR_KINDS) <= set(EXECUTORS.names())
    from workbench.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["replay", "--help"])
    assert "--executor {" + ",".join(EXECUTOR_KINDS) + "}" in capsys.readouterr().out


def test_executors_share_code_by_composition_not_inheritance() -> None:
    for cls in (local.LocalExecutor, processes.ShardedExecutor, processes.ProcessLauncher,
                ray.RayLauncher):
        assert inspect.getmro(cls)[1:] == (object,), cls


def test_a_runner_is_built_in_one_place() -> None:
    """``Runner(...)`` is called only by ``build_runner`` (tests may build their own)."""
    calls = []
    for path in (ROOT / "workbench").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Runner":
                calls.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert len(calls) == 1 and calls[0].startswith("workbench/replay/runner.py:"), calls
