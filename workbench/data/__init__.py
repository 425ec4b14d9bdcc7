"""Small public traces bundled with the package, so demos and notebooks work offline.

Provenance (source, commit, license, what was sliced) is in ``PROVENANCE.md``
beside this file; keep it in step with any file added here.
"""

from __future__ import annotations

from pathlib import Path

_ROOT = Path(__file__).resolve().parent
_SUFFIXES = (".csv", ".jsonl", ".json")


def files() -> list[str]:
    """Names (``sub/folder/file``) of every bundled trace, sorted."""
    return sorted(
        p.relative_to(_ROOT).as_posix()
        for p in _ROOT.rglob("*")
        if p.is_file() and p.suffix in _SUFFIXES
    )


def path(name: str) -> Path:
    """The on-disk path of bundled trace ``name`` (e.g. ``"tracelab/multi_session_example.csv"``).

    A bare file name is accepted when it is unique. Raises ``FileNotFoundError``
    listing what is bundled, so a typo is easy to fix.
    """
    known = files()
    if name in known:
        return _ROOT / name
    matches = [k for k in known if k.rsplit("/", 1)[-1] == name]
    if len(matches) == 1:
        return _ROOT / matches[0]
    raise FileNotFoundError(f"no bundled trace {name!r}; bundled: {', '.join(known)}")


__all__ = ["files", "path"]
