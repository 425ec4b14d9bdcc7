import subprocess
import sys
from pathlib import Path

import pytest

import workbench

ROOT_DATA = Path(workbench.__file__).parent / "data"


def test_python_m_help_lists_commands():
    out = subprocess.run(
        [sys.executable, "-m", "workbench", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "usage: workbench" in out


def test_import_is_lazy():
    code = "import sys, workbench; print('aiohttp' in sys.modules, 'pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
    assert "load_trace" in dir(workbench)


def test_a_simulate_command_imports_no_frame_library_before_its_run_files(tmp_path):
    """What ``workbench simulate`` imports up to the run (its arguments, the config with an
    SLO, the virtual executor) and for its summary and headline imports neither pandas nor
    the sweeps: pandas comes only with a frame (bench/README.md, "CLI start-up")."""
    code = (
        "import sys\n"
        "from workbench import cli\n"
        "from workbench.commands._axes import config_from_args\n"
        "argv = ['simulate', '--trace', 'x.jsonl', '--slo', 'ttft_ms<=2000',\n"
        f"        '-o', {str(tmp_path)!r}]\n"
        "args = cli.build_parser('simulate').parse_args(argv)\n"
        "cfg = config_from_args(args)\n"
        "assert cfg.slo == {'ttft_ms': 2000.0}, cfg.slo\n"
        "import workbench.executors.virtual, workbench.metrics.summary, workbench.metrics.slo\n"
        "import workbench.metrics.files, workbench.report.headline, workbench.commands.replay\n"
        "from workbench.metrics import summarize, summary_of\n"
        "print(sorted(m for m in ('pandas', 'workbench.sweeps', 'workbench.metrics.breakdown')\n"
        "             if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_process_command_line_leaves_its_objects_to_the_exit_a_call_does_not(tmp_path):
    """``main()`` (the process's own command line) freezes the collector before the exit
    (docs/virtual-time.md, "The process's exit"); ``main(argv)`` leaves it alone, and the
    run's files are complete either way."""
    import gc
    import json

    from workbench.cli import main

    trace = str(Path(workbench.__file__).parent / "data/tracelab/multi_session_example.csv")
    argv = ["simulate", "--trace", trace, "--max-items", "3", "-o", str(tmp_path)]
    before = gc.get_freeze_count()
    assert main([*argv, "--run-id", "call"]) == 0
    assert gc.get_freeze_count() == before
    code = ("import gc, sys\nfrom workbench.cli import main\n"
            f"sys.argv = ['workbench', *{argv!r}, '--run-id', 'process']\n"
            "status = main()\nprint(status, gc.get_freeze_count() > 0)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    assert out.split()[-2:] == ["0", "True"]
    for name in ("summary.json", "records.parquet", "manifest.json"):
        assert (tmp_path / "process" / name).read_bytes() and (tmp_path / "call" / name).exists()
    summaries = [json.loads((tmp_path / r / "summary.json").read_text()) for r in ("call",
                                                                                  "process")]
    assert summaries[0] == summaries[1]


def test_the_metrics_package_names_import_on_first_use():
    """``workbench.metrics``' names are its modules' (imported when first asked for)."""
    import workbench.metrics as metrics
    from workbench.metrics import breakdown, frame, summary, timeline

    assert metrics.summarize is summary.summarize and metrics.to_frame is frame.to_frame
    assert metrics.by_round_index is breakdown.by_round_index
    assert metrics.in_flight_timeline is timeline.in_flight_timeline
    assert set(metrics.__all__) <= set(dir(metrics))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = metrics.nope  # type: ignore[attr-defined]


# -- issue 14 item 8: errors a person can act on --------------------------------------------
def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench", *args], capture_output=True,
                          text=True, timeout=120)


def test_stats_on_a_missing_file_is_one_line_not_a_traceback(tmp_path):
    proc = cli("stats", str(tmp_path / "nope.jsonl"))
    assert proc.returncode == 3  # ExitCode.TRACE_ERROR
    assert proc.stderr.strip().splitlines() == [
        f"workbench stats: error: {tmp_path / 'nope.jsonl'}:0: no such file"]


def test_report_on_a_folder_that_is_not_a_run_says_so(tmp_path):
    proc = cli("report", str(tmp_path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == (f"workbench report: error: {tmp_path} is not a run "
                                   "directory (no records.jsonl or manifest.json)")


def test_an_unknown_replay_flag_is_one_line_pointing_at_replays_help(tmp_path):
    """The replay command's own words (not the top level's), one line: the usage, 60
    lines of it, is ``--help``'s (tests/cli/test_flag_errors.py)."""
    proc = cli("replay", "--no-such-flag")
    assert proc.returncode == 2
    assert proc.stderr == ("workbench replay: error: unrecognized arguments: --no-such-flag "
                           "(see workbench replay --help)\n")


def test_an_undetectable_format_names_the_command_line_flag(tmp_path):
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n1,2\n")
    proc = cli("replay", "--trace", str(bad), "--target", "sim")
    assert proc.returncode == 3 and "Traceback" not in proc.stderr  # ExitCode.TRACE_ERROR
    assert "--format on the command line" in proc.stderr
    # the trace is checked before the progress bar starts: no bar was drawn
    assert "req" not in proc.stderr.replace("--format", "")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_an_out_dir_that_is_not_a_directory_is_one_line_before_any_bar(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    proc = cli("replay", "--trace", str(ROOT_DATA / "tracelab/multi_session_example.csv"),
               "--target", "sim", "-o", str(blocker))
    assert proc.returncode == 2  # ExitCode.CONFIG_ERROR
    assert proc.stderr.strip().splitlines() == [
        f"workbench replay: error: out_dir: '{blocker}' exists and is not a directory"]


def test_the_slo_help_names_every_slo_able_metric(capsys):
    """``--slo``'s help is written without importing the metrics package (CLI start-up);
    it must still name every metric the catalog accepts as an SLO."""
    import pytest

    from workbench.catalogs.requests import SLO_ABLE
    from workbench.cli import build_parser

    for command in ("replay", "simulate"):
        with pytest.raises(SystemExit):
            build_parser().parse_args([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        slo = text[text.index("--slo BOUND SLO bound"):]
        for metric in SLO_ABLE:
            assert metric in slo[:600], (command, metric)


# -- start-up: only the named command's arguments are built ----------------------------------
def _help(parser, argv):
    import contextlib
    import io

    import pytest

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        parser.parse_args(argv)
    return out.getvalue()


def test_a_commands_parser_alone_is_the_full_parsers_for_it():
    import importlib
    import pkgutil

    from workbench import commands
    from workbench.cli import _command_of, build_parser

    full = build_parser()
    names = [importlib.import_module(f"workbench.commands.{m.name}").NAME
             for m in pkgutil.iter_modules(commands.__path__) if not m.name.startswith("_")]
    assert "simulate" in names and "capture" in names
    for name in names:
        one = build_parser(_command_of(["-v", name, "--help"]))
        assert _help(one, [name, "--help"]) == _help(full, [name, "--help"])
        assert _help(one, ["--help"]) == _help(full, ["--help"])  # every command listed
    args = build_parser("simulate").parse_args(["simulate", "--trace", "t.jsonl", "--digest"])
    assert (args.command, args.trace, args.digest) == ("simulate", "t.jsonl", True)
    assert _command_of(["--verbose"]) is None
