"""``workbench plan``: the fewest replicas per preset that hold an SLO, its cost and its
report, on the bundled Mooncake slice (virtual time, the embedded engine's cluster)."""

import html
import json
import re

import pytest

from workbench import data
from workbench.cli import main
from workbench.errors import ConfigError
from workbench.plan import Option, load_plan, plan

MOONCAKE = str(data.path("mooncake/conversation_trace_head600.jsonl"))
PRESETS = ["llama-3.1-8b/h100/tp1", "llama-3.1-8b/h200/tp1"]
SLO = "ttft_ms:p90<=2000"


PRICES = "h100=2.5,h200=3.7"


@pytest.fixture(scope="module")
def mooncake_plan(tmp_path_factory):
    result = plan(MOONCAKE, PRESETS, SLO, scales=[1.0, 2.0], max_items=40,
                  prices=PRICES, max_replicas=16, parallel=1)
    return result, result.save(tmp_path_factory.mktemp("plans"), "mooncake")


def test_the_plan_finds_the_fewest_replicas_that_hold_and_the_one_fewer_that_does_not(
    mooncake_plan,
) -> None:
    result, _ = mooncake_plan
    assert result.base_rate > 0 and result.scales == [1.0, 2.0]
    for scale in result.scales:
        for option in result.options:
            best = result.fewest(option, scale)
            assert best is not None and best.held and best.values[f"{SLO.split('<=')[0]}"] <= 2000
            fewer = [p for p in result.probes if p.option == option and p.scale == scale
                     and p.replicas == best.replicas - 1]
            # one replica fewer was probed and broke the SLO (or the answer is 1 replica)
            assert best.replicas == 1 or (fewer and not fewer[0].held)
            cost = result.cost(best)
            gpu_hours = best.gpus * best.span_s / 3600
            tokens = best.prompt_tokens + best.output_tokens
            price = {"h100": 2.5, "h200": 3.7}[option.engine.split("/")[1]]  # per GPU
            assert cost["usd_per_mtok"] == pytest.approx(price * gpu_hours / tokens * 1e6)
            assert cost["usd_per_task"] == pytest.approx(price * gpu_hours / best.units)
            assert best.units == 40
    # twice the rate never needs fewer replicas, but for the 40-request sample's own
    # non-monotone router (tests/plan/test_plan_monotone.py): with the shipped factors of
    # 2026-12-07, H200 holds at 5 replicas at twice the rate and breaks at 5 at the lower
    # one (6 hold); then the lower rate's search probed that count and saw it break, and it
    # is one replica, not a search that skipped counts
    for option in result.options:
        one, two = result.fewest(option, 1.0), result.fewest(option, 2.0)
        assert one is not None and two is not None
        if two.replicas < one.replicas:
            at = [p for p in result.probes if p.option == option and p.scale == 1.0
                  and p.replicas == two.replicas]
            assert at and not at[0].held and one.replicas - two.replicas == 1
            # and the plan says so, rather than let the two rows read as more load needing
            # less hardware
            assert (f"Not monotone in load for {option.engine}: as simulated, at "
                    f"{result.rate_words(2.0)} {two.replicas} replicas held it, fewer than "
                    f"the {one.replicas} needed here") in result.not_monotone(option, 1.0)
            best = result.best(1.0)
            assert (result.not_monotone(option, 1.0) in result.answer(1.0) if best and
                    best[0] == option else f"{option.engine} needs" in result.answer(1.0)
                    and "(not monotone: the curve shows where)" in result.answer(1.0))
        else:
            assert "Not monotone in load" not in result.not_monotone(option, 1.0)
    # every answer row says it is simulated, from which preset, with its stated error
    for row in result.answers():
        assert row["label"].startswith("simulated · llama-3.1-8b/") and "error" in row["label"]


def test_the_plan_answers_in_one_sentence_and_round_trips(mooncake_plan) -> None:
    result, out = mooncake_plan
    sentence = result.answer()
    # the answer first (a count of replicas of an option), the stated error after it
    assert re.match(r"\d+(–\d+)? replicas? of llama-3\.1-8b/h[12]00/tp1 · prefix-aware "
                    r"\(\d+(–\d+)? GPUs?, USD ", sentence), sentence
    assert "conversation_trace_head600.jsonl" in sentence and "TTFT p90 ≤ 2 s" in sentence
    assert "per million tokens" in sentence
    # each preset states its own GPU and TP's error, so two presets may state two
    assert sentence.index("Simulated; ") > sentence.index("per million tokens")
    assert sentence.index("preset error on published tables") > sentence.index("Simulated; ")
    again = load_plan(out)
    assert again.answer() == sentence and len(again.probes) == len(result.probes)


