"""The ``coding-agent`` preset's fit: ``measure`` reads captured conversations (the weka
reader's sessions and sub-agents) into columns per group, ``fit`` turns them into
``agentic`` keys, ``table`` renders data against a drawn workload
(bench/fit_coding_agent.py). Method and figures: docs/trace-formats.md, "The
``coding-agent`` preset and its fit".
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workbench.metrics.distribution import quantiles
from workbench.records import Workload
from workbench.workloads.synthetic import Distribution

SAMPLE = "weka/cc_traces_sample.jsonl"  # the bundled sample the preset is fitted on
Z90 = 1.2815515655446004  # the standard normal's 0.9 quantile
COMPACTED = 0.5  # a prompt kept below this share of the previous one is a compaction
GROUPS = ("session", "subagent")
LENGTHS = ("rounds", "first_input", "input", "output", "tool_wait")


@dataclass
class Group:
    """One group's columns (token counts, waits in ms)."""

    rounds: list[int] = field(default_factory=list)
    first_input: list[int] = field(default_factory=list)
    input: list[int] = field(default_factory=list)
    fresh_blocks: list[int] = field(default_factory=list)
    output: list[int] = field(default_factory=list)
    tool_wait: list[float] = field(default_factory=list)
    prompt: list[int] = field(default_factory=list)
    compactions: int = 0
    open_rounds: int = 0  # rounds but a session's last (those that may spawn)
    spawning_rounds: int = 0
    fan: list[int] = field(default_factory=list)


def _leading(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def measure(workload: Workload) -> dict[str, Group]:
    """The columns of every group (module doc); ``block_size`` sizes the hash blocks."""
    block = workload.block_size or 64
    out = {g: Group() for g in GROUPS}
    spawns = Counter((u.spawn.parent_id, u.spawn.round_idx) for u in workload.units
                     if u.spawn is not None)
    for u in workload.units:
        g = out["subagent" if u.spawn is not None else "session"]
        rounds = u.rounds
        g.rounds.append(len(rounds))
        prompts = [r.prefix_len + r.input_len for r in rounds]
        g.first_input.append(prompts[0])
        g.prompt.extend(prompts)
        g.output.extend(r.output_len for r in rounds)
        g.tool_wait.extend(r.tool_wait_after_ms for r in rounds[:-1])
        g.open_rounds += len(rounds) - 1
        for k in range(1, len(rounds)):
            a, b = rounds[k - 1], rounds[k]
            kept = (_leading(a.hash_ids, b.hash_ids) * block if a.hash_ids and b.hash_ids
                    else b.prefix_len)  # drawn rounds carry no hash ids: their prefix
            if kept < COMPACTED * prompts[k - 1] and prompts[k] < COMPACTED * prompts[k - 1]:
                g.compactions += 1
                continue
            g.input.append(prompts[k] - prompts[k - 1] - a.output_len)
            g.fresh_blocks.append(prompts[k] - kept)
        for k in range(len(rounds) - 1):
            fan = spawns.get((u.unit_id, k), 0)
            if fan:
                g.spawning_rounds += 1
                g.fan.append(fan)
    return out


def lognormal(values: list[int] | list[float]) -> Distribution:
    """A lognormal through the values' p50 and p90, censored at their maximum (rounded:
    median and maximum to integers, sigma to 3 digits)."""
    p50, p90 = np.percentile(np.asarray(values, dtype=float), [50, 90])
    sigma = float(f"{math.log(p90 / p50) / Z90:.3g}")
    return Distribution("lognormal", float(round(p50)), sigma, float(round(max(values))))


def fit(stats: dict[str, Group]) -> dict[str, str]:
    """The ``agentic`` keys of a preset fitted to ``stats`` (module doc)."""
    root, sub = stats["session"], stats["subagent"]
    keys = {k: str(lognormal(getattr(root, k))) for k in LENGTHS}
    transitions = root.open_rounds
    keys["compaction"] = f"{root.compactions / transitions:.3g}" if transitions else "0"
    if root.fan:
        keys["subagents"] = f"{root.spawning_rounds / root.open_rounds:.3g}"
        keys["fanout"] = str(Distribution("uniform", min(root.fan), max(root.fan)))
        keys.update({f"subagent_{k}": str(lognormal(getattr(sub, k))) for k in LENGTHS})
    return keys


def _cells(values: Any, scale: float = 1.0) -> str:
    if not len(values):
        return "—"
    return " / ".join(f"{v / scale:,.0f}" if v / scale >= 10 else f"{v / scale:.2g}"
                      for v in quantiles(np.asarray(values, dtype=float), (50, 90, 99)))


def table(data: dict[str, Group], drawn: dict[str, Group], preset: dict[str, str]) -> str:
    """Markdown: for every key, the preset's value, and the data's p50 / p90 / p99 beside
    the drawn workload's (``drawn``: ``measure`` of a workload of the preset)."""
    rows = ["| group | key | preset | data p50 / p90 / p99 | preset's draws p50 / p90 / p99 |",
            "| --- | --- | --- | --- | --- |"]
    for name in GROUPS:
        d, w = data[name], drawn[name]
        pre = "" if name == "session" else "subagent_"
        for key in LENGTHS:
            unit, scale = (" (s)", 1000.0) if key == "tool_wait" else ("", 1.0)
            rows.append(f"| {name} | `{pre}{key}`{unit} | `{preset.get(pre + key, '')}` | "
                        f"{_cells(getattr(d, key), scale)} | {_cells(getattr(w, key), scale)} |")
        rows.append(f"| {name} | prompt tokens (all rounds) | — | {_cells(d.prompt)} | "
                    f"{_cells(w.prompt)} |")
        rows.append(f"| {name} | tokens past the previous prompt's hash blocks | — | "
                    f"{_cells(d.fresh_blocks)} | {_cells(w.fresh_blocks)} |")
    d, w = data["session"], drawn["session"]
    rows.append(f"| session | rounds that spawn sub-agents | "
                f"`subagents={preset.get('subagents', 0)}` | "
                f"{_share(d.spawning_rounds, d.open_rounds)} | "
                f"{_share(w.spawning_rounds, w.open_rounds)} |")
    rows.append(f"| session | sub-agents a spawning round starts | "
                f"`fanout={preset.get('fanout', '')}` | {_counts(d.fan)} | {_counts(w.fan)} |")
    rows.append(f"| session | compactions | `compaction={preset.get('compaction', 0)}` | "
                f"{_share(d.compactions, d.open_rounds)} | "
                f"{_share(w.compactions, w.open_rounds)} |")
    return "\n".join(rows)


def _share(k: int, n: int) -> str:
    return f"{k} of {n} ({k / n:.2%})" if n else "—"


def _counts(values: list[int]) -> str:
    return ", ".join(f"{v}: {c}" for v, c in sorted(Counter(values).items())) or "—"
