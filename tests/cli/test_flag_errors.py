"""A bad value given by a flag is refused naming the flag as written and the rule broken,
exit 2, no traceback, before any request (docs/interface.md, "Flag errors"); one case per
flag of ``simulate``/``replay``/``sweep``/``plan --help`` that takes a checked value."""

from __future__ import annotations

import pytest

from workbench.cli import main
from workbench.commands._flag_errors import name_the_flag
from workbench.data import path as data_path
from workbench.errors import ExitCode

SMALL = str(data_path("tracelab/multi_session_example.csv"))
LARGE = str(data_path("tracelab/multi_session_large.csv"))
SIM = ["simulate", "--trace", SMALL]
RUN = ["replay", "--trace", SMALL, "--dry-run"]
SWEEP = ["sweep", "--trace", LARGE, "--max-items", "3", "--target", "sim", "--virtual"]
CAP = [*SWEEP, "--capacity", "arrival.rate", "--slo", "ttft_ms<=100"]
PLAN = ["plan", "--trace", LARGE, "--max-items", "5", "--preset", "llama-3.1-8b/h100/tp1"]
P90 = ["--slo", "ttft_ms:p90<=2000"]

CASES = [
    # (command line, the flag as written, words of the rule)
    ([*SIM, "--engine", "max_num_seqs=abc"], "--engine max_num_seqs=abc", "expected an integer"),
    ([*SIM, "--engine", "nope=1"], "--engine nope=1", "unknown engine knob"),
    ([*SIM, "--engine", "block_size=16", "--engine", "max_num_seqs=0"],
     "--engine max_num_seqs=0", "expected an integer"),
    ([*SIM, "--arrival", "bogus"], "--arrival bogus", "is unknown"),
    ([*RUN, "--arrival", "bogus"], "--arrival bogus", "is unknown"),
    ([*SIM, "--request-timeout", "-1"], "--request-timeout -1", "expected a finite number"),
    ([*RUN, "--request-timeout=-1"], "--request-timeout -1", "expected a finite number"),
    ([*SIM, "--stream-idle-timeout", "0"], "--stream-idle-timeout 0", "(0, 604800]"),
    ([*SIM, "--max-items", "0"], "--max-items 0", "expected an integer"),
    ([*SIM, "--offset", "-1"], "--offset -1", "expected an integer"),
    ([*SIM, "--policy", "nope"], "--policy nope", "unknown context policy"),
    ([*SIM, "--max-model-len", "-5"], "--max-model-len -5", "expected an integer"),
    ([*SIM, "--arrival", "poisson", "--rate", "-1"], "--rate -1", "expected a finite number"),
    ([*SIM, "--arrival", "gamma", "--burstiness", "-1"], "--burstiness -1", "(0, 1000000]"),
    ([*SIM, "--ramp-up-start-rps", "-1"], "--ramp-up-start-rps -1", "[0, 1000000]"),
    ([*SIM, "--ramp-up-end-rps", "-1"], "--ramp-up-end-rps -1", "[1e-06, 1000000]"),
    ([*SIM, "--ramp-up-duration", "-1"], "--ramp-up-duration -1", "(0, 604800]"),
    ([*SIM, "--max-concurrency", "0"], "--max-concurrency 0", "expected an integer"),
    ([*SIM, "--max-streams", "0"], "--max-streams 0", "expected an integer"),
    ([*SIM, "--session-budget", "-1"], "--session-budget -1", "(0, 604800]"),
    ([*SIM, "--duration", "-1"], "--duration -1", "(0, 604800]"),
    ([*SIM, "--warmup", "-1"], "--warmup -1", "expected an integer"),
    ([*SIM, "--tool-wait-scale", "-1"], "--tool-wait-scale -1", "[0, 1000000]"),
    ([*SIM, "--output-len", "fixed:abc"], "--output-len fixed:abc", "is invalid"),
    ([*SIM, "--backend", "nope"], "--backend nope", "unknown backend"),
    ([*SIM, "--seed", "-1"], "--seed -1", "expected an integer"),
    ([*SIM, "--workers", "0", "--warmup", "0"], "--workers 0", "expected an integer"),
    ([*SIM, "--fuse", "-1"], "--fuse -1", "(0, 604800]"),
    ([*SIM, "--format", "nope"], "--format nope", "unknown trace format"),
    ([*SIM, "--trace-option", "nope"], "--trace-option 'nope'", "expected KEY=VALUE"),
    ([*SIM, "--slo", "ttft_p99=abc"], "--slo 'ttft_p99=abc'", "expected METRIC<=MS"),
    ([*SIM, "--max-error-rate", "2"], "--max-error-rate", "a fraction in [0, 1]"),
    ([*SIM, "--percentiles", "500"], "--percentiles '500'", "each in [0, 100]"),
    ([*RUN, "--header", "noequals"], "--header 'noequals'", "expected KEY=VALUE"),
    ([*SWEEP, "--over", "arrival.rate=1,2", "--repeats", "0"], "--repeats 0",
     "expected an integer"),
    ([*SWEEP, "--over", "arrival.rate=abc"], "--over arrival.rate=abc",
     "expected a finite number"),
    ([*SWEEP, "--over", "arrival.rate=1", "--engine", "max_num_seqs=abc"],
     "--engine max_num_seqs=abc", "expected an integer"),
    ([*SWEEP, "--over", "arrival.rate=1", "--request-timeout", "-1"], "--request-timeout -1",
     "expected a finite number"),
    ([*SWEEP, "--over", "arrival.rate=1", "--stop-after", "0"], "--stop-after 0", ">= 1"),
    ([*SWEEP, "--over", "arrival.rate=1", "--stop-margin", "-1"], "--stop-margin -1", ">= 0"),
    ([*SWEEP, "--over", "arrival.rate=1", "--parallel", "0"], "--parallel 0", ">= 1"),
    ([*SWEEP, "--over", "arrival.rate=1", "--gpus", "0"], "--gpus 0", ">= 1"),
    ([*CAP, "--lo", "-1", "--hi", "2", "--tolerance", "0.1"], "--lo -1",
     "expected a finite number"),
    ([*CAP, "--lo", "1", "--hi", "2", "--tolerance", "0"], "--tolerance 0", "tolerance > 0"),
    ([*CAP, "--lo", "1", "--hi", "2", "--tolerance", "0.1", "--grow", "0"], "--grow 0",
     "grow > 1"),
    ([*CAP, "--lo", "1", "--hi", "2", "--tolerance", "0.1", "--max-probes", "0"],
     "--max-probes 0", "max_probes in [2, 1000]"),
    ([*PLAN, "--slo", "ttft_ms:p90<=abc"], "--slo ttft_ms:p90<=abc", "is invalid"),
    ([*PLAN, *P90, "--scale", "abc"], "--scale", "expected numbers"),
    ([*PLAN, *P90, "--scale", "-1"], "--scale -1", "must be positive"),
    ([*PLAN, *P90, "--host-kv-gb", "-1"], "--host-kv-gb -1", "[0, 1000000]"),
    ([*PLAN, *P90, "--price", "H100=abc"], "--price", "is not a price"),
    ([*PLAN, *P90, "--router", "nope"], "--router nope", "unknown router"),
    ([*PLAN, *P90, "--max-replicas", "0"], "--max-replicas 0", "[1, 1024]"),
    ([*PLAN, *P90, "--parallel", "0"], "--parallel 0", ">= 1"),
    (["plan", "--trace", LARGE, "--max-items", "0", "--preset", "llama-3.1-8b/h100/tp1", *P90],
     "--max-items 0", "expected an integer"),  # was taken as no bound: the whole trace
    (["plan", "--trace", LARGE, "--max-items", "5", "--preset", "nope/x/tp1", *P90],
     "--preset nope/x/tp1", "unknown model"),
]


