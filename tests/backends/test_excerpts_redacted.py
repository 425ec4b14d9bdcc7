"""A server's body cut to an excerpt (an error message, a reset's or a profile's answer)
is redacted whole before the cut (``redact.excerpt``): a secret the server echoed across
the excerpt's end would no longer be recognised, and its first part would be written
(docs/security.md)."""

import pytest
from aiohttp import web

from workbench import redact
from workbench.backends.base import BackendError, json_body_error, loads
from workbench.backends.flush import flush_prefix_cache
from workbench.backends.stream import RAW_MAX, whole_body_error
from workbench.backends.transport import HTTPStatusError

SECRET = "opaque-token-7c1e55a0d9b24f3e8a61"  # registered: no key-shaped pattern in it
HEAD = SECRET[:6]  # of the 10 characters a cut at 200 would leave


@pytest.fixture(autouse=True)
def _registered():
    redact.register(SECRET)


def _across_200(prefix: str = "", secret: str = SECRET, cut: int = 200) -> str:
    """A body whose echoed secret starts 10 characters before ``cut``: cut there, then
    redacted, its first 10 characters would stay."""
    return f"{prefix}{'x' * (cut - 10 - len(prefix))}{secret}"


@pytest.mark.parametrize("make", [
    lambda: loads(_across_200('{"echo": "').encode()),  # bad JSON (unterminated)
    lambda: loads(f'["{_across_200()}"]'.encode()),  # not an object
])
def test_an_answer_error_keeps_no_part_of_an_echoed_secret(make):
    with pytest.raises(BackendError) as exc:
        make()
    assert HEAD not in str(exc.value) and redact.MARK[:5] in str(exc.value)


@pytest.mark.parametrize("make", [
    lambda: json_body_error(_across_200().encode()),
    lambda: whole_body_error(_across_200("data: ").encode()),
    lambda: whole_body_error(_across_200("{", cut=RAW_MAX).encode()),  # malformed JSON
    lambda: whole_body_error(f'["{_across_200(cut=RAW_MAX)}"]'.encode()),  # not an object
    lambda: HTTPStatusError(500, _across_200(cut=RAW_MAX)),  # an error status's body
])
def test_a_body_error_keeps_no_part_of_an_echoed_secret(make):
    err = make()
    assert err is not None and HEAD not in str(err), str(err)


async def test_a_refused_cache_reset_keeps_no_part_of_the_echoed_key(loopback):
    async def refuse(request: web.Request) -> web.Response:
        key = request.headers["Authorization"].split()[-1]  # "Bearer KEY"
        return web.Response(status=500, text=_across_200(secret=key))

    url = await loopback([web.post("/reset_prefix_cache", refuse)])
    out = await flush_prefix_cache(url, api_key=SECRET, retries=0)
    bodies = [t["body"] for t in out.tries]
    assert bodies and all(HEAD not in b for b in bodies), bodies
