"""Further Prometheus endpoints (backend.metrics_urls) and series globs (metrics_series):
parsing, credentials, the embedded engine's simulated GPU exporter, and a real run whose
timeline, summary and report carry the second endpoint's series."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from conftest import FAST_ENGINE
from public_data import require

import workbench as wb
from workbench.backends.scrape import MetricsScraper, endpoint_url, parse_metrics
from workbench.errors import ConfigError
from workbench.sim.metrics import SIM_GPU_FB_MIB, SIM_GPU_PATH, SIM_GPU_WEIGHTS_MIB
from workbench.sim.server import serve_sim

TRACE = "tracelab/multi_session_example.csv"
DCGM_PAGE = """# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a"} 50
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b"} 100
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a"} 1000
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-b"} 3000
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-a"} 1410
# TYPE my_service_queue_depth gauge
my_service_queue_depth 7
"""


def test_known_gpu_series_are_kept_and_combined_by_their_rule():
    values, _ = parse_metrics(DCGM_PAGE)
    # utilisation is the mean over GPUs, memory their sum; unknown names need a glob
    assert values == {"DCGM_FI_DEV_GPU_UTIL": 75.0, "DCGM_FI_DEV_FB_USED": 4000.0}
    values, _ = parse_metrics(DCGM_PAGE, ["DCGM_FI_DEV_*", "my_service_*"])
    assert values["DCGM_FI_DEV_SM_CLOCK"] == 1410.0
    assert values["my_service_queue_depth"] == 7.0


def test_an_endpoint_without_a_path_reads_its_metrics_page():
    assert endpoint_url("127.0.0.1:9400") == "http://127.0.0.1:9400/metrics"
    assert endpoint_url("http://h:9400/") == "http://h:9400/metrics"
    assert endpoint_url("https://h/custom/path?x=1") == "https://h/custom/path?x=1"


@pytest.mark.parametrize(
    ("backend", "message"),
    [
        ({"metrics_urls": ["ftp://127.0.0.1:9400"]}, "backend.metrics_urls[0]: scheme 'ftp'"),
        ({"metrics_urls": ["sim"]}, "backend.metrics_urls[0]: 'sim' is a target"),
        ({"metrics_urls": "http://127.0.0.1:9400"}, "backend.metrics_urls: expected a list"),
        ({"metrics_urls": ["http://127.0.0.1:9400"] * 17}, "at most 16"),
        ({"metrics_series": ["DCGM FI"]}, "backend.metrics_series[0]: 'DCGM FI' is not"),
        ({"metrics_series": [""]}, "backend.metrics_series[0]"),
    ],
)
def test_bad_endpoints_and_globs_are_config_errors_naming_the_field(backend, message):
    with pytest.raises(ConfigError) as err:
        wb.RunConfig.from_dict({"trace": "t.csv", "backend": backend}).check()
    assert message in str(err.value)


@pytest.fixture
async def guarded_exporter(loopback) -> AsyncIterator[tuple[str, list[str | None]]]:
    """A Prometheus page behind Basic auth (user ``u``, password ``s3cret-pw-value``)."""
    seen: list[str | None] = []
    want = "Basic " + base64.b64encode(b"u:s3cret-pw-value").decode()

    async def page(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        if request.headers.get("Authorization") != want:
            return web.Response(status=401, text="unauthorized")
        return web.Response(text=DCGM_PAGE)

    url = await loopback([web.get("/metrics", page)])
    yield url.removeprefix("http://"), seen


async def test_credentials_go_in_a_header_and_never_into_what_is_kept(sim, guarded_exporter):
    host, seen = guarded_exporter
    scraper = MetricsScraper(sim.base_url, 1.0, extra_urls=[f"http://u:s3cret-pw-value@{host}"])
    try:
        row = await scraper.scrape_once()
    finally:
        await scraper.stop()
    assert seen and seen[-1] and seen[-1].startswith("Basic ")
    assert row["DCGM_FI_DEV_GPU_UTIL"] == 75.0 and "endpoint_errors" not in row
    kept = json.dumps([row, scraper.describe()])
    assert "s3cret-pw-value" not in kept
    assert scraper.describe()["endpoints"] == [f"http://{host}/metrics"]


async def test_a_failing_endpoint_is_noted_and_the_engine_series_stay(sim):
    scraper = MetricsScraper(sim.base_url, 1.0, extra_urls=["http://127.0.0.1:9/metrics"])
    try:
        row = await scraper.scrape_once()
    finally:
        await scraper.stop()
    assert "error" not in row and "vllm:num_requests_running" in row
    assert list(row["endpoint_errors"]) == ["http://127.0.0.1:9/metrics"]


async def test_the_simulated_gpu_exporter_follows_the_engine_and_says_it_is_simulated(sim):
    scraper = MetricsScraper(sim.base_url, 1.0, extra_urls=[sim.base_url + SIM_GPU_PATH])
    try:
        row = await scraper.scrape_once()
    finally:
        await scraper.stop()
    assert row["DCGM_FI_DEV_GPU_UTIL"] == 0.0  # idle engine
    assert row["DCGM_FI_DEV_FB_USED"] == SIM_GPU_WEIGHTS_MIB  # empty KV cache
    assert row["DCGM_FI_DEV_FB_FREE"] == SIM_GPU_FB_MIB - SIM_GPU_WEIGHTS_MIB
    series = scraper.describe()["series"]
    assert series["DCGM_FI_DEV_GPU_UTIL"] == {
        "label": "GPU utilisation", "unit": "%", "simulated": True,
        "endpoints": [sim.base_url + SIM_GPU_PATH],
    }  # fmt: skip


@pytest.mark.slow
async def test_a_run_scrapes_a_second_endpoint_by_pattern_into_timeline_summary_and_report(
    tmp_path: Path,
):
    """The must-show of issue 26: a live run against the embedded engine scrapes its
    simulated GPU exporter as a second endpoint, with a glob; the series are in
    metrics_timeline.jsonl, in summary.json (peak, mean) and in the rendered report."""
    async with serve_sim(**FAST_ENGINE) as sim:
        cfg = wb.RunConfig.from_dict({
            "trace": {"path": str(require(TRACE)), "max_items": 4},
            "arrival": {"mode": "saturated"},
            "backend": {
                "name": "vllm-tokens", "scrape_interval_s": 0.05,
                "metrics_urls": [sim.base_url + SIM_GPU_PATH],
                "metrics_series": ["DCGM_FI_DEV_*", "vllm:request_success*"],
            },
            "target": sim.base_url, "out_dir": str(tmp_path / "runs"), "run_id": "gpu",
        })  # fmt: skip
        result = await wb.run_async(cfg)
    run_dir = tmp_path / "runs" / "gpu"
    rows = [json.loads(line) for line in (run_dir / "metrics_timeline.jsonl").open()]
    assert len(rows) >= 2
    assert all("DCGM_FI_DEV_FB_USED" in r and "vllm:request_success_total" in r for r in rows)
    summary = json.loads((run_dir / "summary.json").read_text())
    series = summary["server"]["series"]
    fb = series["DCGM_FI_DEV_FB_USED"]
    assert fb["simulated"] is True and fb["unit"] == "MiB" and fb["samples"] == len(rows)
    assert fb["peak"] >= fb["mean"] >= SIM_GPU_WEIGHTS_MIB
    done = series["vllm:request_success_total"]  # a glob over the engine's own page
    assert done["label"] == "vllm:request_success_total" and done["unit"] is None
    counted = rows[-1]["vllm:request_success_total"] - rows[0]["vllm:request_success_total"]
    assert counted == summary["ok"] > 0 and done["peak"] == rows[-1]["vllm:request_success_total"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["metrics_scrape"]["endpoints"] == [sim.base_url + SIM_GPU_PATH]
    fig = wb.plot(result, "timeline")
    titles = [a.get_title() for a in fig.axes]
    assert "GPU framebuffer memory used (MiB), simulated [DCGM_FI_DEV_FB_USED]" in titles

    from workbench.cli import main

    assert main(["report", str(run_dir), "-o", str(tmp_path / "reports")]) == 0
    report = next((tmp_path / "reports").glob("*/report.html")).read_text()
    assert "GPU framebuffer memory used (MiB), simulated: peak" in report
    table = next((tmp_path / "reports").glob("*/tables/server.csv")).read_text()
    assert "GPU utilisation (%), simulated: mean" in table


async def test_worker_processes_scrape_the_further_endpoint_too(sim, tmp_path: Path):
    """executor.workers 2: the parent scrapes (once for all shards), the same way."""
    cfg = wb.RunConfig.from_dict({
        "trace": {"path": str(require(TRACE)), "max_items": 4},
        "arrival": {"mode": "saturated", "max_concurrency": 2},
        "backend": {"name": "vllm-tokens", "scrape_interval_s": 0.05,
                    "metrics_urls": [sim.base_url + SIM_GPU_PATH]},
        "target": sim.base_url, "executor": {"workers": 2}, "out_dir": str(tmp_path),
    })  # fmt: skip
    result = await wb.run_async(cfg)
    assert result.manifest.metrics_scrape["series"]["DCGM_FI_DEV_POWER_USAGE"]["unit"] == "W"
    assert all("DCGM_FI_DEV_POWER_USAGE" in row for row in result.metrics_timeline)
    assert wb.summarize(result)["server"]["series"]["DCGM_FI_DEV_POWER_USAGE"]["samples"] >= 2
