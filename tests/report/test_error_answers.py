"""One reading of a server's JSON error answer (``workbench.error_answers``): the client
that meets it in a 200's payload and the report that explains a stored HTTP error agree."""

from __future__ import annotations

import pytest

from workbench.backends.base import json_body_error, loads
from workbench.error_answers import answer_message, error_message
from workbench.errors import WorkbenchError
from workbench.metrics.deviations import reason

ANSWERS = [  # (body, its message)
    ('{"error": {"message": "context too long", "type": "BadRequestError"}}', "context too long"),
    ('{"error": "model not loaded"}', "model not loaded"),
    ('{"object": "error", "message": "bad sampling", "code": 400}', "bad sampling"),
]


@pytest.mark.parametrize(("body", "said"), ANSWERS)
def test_the_client_and_the_report_read_an_error_answer_alike(body: str, said: str) -> None:
    with pytest.raises(WorkbenchError, match=f"server error in the answer: {said}$"):
        loads(body.encode())
    assert str(json_body_error(body.encode())).endswith(f": {said}")
    assert reason(f"HTTP 400: {body}") == said  # the report's sample of the same answer


def test_a_refused_answers_detail_is_its_message_but_not_a_payloads() -> None:
    """FastAPI's ``{"detail": ...}`` is a refusal's message (HTTP 422), while a 200's payload
    with a ``detail`` key is no error object."""
    assert answer_message({"detail": "field required"}) == "field required"
    assert error_message({"detail": "field required"}) is None
    assert reason('HTTP 422: {"detail": "field required"} (after 0.1 s)') == "field required"
    assert answer_message({"error": {"code": 500}, "message": "overloaded"}) == "overloaded"
    assert answer_message({"choices": []}) is None
