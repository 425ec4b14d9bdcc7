"""A real vLLM server (CPU build, tiny random-weight Llama) for the ``real_engine`` tests.

Which server:

* ``$WORKBENCH_VLLM_URL`` set: that server is used as is (started by you, e.g. with
  ``scripts/vllm_cpu.sh start``, or a GPU deployment started with the same flags).
* otherwise ``scripts/vllm_cpu.sh`` starts one for the test session (instance name
  ``pytest``, its own state file) and stops it at the end. If the set-up is missing
  the tests are skipped, unless ``$WORKBENCH_REAL_ENGINE=1`` (CI), which runs the
  set-up first and turns every problem into a failure instead of a skip.

The server's block size and ``max_model_len`` are read from the server itself
(``/metrics`` and ``/v1/models``), never assumed.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from workbench.backends.scrape import parse_metrics

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "vllm_cpu.sh"
INSTANCE = "pytest"
SETUP_TIMEOUT_S = 900
START_TIMEOUT_S = 300


@dataclass(frozen=True)
class VLLMServer:
    url: str
    model: str
    block_size: int
    max_model_len: int
    started_here: bool


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.real_engine)


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as resp:
        data: dict = json.load(resp)
        return data


def get_metrics(url: str) -> dict[str, float]:
    """The server's Prometheus counters workbench keeps (summed over label sets)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        values, _ = parse_metrics(resp.read().decode())
    return values


def _cache_config(url: str) -> dict[str, str]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        _, config = parse_metrics(resp.read().decode())
    if not config:
        raise RuntimeError(f"{url}/metrics has no vllm:cache_config_info")
    return config


def _script(*args: str, timeout: float, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def _describe(url: str, started_here: bool) -> VLLMServer:
    model = _get_json(f"{url}/v1/models")["data"][0]
    return VLLMServer(
        url=url,
        model=str(model["id"]),
        block_size=int(float(_cache_config(url)["block_size"])),
        max_model_len=int(model["max_model_len"]),
        started_here=started_here,
    )


def _set_up(env: dict[str, str], required: bool) -> None:
    home = Path(env.get("VLLM_CPU_HOME") or Path.home() / ".cache/workbench/vllm-cpu")
    if (home / "venv" / ".workbench-stamp").exists():
        return
    if not required:
        pytest.skip(
            f"real vLLM not set up ({home}/venv missing): run `scripts/vllm_cpu.sh setup` "
            "(~1.5 min, 2.5 GB), set WORKBENCH_VLLM_URL to a running server, or "
            "WORKBENCH_REAL_ENGINE=1 to set up and run"
        )
    done = _script("setup", timeout=SETUP_TIMEOUT_S, env=env)
    if done.returncode != 0:
        pytest.fail(f"scripts/vllm_cpu.sh setup failed:\n{done.stderr[-3000:]}")


@pytest.fixture(scope="session")
def vllm_server() -> Iterator[VLLMServer]:
    external = os.environ.get("WORKBENCH_VLLM_URL", "").strip().rstrip("/")
    if external:
        yield _describe(external, started_here=False)
        return
    required = os.environ.get("WORKBENCH_REAL_ENGINE") == "1"
    # dev mode mounts /reset_prefix_cache (sweeps reset the cache between points)
    env = {**os.environ, "VLLM_CPU_NAME": INSTANCE, "VLLM_SERVER_DEV_MODE": "1"}
    # ahead of other load on a small shared machine, where it can (root): timings are the
    # server's, not the neighbours' (docs/calibration.md, "On a shared CPU")
    env.setdefault("VLLM_CPU_NICE", "-10")
    env.setdefault("VLLM_CPU_ENGINE_CORE_NICE", "0")  # the API server first (same doc)
    _set_up(env, required)
    started = _script("start", timeout=START_TIMEOUT_S, env=env)
    if started.returncode != 0:
        pytest.fail(f"scripts/vllm_cpu.sh start failed:\n{started.stderr[-3000:]}")
    url = started.stdout.strip().splitlines()[-1]
    try:
        yield _describe(url, started_here=True)
    finally:
        _script("stop", timeout=60, env=env)
