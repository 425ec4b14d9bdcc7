"""JupyterLab on 127.0.0.1 and headless Chromium, for the browser tests.

``lab`` starts ``jupyter lab`` (token auth, ``--allow-root``, ``--no-browser``)
on a free loopback port over a temporary copy of ``notebooks/``, and stops it
(SIGTERM, then SIGKILL) at the end of the module. ``page`` is a Chromium page
driven by Playwright's Python client, with Debian's ``/usr/bin/chromium``
(``playwright install`` is never used). Tests skip when either is missing
outside CI; under ``CI`` they fail, since ``make test`` installs both.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("WORKBENCH_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
READY_S = 120.0


def _missing(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Lab:
    url: str
    token: str
    root: Path
    out: Path  # screenshots

    def notebook_url(self, name: str) -> str:
        return f"{self.url}/lab/tree/{name}?token={self.token}&reset"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    if shutil.which("jupyter-lab", path=str(Path(sys.executable).parent)) is None:
        _missing("jupyterlab is not installed (pip install -e '.[browser]')")
    root = tmp_path_factory.mktemp("lab")
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        shutil.copy(nb, root / nb.name)
    settings = root / ".settings"  # every cell in the DOM (no windowing), no news pop-up
    for ext, body in (("notebook-extension/tracker", '{"windowingMode": "none"}'),
                      ("apputils-extension/notification", '{"fetchNews": "false"}')):
        f = settings / "@jupyterlab" / f"{ext}.jupyterlab-settings"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(body)
    port, token = _free_port(), secrets.token_hex(16)
    log = (root / "jupyter.log").open("wb")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JUPYTER_PLATFORM_DIRS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root",
         "--ip=127.0.0.1", f"--port={port}", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={root}", "--LabApp.news_url=None",
         f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={root / '.ws'}",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_S
        for _ in range(1000):  # readiness probe of the server, bounded in count and time
            if proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited: {(root / 'jupyter.log').read_text()}")
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("jupyter lab did not answer /api/status") from None
                time.sleep(0.2)
        out = root / "screenshots"
        out.mkdir()
        yield Lab(url, token, root, out)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)
        log.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not Path(CHROMIUM).exists():
        _missing(f"{CHROMIUM} is missing (apt-get install chromium chromium-driver)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed (pip install -e '.[browser]')")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: object) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})  # type: ignore[attr-defined]
    p = context.new_page()
    p.set_default_timeout(60_000)
    try:
        yield p
    finally:
        context.close()
