"""A refused value names the command-line flag that gave it, as written (docs/interface.md,
"Flag errors"): ``--request-timeout -1: arrival.request_timeout_s: expected ...``.

The checks that refuse a value speak of the config field or the knob
(``arrival.request_timeout_s``, ``target.engine.max_num_seqs``, ``sweep repeats``);
``name_the_flag`` finds, among the flags on the command line, the one(s) the message is
about and puts them, with their values as typed, before it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from workbench.commands._axes import AXIS_FLAGS

#: a flag whose value goes into the config under another name: ``--flag`` → field path
_FIELD_OF: dict[str, str] = {
    "--" + item.partition("=")[0].replace("_", "-"): f"{section}.{item.partition('=')[2]}"
    for section, items in AXIS_FLAGS.items() for item in items if "=" in item
}
#: the words of a message: field paths (``arrival.rate``) and plain names (``repeats``);
#: a word with a hyphen is a value (``trace-timed``), never a field
_WORD = re.compile(r"[\w.-]+")
#: the value a message says it refused: ``got -1.0 (float)``
_GOT = re.compile(r"\bgot '?(-?[\d.]+(?:e[+-]?\d+)?)")


def given_flags(argv: Sequence[str]) -> list[tuple[str, str | None]]:
    """``(flag, value as written)`` for each long flag of ``argv`` (value None: none)."""
    out: list[tuple[str, str | None]] = []
    for i, arg in enumerate(argv):
        if not arg.startswith("--") or arg == "--":
            continue
        flag, eq, value = arg.partition("=")
        if eq:
            out.append((flag, value))
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out.append((flag, argv[i + 1]))
        else:
            out.append((flag, None))
    return out


def _names(flag: str, value: str) -> set[str]:
    """What a message calls the value of ``flag value``: its dest, its config field, and
    for ``KEY=VALUE`` flags (``--engine``, ``--over``, ``--trace-option``) the key."""
    dest = flag[2:].replace("-", "_")
    names = {dest, dest + "_s", dest + "s"}
    if flag in _FIELD_OF:
        names.add(_FIELD_OF[flag])
    key, eq, _ = value.partition("=")
    if eq and key.strip():
        names |= {key.strip(), key.strip().rsplit(".", 1)[-1]}
    return names


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def name_the_flag(message: str, argv: Sequence[str]) -> str:
    """``message`` with the flag(s) it is about, as written, before it (unchanged when it
    names a flag already or is about none of the flags given). A flag is about it when the
    message calls it by name (its dest, field or key) or quotes its value (``'bogus'``,
    ``got -1.0``); when some do both, only those."""
    if message.startswith("-"):
        return message
    words = set()
    for word in _WORD.findall(message):
        word = word.strip(".")
        if "-" not in word:
            words |= {word, word.rsplit(".", 1)[-1]}
    got = {n for n in map(_number, _GOT.findall(message)) if n is not None}
    named: list[str] = []
    quoted: list[str] = []
    for flag, value in given_flags(argv):
        if value is None or flag in message:
            continue
        written = f"{flag} {value}"
        if _names(flag, value) & words and written not in named:
            named.append(written)
        number = _number(value)
        if (f"'{value}'" in message or (number is not None and number in got)) and (
                written not in quoted):
            quoted.append(written)
    both = [w for w in named if w in quoted]
    hits = both or quoted or named
    return f"{', '.join(hits)}: {message}" if hits else message
