"""Where the tests find public traces: the bundled copies first, ``../shared/data`` second.

``workbench/data/`` ships the small public traces byte for byte (see its
``PROVENANCE.md``), so most tests never leave the repository. A file that is only
in the unbundled public set (the full Mooncake trace) is looked up in
``shared/data`` next to the repository root; a test that needs it is skipped with a
message naming the path when it is absent (``needs`` / the ``public_file`` fixture).
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BUNDLED = REPO / "workbench" / "data"
SHARED = REPO.parent / "shared" / "data"
FIXTURES = REPO / "tests" / "fixtures"  # small hand-written traces


def public(name: str) -> Path:
    """The path of public trace ``name`` (``"tracelab/multi_session_example.csv"``).

    The bundled copy when there is one, else the one under ``../shared/data`` (which
    may not exist: pair with ``needs`` or use the ``public_file`` fixture).
    """
    bundled = BUNDLED / name
    return bundled if bundled.is_file() else SHARED / name


def needs(*paths: Path) -> pytest.MarkDecorator:
    """Skip unless every path exists, naming the first that is missing."""
    missing = [p for p in paths if not p.exists()]
    return pytest.mark.skipif(
        bool(missing), reason=f"public data not present: {missing[0]}" if missing else ""
    )


def require(name: str) -> Path:
    """``public(name)``, or skip the calling test with a message when it is absent."""
    p = public(name)
    if not p.exists():
        pytest.skip(f"public data not present: {p}")
    return p
