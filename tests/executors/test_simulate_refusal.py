"""QA: simulate treats a request the engine refuses as the HTTP server does (a 400 record).

Found by the independent check: a trace round whose prompt exceeds the engine's
``max_model_len`` (legal under the trace bounds, 10M tokens) made ``simulate`` log
a "sender failed" traceback and record a bare ``ValueError`` with no status,
while the same trace against the live embedded engine records an HTTP 400.
"""

import logging

from workbench.executors.virtual import simulate


def _long_prompt_trace(tmp_path):
    path = tmp_path / "raw.csv"
    path.write_text(
        "session_id,arrival_time,round_idx,prefix_len,input_len,output_len,tool_wait_after_ms\n"
        "0,0,0,0,100,10,1\n"
        "1,0,0,0,200000,10,1\n"
    )
    return path


def test_engine_refusal_is_a_400_record_not_a_sender_traceback(tmp_path, caplog):
    caplog.set_level(logging.ERROR)
    result = simulate({"trace": str(_long_prompt_trace(tmp_path)),
                       "arrival": {"mode": "saturated"}})
    by_id = {r.session_id: r for r in result.records}
    assert by_id["0"].status == "ok"
    bad = by_id["1"]
    assert bad.status == "error"
    assert bad.http_status == 400
    assert bad.error.startswith("HTTP 400: ") and "maximum context length" in bad.error
    assert not [r for r in caplog.records if "sender failed" in r.getMessage()]
