"""A capacity plan's report pieces: its headline, tables and the curve behind it (docs/plan.md)."""

from __future__ import annotations

import html
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from workbench.plan import PlanResult
from workbench.plan.prices import EVERY_GPU
from workbench.report.headline import Headline
from workbench.report.plots import _new
from workbench.report.tables import named
from workbench.sim.presets.stated import stated_error


def plan_headline(result: PlanResult) -> Headline:
    """The plan's one-sentence answer, then one line per scaled rate: each option's
    replicas (a range within its error where the band's ends differ) and GPUs."""
    lines = [result.answer()]
    for scale in result.scales[1:]:
        lines.append(f"At {scale:g}× ({result.rate_words(scale)}): "
                     + "; ".join(result.option_words(o, scale) for o in result.options))
    return Headline(lines)


class ClosingNote:
    """The report's last word: the plan's answer in one sentence, as text and HTML."""

    def __init__(self, sentence: str) -> None:
        self.sentence = sentence

    def __str__(self) -> str:
        return f"In one sentence: {self.sentence}"

    def _repr_html_(self) -> str:
        return (f'<p class="wb-closing-note"><b>In one sentence:</b> '
                f"{html.escape(self.sentence)}</p>")


def closing_note(result: PlanResult) -> ClosingNote:
    """The closing note quoting the answer at the trace's own rate (``answer()``)."""
    return ClosingNote(result.answer())


INT_COLUMNS = ("replicas", "replicas_low", "replicas_high", "gpus_per_replica", "gpus",
               "gpus_low", "gpus_high")


def answers_frame(result: PlanResult) -> pd.DataFrame:
    """``answers()`` as a table; replicas and GPUs as integers (empty where none held)."""
    df = pd.DataFrame(result.answers())
    for col in INT_COLUMNS:
        if col in df:
            df[col] = df[col].astype("Int64")
    return named(df, "plan_answers")


def curve_frame(result: PlanResult) -> pd.DataFrame:
    df = pd.DataFrame(result.curve())
    if len(df):
        df = df.sort_values(["option", "scale", "replicas"]).reset_index(drop=True)
    return named(df, "plan_curve")


def plan_curve(result: PlanResult) -> Figure:
    """Worst SLO ratio against replicas, one line per option and scale (log y)."""
    fig, (ax,) = _new(1, size=(7.5, 4.2))
    df = curve_frame(result)
    for (label, scale), part in df.groupby(["option", "scale"], sort=False):
        part = part.drop_duplicates("replicas").sort_values("replicas")
        line, = ax.plot(part["replicas"], part["worst_ratio"], marker="o",
                        label=f"{label} at {scale:g}×")
        held = part[part["held"]]
        if len(held):
            first = held.iloc[0]
            ax.plot([first["replicas"]], [first["worst_ratio"]], marker="D", markersize=10,
                    color=line.get_color())
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_yscale("log")
    ax.set(xlabel="replicas", ylabel=f"worst SLO ratio ({result.objective()}); > 1 breaks it")
    engines = sorted({o.engine for o in result.options})
    ax.set_title("Simulated: " + "; ".join(f"{e} ({stated_error(e)})" for e in engines),
                 fontsize=7, wrap=True)
    ax.legend(fontsize=7)
    return fig


def describe(result: PlanResult) -> dict[str, Any]:
    """What was planned, as a mapping (the report's first table)."""
    return {"trace": result.trace, "objective": result.objective(), "slo (as given)": result.slo,
            "trace rate": result.rate_words(1.0),
            "rate scales": ", ".join(f"{s:g}" for s in result.scales),
            **({"tool waits scaled by": f"{result.tool_wait_scale:g}"}
               if result.tool_wait_scale != 1 else {}),
            "options": "; ".join(o.label for o in result.options),
            "price per GPU-hour (USD)": ", ".join(
                f"{'every GPU' if g == EVERY_GPU else g} {p:g}"
                for g, p in (result.prices or {}).items()) or "none",
            "probes (virtual replays)": len(result.probes)}
