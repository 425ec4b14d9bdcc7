"""A bad value given by a flag is refused naming the flag as written and the rule broken,
exit 2, no traceback, before any request (docs/interface.md, "Flag errors"); one case per
flag of ``simulate``/``replay``/``sweep``/``plan --help`` that takes a checked value."""

from __future__ import annotations

import pytest

from workbench.cli import main
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


TYPE_CASES = [
    # (command line, the one line after "error: ") — argparse's own refusals, no usage
    ([*SIM, "--rate", "abc"], "--rate abc: expected a number"),
    ([*RUN, "--max-items=1.5"], "--max-items 1.5: expected an integer"),
    ([*SWEEP, "--lo", "x"], "--lo x: expected a number"),
    ([*PLAN, *P90, "--max-replicas", "many"], "--max-replicas many: expected an integer"),
    (["tracegen", "--rate", "fast"], "--rate fast: expected a number"),
    (["sim", "serve", "--workers", "two"], "--workers two: expected an integer"),
    ([*SIM, "--drain", "nope"], "argument --drain: invalid choice: 'nope' (choose from "
                                "'finish', 'truncate')"),
    (["replay", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["stats"], "the following arguments are required: TRACE"),
    (["stats", SMALL, "--trace", LARGE], f"TRACE given twice ({SMALL!r} and --trace "
                                         f"{LARGE!r}): give one"),
    (["tracegen", "-o", "out.csv"], "the following arguments are required: INPUT"),
]


@pytest.mark.parametrize(("argv", "said"), TYPE_CASES, ids=[c[1][:30] for c in TYPE_CASES])
def test_argparse_refusals_are_one_line_with_the_help_hint(argv, said, capsys):
    """``--rate abc`` printed the whole usage, then ``argument --rate: invalid float value:
    'abc'``: now one line naming flag, value and rule, as a config-level refusal."""
    prog = "workbench " + " ".join(argv[:2] if argv[0] == "sim" else argv[:1])
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == ExitCode.CONFIG_ERROR == 2
    assert capsys.readouterr().err == f"{prog}: error: {said} (see {prog} --help)\n"


def test_the_item_of_a_repeated_flag_is_the_one_named(capsys, tmp_path):
    """Of several ``--preset``/``--slo``/``--engine`` items, the refused one, by its place
    or key (``plan.preset[1]``, ``slo[1]``, ``target.engine.num_blocks``)."""
    plan = ["plan", "--trace", LARGE, "--max-items", "5", "-o", str(tmp_path)]
    for argv, flag in (
        ([*plan, "--preset", "llama-3.1-8b/h100/tp1", "--preset", "nope/x/tp1", *P90],
         "--preset nope/x/tp1"),
        ([*plan, "--preset", "llama-3.1-8b/h100/tp1", *P90, "--slo", "ttft_ms:p99<=x"],
         "--slo ttft_ms:p99<=x"),
        ([*SIM, "--engine", "num_blocks=0", "--engine", "block_size=16"],
         "--engine num_blocks=0"),
    ):
        assert main(argv) == ExitCode.CONFIG_ERROR
        line = capsys.readouterr().err.strip().splitlines()[-1]
        assert line.startswith(f"workbench {argv[0]}: error: {flag}: "), line


def test_a_value_from_a_config_file_names_its_file_and_line_not_a_flag(capsys, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"trace:\n  path: {SMALL}\narrival:\n  mode: poisson\n  rate: -1\n")
    assert main(["simulate", "--config", str(cfg), "--warmup", "0"]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line == (f"workbench simulate: error: {cfg}:5: arrival.rate: expected a finite "
                    "number in [1e-06, 1000000] or null, got -1 (int)")
    # a flag over a file (laid over its raw values, then checked): the flag's value, named
    cfg.write_text(f"trace:\n  path: {SMALL}\narrival:\n  mode: poisson\n  rate: 1\n")
    assert main(["simulate", "--config", str(cfg), "--rate", "-2"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(
        "workbench simulate: error: --rate -2: arrival.rate: expected")


def test_a_flag_lays_over_a_bad_value_in_the_config_file_before_the_one_check(
        capsys, tmp_path):
    """The flags go over the file's raw values, then the whole is checked once: a flag
    replaces a value the file got wrong; what is still wrong is named where it came from
    (the file and its line, or the flag as typed)."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"trace:\n  path: {SMALL}\n  max_items: 1\narrival:\n  mode: poisson\n"
                   "  rate: -1\n  warmup: 0\n")
    assert main(["simulate", "--config", str(cfg), "--rate", "2", "--json"]) == 0
    assert '"requests"' in capsys.readouterr().out
    # the file's other bad value, no flag over it: the file and its line
    cfg.write_text(f"trace:\n  path: {SMALL}\narrival:\n  mode: poisson\n  rate: -1\n"
                   "  request_timeout_s: -5\n")
    assert main(["simulate", "--config", str(cfg), "--rate", "2"]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"workbench simulate: error: {cfg}:6: arrival.request_timeout_s: "
                           "expected"), line
    # a section written as its main value (arrival: poisson) takes a flag's other field
    from workbench.cli import build_parser
    from workbench.commands._axes import config_from_args

    cfg.write_text(f"trace: {SMALL}\narrival: poisson\n")
    got = config_from_args(build_parser("replay").parse_args(
        ["replay", "--config", str(cfg), "--rate", "3"]))
    assert (got.trace.path, got.arrival.mode, got.arrival.rate) == (SMALL, "poisson", 3.0)
    # a section neither a mapping nor a string: the file and its line, before any flag
    cfg.write_text(f"trace: {SMALL}\narrival: [1, 2]\n")
    assert main(["simulate", "--config", str(cfg), "--rate", "2"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"workbench simulate: error: {cfg}:2: arrival must be a mapping or a string, got list")


def test_a_rule_of_two_fields_names_no_flag(capsys):
    """A cross-section rule (no one field's value) is said as it is: no flag is guessed."""
    assert main([*SIM, "--workers", "2", "--max-concurrency", "1"]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("workbench simulate: error: executor.workers 2 > "
                           "arrival.max_concurrency 1"), line


def test_the_flags_remember_what_was_typed_under_their_fields():
    import pickle

    from workbench.cli import build_parser
    from workbench.commands._flags import flag_sources
    from workbench.errors import ConfigError

    args = build_parser("sweep").parse_args(
        ["sweep", "--trace", "t.csv", "--request-timeout=-1", "--over", "rate=1,2",
         "--engine", "num_blocks=8", "--metrics-url", "a", "--metrics-url", "b",
         "--repeats", "3"])
    assert args.request_timeout == -1.0 and args.repeats == 3  # converted, stored
    assert args.over == ["rate=1,2"] and args.engine == ["num_blocks=8"]
    assert flag_sources(args) == {
        "trace.path": "--trace t.csv", "arrival.request_timeout_s": "--request-timeout -1",
        "arrival.rate": "--over rate=1,2", "target.engine.num_blocks": "--engine num_blocks=8",
        "backend.metrics_urls[0]": "--metrics-url a", "backend.metrics_urls[1]": "--metrics-url b",
        "sweep.repeats": "--repeats 3"}
    # a point process's refusal keeps its field across the pipe
    err = pickle.loads(pickle.dumps(ConfigError("arrival.rate: bad", field="arrival.rate")))
    assert err.field == "arrival.rate"