def test_the_mooncake_plan_renders_as_a_report_quoting_its_answer(mooncake_plan, tmp_path,
                                                                  capsys) -> None:
    result, out = mooncake_plan
    assert main(["report", str(out), "-o", str(tmp_path / "reports")]) == 0
    printed = capsys.readouterr().out
    assert result.answer() in printed  # the report's headline, as `workbench report` prints
    meta = json.loads(next((tmp_path / "reports").glob("*/report.json")).read_text())
    assert meta["headline"][0] == result.answer()
    report_dir = next((tmp_path / "reports").glob("*/report.json")).parent
    page = (report_dir / "report.html").read_text()
    for heading in ("Capacity plan", "Fewest replicas per option and rate",
                    "The curve behind the answer", "Closing note"):
        assert heading in page
    # the closing note quotes the answer in one sentence
    assert f"<b>In one sentence:</b> {html.escape(result.answer(), quote=False)}" in page
    # the first screen leads with the answer: the title, then the headline, then the rest
    first = page.index(html.escape(result.answer(), quote=False))
    assert page.index("Capacity plan") < first < page.index("Above, the answer") < page.index(
        "What was planned")
    answers = report_dir / "tables" / "plan_answers.csv"
    assert "simulated · llama-3.1-8b/h100/tp1" in answers.read_text()