@pytest.mark.parametrize(("argv", "flag", "rule"), CASES, ids=[c[1] for c in CASES])
def test_a_bad_flag_value_names_the_flag_as_written(argv, flag, rule, capsys, tmp_path):
    code = main([*argv, "-o", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == ExitCode.CONFIG_ERROR == 2, err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"workbench {argv[0]}: error: {flag}"), line
    assert rule in line, line
    assert "Traceback" not in err
    assert not list(tmp_path.iterdir()), "a refused command wrote a run"


def test_only_the_flag_the_message_is_about_is_named():
    argv = ["--trace", "t.csv", "--workers", "0", "--warmup", "0", "--format", "csv"]
    msg = "executor.workers: expected an integer in [1, 1024], got 0 (int)"
    assert name_the_flag(msg, argv) == f"--workers 0: {msg}"
    # a value word (trace-timed) is no field name; a message naming its flag is kept
    msg = "arrival.mode 'x' is unknown; valid: trace-timed, saturated"
    assert name_the_flag(msg, ["--trace", "t.csv", "--arrival", "x"]) == f"--arrival x: {msg}"
    assert name_the_flag("--slo 'a': bad", ["--slo", "a"]) == "--slo 'a': bad"
    # from a config file, not a flag: nothing to name
    assert name_the_flag("arrival.rate: expected", ["--config", "c.yaml"]) == (
        "arrival.rate: expected")
