"""Every flag a command's warnings and errors suggest is a flag that command takes (or,
written after another command's name, ``replay --arrival saturated``, one that command
takes): the user-facing strings of each command's own code, walked from its source, and
the shared sentences it prints (how long a run takes, how far its releases span)."""

from __future__ import annotations

import ast
import contextlib
import io
import re
from pathlib import Path

import pytest

import workbench
from workbench.arrival.schedule import SPAN_REMEDY
from workbench.cli import build_parser
from workbench.commands.stats import SPAN_REMEDY as STATS_SPAN_REMEDY
from workbench.plan import SHORTEN as PLAN_SHORTEN
from workbench.plan import SPAN_REMEDY as PLAN_SPAN_REMEDY
from workbench.replay.plan import SHORTEN

ROOT = Path(workbench.__file__).parent
#: per command: its own modules, and the shared sentences it prints
SAYS: dict[str, tuple[list[str], list[str]]] = {
    "plan": (["plan/__init__.py", "plan/prices.py", "commands/plan.py"],
             [PLAN_SHORTEN, PLAN_SPAN_REMEDY]),
    "sweep": ([*(f"sweeps/{p.name}" for p in sorted((ROOT / "sweeps").glob("*.py"))),
               "commands/sweep.py", "commands/_axes.py"], [SHORTEN, SPAN_REMEDY]),
    "replay": (["commands/replay.py", "commands/_axes.py"], [SHORTEN, SPAN_REMEDY]),
    "simulate": (["commands/simulate.py", "commands/_axes.py"], [SHORTEN, SPAN_REMEDY]),
    # stats replays nothing: its advice names the command that does
    "stats": (["commands/stats.py"], [STATS_SPAN_REMEDY]),
}
#: flags of other programs the help names (a server's, not a workbench command's)
FOREIGN = {"--profiler-config": "vLLM's, in --profile's help: 'vLLM started with ...'"}
#: a suggested flag, and the command named just before it, if any
FLAG = re.compile(r"(?:\b([a-z]+) )?(?<![\w-])(--[a-z][a-z0-9-]*)")


def _strings(path: Path) -> list[str]:
    """The string constants of a module (f-strings' literal parts too), docstrings left
    out: what its code says to a user."""
    tree = ast.parse(path.read_text())
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef
                          | ast.AsyncFunctionDef)
            and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docs]


def _flags_of(command: str) -> set[str]:
    """The flags ``workbench COMMAND --help`` lists."""
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown), pytest.raises(SystemExit):
        build_parser(command).parse_args([command, "--help"])
    out: set[str] = set()
    for line in shown.getvalue().splitlines():
        if line.startswith("  -"):  # an option's own line, before its help
            out.update(re.findall(r"--[\w-]+", re.split(r"\s{2,}", line.strip())[0]))
    return out


def _suggested(command: str) -> list[tuple[str, str, str]]:
    modules, shared = SAYS[command]
    texts = [s for m in modules for s in _strings(ROOT / m)] + shared
    return [(m.group(1) if m.group(1) in SAYS else command, m.group(2), text)
            for text in texts for m in FLAG.finditer(text) if m.group(2) not in FOREIGN]


@pytest.mark.parametrize("command", sorted(SAYS))
def test_every_suggested_flag_is_one_the_command_takes(command):
    found = _suggested(command)
    assert found  # the walk finds the suggestions
    flags = {name: _flags_of(name) for name in {c for c, _, _ in found}}
    missing = sorted({(c, flag, text) for c, flag, text in found if flag not in flags[c]})
    assert missing == [], missing


def test_the_walk_reads_what_a_command_takes_and_who_a_flag_belongs_to():
    """The check bites: replay's ``--rate`` is no flag of ``plan``; a flag after another
    command's name is that command's."""
    plan = _flags_of("plan")
    assert "--rate" not in plan and {"--tool-wait-scale", "--max-items", "--scale"} <= plan
    assert "--rate" in _flags_of("replay") and "--tool-wait-scale" in _flags_of("sweep")
    said = [(m.group(1), m.group(2)) for m in FLAG.finditer("or replay --arrival saturated")]
    assert said == [("replay", "--arrival")]
