"""``workbench sim serve``: knobs map onto EngineConfig; the server answers."""

import subprocess
import sys
import urllib.request

from workbench.cli import build_parser
from workbench.commands.sim import knobs_from_args
from workbench.sim.config import EngineConfig


def test_cli_knobs_map_onto_engine_config():
    args = build_parser().parse_args(
        ["sim", "serve", "--block-size", "32", "--zero-cost", "--no-prefix-caching",
         "--error-rate", "0.25", "--sglang-cumulative"]
    )  # fmt: skip
    cfg = EngineConfig.from_knobs(**knobs_from_args(args))
    assert cfg.block_size == 32 and cfg.zero_cost and not cfg.enable_prefix_caching
    assert cfg.faults.error_rate == 0.25 and cfg.faults.sglang_cumulative
    assert args.host == "127.0.0.1" and args.port == 0


def test_sim_serve_prints_its_url_and_serves():
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench", "sim", "serve", "--zero-cost"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        url = line.split()[-1]
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url + "/health", timeout=10) as resp:
            assert resp.status == 200
    finally:
        proc.terminate()
        proc.wait(timeout=10)