def test_plan_cli_writes_the_plan_and_prints_its_answer(tmp_path, capsys) -> None:
    assert main(["plan", "--trace", "mooncake/conversation_trace_head600.jsonl",
                 "--preset", PRESETS[0], "--slo", SLO, "--scale", "1", "--max-items", "20",
                 "--max-replicas", "8", "-o", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    (plan_dir,) = list(tmp_path.iterdir())
    assert load_plan(plan_dir).answer() in printed and "plan directory:" in printed


def test_bad_plans_fail_before_any_replay(tmp_path) -> None:
    with pytest.raises(ConfigError, match="unknown GPU 'h900'"):
        plan(MOONCAKE, ["llama-3.1-8b/h900/tp1"], SLO)
    with pytest.raises(ConfigError, match="SLO"):
        plan(MOONCAKE, PRESETS, "ttft_ms:p90<=")
    with pytest.raises(ConfigError, match="does not exist"):
        plan(MOONCAKE, [str(tmp_path / "engine.json")], SLO)
    with pytest.raises(ConfigError, match="scales"):
        plan(MOONCAKE, PRESETS, SLO, scales=[0])


def test_a_calibrated_engine_stands_in_for_a_preset(tmp_path) -> None:
    engine = tmp_path / "engine.json"
    engine.write_text(json.dumps({"engine": {"prefill_coeffs": [0, 0.05, 10]}}))
    option = Option(str(engine))
    assert option.gpus_per_replica == 1
    assert option.knobs(3) == {"prefill_coeffs": [0, 0.05, 10], "workers": 3,
                               "router": "prefix-aware"}


def test_searches_in_processes_of_their_own_give_the_same_plan(mooncake_plan) -> None:
    """``parallel=2``: the (option, scale) searches run in two processes; the probes, in
    the same order, and so the answer, are those of the plan run in this process."""
    result, _ = mooncake_plan
    seen: list[int] = []
    again = plan(MOONCAKE, PRESETS, SLO, scales=[1.0, 2.0], max_items=40,
                 prices=PRICES, max_replicas=16, parallel=2,
                 progress=lambda p, _: seen.append(p.replicas))
    fields = [(p.option, p.scale, p.replicas, p.held, p.held_low, p.held_high, p.worst_ratio,
               p.cached_tokens) for p in result.probes]
    assert [(p.option, p.scale, p.replicas, p.held, p.held_low, p.held_high, p.worst_ratio,
             p.cached_tokens) for p in again.probes] == fields
    assert seen == [p.replicas for p in result.probes] and again.answer() == result.answer()
    with pytest.raises(ConfigError, match="parallel must be >= 1"):
        plan(MOONCAKE, PRESETS, SLO, max_items=40, parallel=0)


def test_an_interrupted_plan_kills_its_searches_rather_than_waiting_for_them() -> None:
    """Ctrl-C (here: a KeyboardInterrupt from the first probe's report) kills the searches
    still in their processes, idle or mid-search: a pool's shutdown would let each run to
    its end (tens of seconds) and its workers then exit 0. Structural: how each worker
    ended, not how long the plan took (``test_a_plan_stops_at_once_mid_search`` runs the
    command)."""
    import multiprocessing
    import signal

    workers: list[multiprocessing.Process] = []

    def interrupt(_p: object, _line: str) -> None:
        workers.extend(multiprocessing.active_children())
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        plan(MOONCAKE, PRESETS, SLO, scales=[1.0, 2.0], max_items=40, prices=PRICES,
             max_replicas=16, parallel=2, progress=interrupt)
    assert len(workers) == 2
    for proc in workers:
        proc.join(60)  # a failure bound: ended already, by the plan's kill
        assert proc.exitcode == -signal.SIGKILL, proc


def _long_sessions(tmp_path) -> str:
    """Two agent sessions 1 s apart, each of 2 requests with 200 s of tool wait between:
    every probe takes at least 3 min 21 s of simulated time (past ``LONG_RUN_MS``)."""
    trace = tmp_path / "long_sessions.csv"
    trace.write_text("session_id,arrival_time,round_idx,prefix_len,input_len,output_len,"
                     "tool_wait_after_ms\n"
                     "0,0,0,0,512,16,200000\n0,0,1,528,64,16,0\n"
                     "1,1000,0,0,400,16,200000\n1,1000,1,416,64,16,0\n")
    return str(trace)


def test_plan_progress_says_the_rate_in_its_unit_and_the_long_run_once(
        tmp_path, capsys, caplog) -> None:
    """Each probe's line says the rate as the answer does (sessions/s, then req/s: the
    trace's rounds per unit are known before the first probe), and a plan whose probes
    each take minutes of simulated time says so once, not once per probe
    (docs/arrival.md, "How long a run takes")."""
    import logging

    with caplog.at_level(logging.WARNING, "workbench"):
        assert main(["plan", "--trace", _long_sessions(tmp_path), "--preset", PRESETS[0],
                     "--slo", "ttft_ms:p90<=1", "--scale", "1,2", "--max-replicas", "2",
                     "--parallel", "1", "-o", str(tmp_path / "plans")]) == 0
    out = capsys.readouterr().out
    lines = [line.strip() for line in out.splitlines() if " × " in line and ": " in line]
    assert len(lines) >= 4, out  # 1 and 2 replicas at each scale: none held
    assert lines[0].startswith(f"{PRESETS[0]} · prefix-aware × 1 at 1.00 sessions/s "
                               "(2.00 req/s): broken (worst ratio "), lines[0]
    assert any(" at 2.00 sessions/s (4.00 req/s): " in line for line in lines), out
    assert caplog.text.count("this run takes at least") == 1, caplog.text
    assert ("plan: each probe at 1.00 sessions/s (2.00 req/s): this run takes at least "
            "3 min 2") in caplog.text


def _days_apart(tmp_path) -> str:
    """Three one-request units 0.58 days apart: at the trace's own rate (scale 1) every
    probe's releases span 1.2 days, past ``ARRIVAL_SPAN_WARN_MS``."""
    trace = tmp_path / "days_apart.csv"
    trace.write_text("session_id,arrival_time,round_idx,prefix_len,input_len,output_len,"
                     "tool_wait_after_ms\n"
                     "0,0,0,0,512,16,0\n1,50000000,0,0,400,16,0\n2,100000000,0,0,300,16,0\n")
    return str(trace)


def test_a_plan_says_its_probes_arrival_span_once_in_its_own_flags(tmp_path, caplog) -> None:
    """Releases spread over more than a day are warned about once per plan, before the
    first probe, suggesting what ``plan`` takes (not ``replay``'s ``--rate``), and not
    again by any probe's ``simulate`` (``span_announced``)."""
    import logging

    with caplog.at_level(logging.WARNING, "workbench"):
        assert main(["plan", "--trace", _days_apart(tmp_path), "--preset", PRESETS[0],
                     "--slo", "ttft_ms:p90<=1", "--scale", "1,2", "--max-replicas", "2",
                     "--parallel", "1", "-o", str(tmp_path / "plans")]) == 0
    assert caplog.text.count("arrivals span") == 1, caplog.text
    said = next(r.getMessage() for r in caplog.records if "arrivals span" in r.getMessage())
    assert said.startswith("plan: each probe at 2e-05 req/s: arrivals span 1.2 days "), said
    assert said.endswith("to shorten it: a larger --scale, or --max-items"), said
    assert "--rate" not in caplog.text and "--trace-option" not in caplog.text


def test_plan_tool_wait_scale_scales_every_probes_waits(tmp_path, caplog) -> None:
    """``plan --tool-wait-scale`` is ``arrival.tool_wait_scale`` of every probe, as in
    replay, simulate and sweep: at 0 the sessions' 200 s waits are gone, so is the
    long-run warning (the scale is in its floor too), and plan.json records it."""
    import logging

    with caplog.at_level(logging.WARNING, "workbench"):
        assert main(["plan", "--trace", _long_sessions(tmp_path), "--preset", PRESETS[0],
                     "--slo", "ttft_ms:p90<=1", "--scale", "1", "--max-replicas", "2",
                     "--tool-wait-scale", "0", "--parallel", "1",
                     "-o", str(tmp_path / "plans")]) == 0
    assert "this run takes at least" not in caplog.text, caplog.text
    (saved,) = (tmp_path / "plans").iterdir()
    result = load_plan(saved)
    assert result.tool_wait_scale == 0.0
    assert result.probes and max(p.span_s for p in result.probes) < 100  # no 200 s wait
    assert result.floors and all(p.span_s < 100 for p in result.floors.values())
    assert main(["plan", "--trace", _long_sessions(tmp_path), "--preset", PRESETS[0],
                 "--slo", "ttft_ms:p90<=1", "--tool-wait-scale", "-1"]) == 2


def test_a_trace_too_slow_for_arrival_rate_is_refused_in_plans_own_terms(capsys) -> None:
    """The bundled TraceLab rounds arrive over months (~1.6e-07 sessions/s): scale 1 and 2
    would put a probe's rate below ``arrival.rate``'s floor, a field the plan's user never
    set. The error names the scales and the ones in range, before any probe runs."""
    trace = str(data.path("tracelab/round_trace.sanitized.jsonl"))
    with pytest.raises(ConfigError) as err:
        plan(trace, PRESETS[:1], SLO, scales=[1.0, 2.0, 10.0], parallel=1)
    assert err.value.field == "plan.scales"
    msg = str(err.value)
    assert "--scale 1, 2 " in msg and "1.61e-07" in msg and "between 6.2 and" in msg, msg
    assert main(["plan", "--trace", trace, "--slo", SLO, "--preset", PRESETS[0]]) == 2
    assert "--scale 1, 2 " in capsys.readouterr().err


def test_a_slow_rate_is_said_in_significant_digits_not_as_zero() -> None:
    from workbench.plan import PlanResult

    result = PlanResult("t.jsonl", SLO, 0.004, [1.0, 2.0], [], None, rounds_per_unit=1.0)
    assert result.rate_words(1.0) == "0.004 req/s"
    assert result.rate_words(2.0) == "0.008 req/s"
    assert PlanResult("t.jsonl", SLO, 3.0, [1.0], [], None,
                      rounds_per_unit=4.0).rate_words(1.0) == "3.00 sessions/s (12.00 req/s)"


@pytest.mark.parametrize("max_replicas", [3, 5])
def test_a_search_reaches_the_edge_of_its_range_before_it_says_raise_it(max_replicas) -> None:
    """An SLO no count holds (TTFT p90 ≤ 1 ms): the doubling search probes up to
    ``max_replicas`` itself, not the last power of two under it, so "none up to N ...
    raise --max-replicas" names the range asked for (it said "none up to 4" under
    ``--max-replicas 5``, having never tried 5)."""
    result = plan(MOONCAKE, PRESETS[:1], "ttft_ms:p90<=1", scales=[1.0], max_items=20,
                  max_replicas=max_replicas, parallel=1)
    tried = sorted({p.replicas for p in result.probes})
    assert tried[-1] == max_replicas, tried
    answer = result.answer()
    counts = {int(n.replace(",", "")) for n in re.findall(r"none up to ([\d,]+)", answer)}
    assert counts == {max_replicas}, answer
