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


def test_a_port_out_of_range_is_a_usage_error_not_a_traceback():
    """``sim serve --port 99999`` (or -1) reached the socket's bind: an OverflowError
    traceback, exit 1."""
    for port in ("99999", "-1", "65536"):
        proc = subprocess.run(
            [sys.executable, "-m", "workbench", "sim", "serve", "--port", port],
            capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr
        assert f"argument --port: expected a port in 0..65535, got {port!r}" in proc.stderr


def test_sim_serve_takes_engine_knobs_and_refuses_an_unknown_scheduler(capsys):
    """``--engine KEY=VALUE`` (as ``simulate`` and ``sweep`` take it), over the flags:
    ``scheduler=sglang`` is SGLang's scheduling; an unknown scheduler is refused before
    anything is served, naming the registered ones (exit 2)."""
    from workbench.commands.sim import run, serve_knobs

    args = build_parser().parse_args(
        ["sim", "serve", "--max-num-seqs", "8", "--engine", "scheduler=sglang",
         "--engine", "max_num_seqs=16"])  # fmt: skip
    cfg = EngineConfig.from_knobs(**serve_knobs(args))
    assert not cfg.mixed_batches and cfg.admission_reserve == 0.7 and cfg.max_num_seqs == 16
    trt = build_parser().parse_args(["sim", "serve", "--engine", "scheduler=trtllm"])
    assert EngineConfig.from_knobs(**serve_knobs(trt)).guaranteed_no_evict
    bad = build_parser().parse_args(["sim", "serve", "--engine", "scheduler=sgl"])
    assert run(bad) == 2
    err = capsys.readouterr().err
    assert "unknown scheduler 'sgl'" in err and "sglang" in err and "Traceback" not in err
