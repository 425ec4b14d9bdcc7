"""The type check and the build use one mypy: its mypyc compiles the step loop's modules
(``[build-system] requires``, pinned: the C it writes is what is tested), and ``make lint``
type-checks with the ``[test]`` extra's (pyproject.toml)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pins(requirements: list[str], name: str) -> list[str]:
    """The specifiers of ``name`` in ``requirements`` (``mypy==2.4.1`` → ``==2.4.1``)."""
    pattern = re.compile(rf"{re.escape(name)}\s*([<>=!~].*)?$")
    return [(m.group(1) or "").strip() for r in requirements
            if (m := pattern.match(r.split(";")[0].strip()))]


def test_the_test_extra_pins_the_mypy_the_build_uses() -> None:
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    build = _pins(conf["build-system"]["requires"], "mypy")
    test = _pins(conf["project"]["optional-dependencies"]["test"], "mypy")
    assert len(build) == 1 and build[0].startswith("=="), build  # pinned exactly
    assert test == build
