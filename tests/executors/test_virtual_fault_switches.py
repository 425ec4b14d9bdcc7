"""A fault switch of the embedded engine acts at its HTTP server (docs/embedded-engine.md,
"Fault switches"); a virtual-time run has no server. Found reading a report: `simulate
--engine error_rate=0.3` printed 64/64 ok, the switch silently ignored. It is refused,
naming the knob, before anything runs."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.errors import ConfigError
from workbench.executors.virtual import simulate
from workbench.sim.config import EngineConfig
from workbench.sim.faults import Faults

TRACE = "0,0,0,0,100,10,1\n1,0,0,0,120,10,1\n"


def _trace(tmp_path: Path) -> Path:
    path = tmp_path / "raw.csv"
    path.write_text("session_id,arrival_time,round_idx,prefix_len,input_len,output_len,"
                    "tool_wait_after_ms\n" + TRACE)
    return path


@pytest.mark.parametrize("knobs", [{"error_rate": 0.3}, {"disconnect_after_tokens": 2},
                                   {"omit_usage": True}, {"usage_fault": "huge"}])
def test_a_fault_switch_in_a_virtual_run_is_refused_by_name(tmp_path: Path, knobs: dict) -> None:
    name = next(iter(knobs))
    with pytest.raises(ConfigError, match=rf"target\.engine\.{name}: .*HTTP server.*virtual"):
        simulate({"trace": str(_trace(tmp_path)), "target": {"engine": knobs}})


def test_an_engine_config_given_with_a_fault_is_refused_too(tmp_path: Path) -> None:
    engine = dataclasses.replace(EngineConfig.from_knobs(),
                                 faults=Faults(stall_after_tokens=1, stall_s=1.0))
    with pytest.raises(ConfigError, match=r"stall_after_tokens, stall_s: "):
        simulate({"trace": str(_trace(tmp_path))}, engine=engine)


def test_simulate_on_the_command_line_exits_2_naming_the_knob(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "workbench", "simulate", "--trace",
                          str(_trace(tmp_path)), "--engine", "error_rate=0.3"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "target.engine.error_rate" in out.stderr and "Traceback" not in out.stderr
    assert "ok" not in out.stdout
