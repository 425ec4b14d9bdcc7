"""Issue 24 item 4: an arrival mode is one registered object whose capabilities
(``takes_rate``, ``closed_loop``) drive validation, the plan, admission and completion.

Each test registers a test-only mode for its duration (``MODES.added``) and checks
that config validation, ``available()``, the CLI help and a real virtual-time run
follow what the mode declares, not its name.
"""

from __future__ import annotations

import pytest

from workbench.arrival import MODES, ArrivalMode
from workbench.arrival.schedule import at_once
from workbench.cli import build_parser
from workbench.config import RunConfig, available
from workbench.data import path as data_path
from workbench.errors import ConfigError
from workbench.executors.virtual import simulate
from workbench.records import Unit
from workbench.replay.plan import build_plan
from workbench.traces.load import load_trace

TRACE = str(data_path("tracelab/multi_session_example.csv"))


def every_second(units: tuple[Unit, ...], rate: float | None) -> list[float]:
    """Unit k (file order) at k seconds, whatever the trace says."""
    return [1000.0 * k for k in range(len(units))]


def simulate_help(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["simulate", "--help"])
    return capsys.readouterr().out


def test_builtin_modes_declare_their_capabilities() -> None:
    caps = {n: (MODES.get(n).takes_rate, MODES.get(n).closed_loop) for n in MODES.names()}
    assert caps == {"trace-timed": (True, False), "saturated": (False, False),
                    "closed-loop": (False, True), "poisson": (True, False),
                    "gamma": (True, False), "constant": (True, False)}  # fmt: skip
    assert [n for n in MODES.names() if MODES.get(n).process] == ["poisson", "gamma",
                                                                   "constant"]


def test_a_registered_mode_is_accepted_listed_and_planned(capsys) -> None:
    assert "every-second" not in simulate_help(capsys)
    with MODES.added("every-second", ArrivalMode("every-second", every_second)):
        cfg = RunConfig.from_dict({"trace": TRACE, "arrival": "every-second"})
        assert "every-second" in available()["arrival_modes"]
        assert "every-second" in simulate_help(capsys)
        plan = build_plan(cfg, load_trace(TRACE))
        assert [u.offset_ms for u in plan.units] == [1000.0 * k for k in range(len(plan.units))]
        # takes_rate False: arrival.rate is refused, naming the modes that take it
        with pytest.raises(ConfigError, match="use mode 'trace-timed'"):
            RunConfig.from_dict({"trace": TRACE, "arrival": {"mode": "every-second", "rate": 2}})
        result = simulate({"trace": TRACE, "arrival": "every-second",
                           "target": {"url": "sim", "engine": {"num_blocks": 512}}})  # fmt: skip
        assert result.manifest.status == "completed" and result.records
    assert "every-second" not in MODES and "every-second" not in simulate_help(capsys)
    with pytest.raises(ConfigError, match=r"arrival\.mode 'every-second' is unknown"):
        RunConfig.from_dict({"trace": TRACE, "arrival": "every-second"})


def test_closed_loop_is_a_capability_not_a_name() -> None:
    mode = ArrivalMode("refill", at_once, closed_loop=True)
    with MODES.added("refill", mode):
        with pytest.raises(ConfigError, match="'refill' needs max_concurrency"):
            RunConfig.from_dict({"trace": TRACE, "arrival": "refill"})
        cfg = RunConfig.from_dict({"trace": TRACE, "arrival": {
            "mode": "refill", "max_concurrency": 2, "duration_s": 30.0}})  # fmt: skip
        assert cfg.loops_until_deadline
        assert cfg.replace(out_dir="x").keeps_records(10)[0] is False  # no count up front
        # duration_s belongs to every closed-loop mode; the message names them all
        with pytest.raises(ConfigError, match="mode 'closed-loop' or 'refill'"):
            RunConfig.from_dict({"trace": TRACE, "arrival": {"mode": "saturated",
                                                             "duration_s": 5.0}})  # fmt: skip
        looped = simulate({**cfg.to_dict(), "trace": {"path": TRACE, "max_items": 3},
                           "arrival": {"mode": "refill", "max_concurrency": 2,
                                       "duration_s": 30.0}})  # fmt: skip
    # the closed loop started the unit list over until the deadline (loop index ~1, ~2...)
    assert any("~" in r.request_id for r in looped.records)
    assert looped.manifest.completion["status"] == "completed"


def test_registering_a_name_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        MODES.add("saturated", MODES.get("saturated"))
