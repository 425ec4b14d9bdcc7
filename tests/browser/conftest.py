"""JupyterLab on 127.0.0.1 and headless Chromium, for the browser tests.

``lab`` starts ``jupyter lab`` over a temporary copy of ``notebooks/`` for the module
(``jupyter_lab.running_lab``); ``page`` is a Chromium page driven by Playwright's Python
client, with Debian's ``/usr/bin/chromium``. Tests skip when either is missing outside
CI; under ``CI`` they fail, since ``make test`` installs both.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.browser.jupyter_lab import (
    Lab,
    chromium,
    missing_browser,
    missing_lab,
    new_page,
    running_lab,
)


def _missing(reason: str | None) -> None:
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    _missing(missing_lab())
    with running_lab(tmp_path_factory.mktemp("lab")) as running:
        yield running


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    _missing(missing_browser())
    with chromium() as b:
        yield b


@pytest.fixture
def page(browser: object) -> Iterator[object]:
    with new_page(browser) as p:
        yield p
