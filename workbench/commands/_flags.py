"""The command line's parser and the flags that remember what was typed (docs/interface.md,
"Flag errors").

A value flag is stored by ``Given`` (or ``GivenItems``, repeatable): the value converted
and, under the config field it becomes, the flag as typed (``--request-timeout -1``) in
``flag_sources(args)``. A check that refuses a value raises ``ConfigError`` with that
``field``; ``cli`` puts the flag that gave it before the message. A value the flag's own
type refuses (``--rate abc``), and every other argparse error, is one line naming the
flag, value and rule, with the ``--help`` hint, exit 2: ``Parser.error``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

#: what a flag of each kind expects, in a refusal
_RULES: dict[Callable[[str], Any], str] = {int: "an integer", float: "a number"}
#: the attribute of the parsed arguments that holds field -> flag as typed
_SOURCES = "flag_sources"


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one line, not the usage first:
    ``workbench sweep: error: --lo abc: expected a number (see workbench sweep --help)``."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def flag_sources(args: argparse.Namespace) -> dict[str, str]:
    """``{config field: flag as typed}`` of the flags ``args`` was parsed from (added to by
    a command that puts a flag's value into a field of its own choosing: ``note``)."""
    found = vars(args).setdefault(_SOURCES, {})
    assert isinstance(found, dict)
    return found


def note(args: argparse.Namespace, field: str, written: str | None) -> None:
    """``field`` got its value from the flag ``written`` (as typed); None: no flag."""
    if written is not None:
        flag_sources(args)[field] = written


class Given(argparse.Action):
    """Store ``kind(value)``; remember ``--flag value`` as typed under ``field``."""

    def __init__(self, option_strings: Sequence[str], dest: str,
                 kind: Callable[[str], Any] = str, field: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.kind, self.field = kind, field

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        text = str(values)
        written = f"{option_string} {text}"
        try:
            value = self.kind(text)
        except ValueError:
            parser.error(f"{written}: expected {_RULES.get(self.kind, 'another value')}")
        setattr(namespace, self.dest, value)
        if self.field:
            note(namespace, self.field, written)


class GivenItems(argparse.Action):
    """A repeatable flag (``append``) whose items are remembered each under its field:
    ``field[i]`` for the i-th, or with ``keyed`` ``field.KEY`` for a ``KEY=VALUE`` item
    (``--engine max_num_seqs=0``: ``target.engine.max_num_seqs``); ``resolve``: the
    field of a key written short (``--over rate=1,2``: ``arrival.rate``)."""

    def __init__(self, option_strings: Sequence[str], dest: str, field: str | None = None,
                 keyed: bool = False, resolve: Callable[[str], str] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.field, self.keyed, self.resolve = field, keyed, resolve

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        items = [*(getattr(namespace, self.dest, None) or []), values]
        setattr(namespace, self.dest, items)
        if self.field is None:
            return
        if self.keyed:
            key = str(values).partition("=")[0].strip()
            key = self.resolve(key) if self.resolve else key
            field = f"{self.field}.{key}" if self.field else key
        else:
            field = f"{self.field}[{len(items) - 1}]"
        note(namespace, field, f"{option_string} {values}")


def value_flag(p: Any, *names: str, field: str | None = None,
               **kwargs: Any) -> argparse.Action:
    """``p.add_argument`` of a flag that takes one value: stored by ``Given`` (its
    ``type`` as the kind), remembered under ``field``."""
    kind = kwargs.pop("type", str)
    action: argparse.Action = p.add_argument(*names, action=Given, kind=kind, field=field,
                                             **kwargs)
    return action


def path_argument(p: argparse.ArgumentParser, dest: str, metavar: str, help: str) -> None:
    """A command's one input as ``METAVAR`` or ``--trace METAVAR``, as the commands that
    replay take it (``simulate --trace T``): stored under ``dest``; ``given_path`` reads it."""
    p.add_argument(dest, nargs="?", metavar=metavar, help=f"{help} (or --trace {metavar})")
    p.add_argument("--trace", dest=f"{dest}_flag", metavar=metavar, help=argparse.SUPPRESS)


def given_path(args: argparse.Namespace, dest: str, metavar: str) -> str:
    """The input of ``path_argument``: exactly one of the two ways, or the parser's error."""
    parser: argparse.ArgumentParser = args._parser
    bare, flagged = getattr(args, dest), getattr(args, f"{dest}_flag")
    if bare is not None and flagged is not None:
        parser.error(f"{metavar} given twice ({bare!r} and --trace {flagged!r}): give one")
    path = bare if bare is not None else flagged
    if path is None:
        parser.error(f"the following arguments are required: {metavar}")
    return str(path)
