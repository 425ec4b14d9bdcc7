"""The error each preset states: the fit's median absolute error on published tables.

Numbers from ``python -m workbench.sim.presets.fit`` (docs/hardware.md, "Error left"),
copied here by hand when the fit changes; a test re-derives them from the tables.
"""

from __future__ import annotations

from workbench.sim.presets import parse

#: median absolute error over every published row: metric -> fraction (the NIM rows'
#: TTFT, ITL and throughput, fitted; vLLM's batch latency, not fitted)
FIT_ERROR = {"ttft_ms": 0.118, "itl_ms": 0.069, "throughput_tok_s": 0.140,
             "mean_latency_ms": 0.040}
#: (model, gpu) pairs a published table covers
MEASURED = {("llama-3.3-70b", "h100"), ("llama-3.1-8b", "h200"), ("llama-3.1-70b", "h200"),
            ("mixtral-8x7b", "h200")}


def stated_error(engine: str) -> str:
    """What a figure simulated with ``engine`` must say about its error."""
    if engine.endswith(".json"):
        return "calibrated engine: its error is its calibration's (sim calibrate)"
    model, gpu, _tp, _fp8 = parse(engine)
    e = FIT_ERROR
    text = (f"preset error on published tables: ITL {e['itl_ms']:.0%}, throughput "
            f"{e['throughput_tok_s']:.0%}, TTFT {e['ttft_ms']:.0%}, unfitted batch latency "
            f"{e['mean_latency_ms']:.0%} median abs")
    if (model, gpu) not in MEASURED:
        text += f"; no published table for {model} on {gpu}: extrapolated"
    return text
