"""Admission from an earlier hit (docs/virtual-time.md, "Per-block costs"): a routed
request starts from the hit the router found on its worker, a preempted one from its own
committed blocks; both re-checked against evictions since, then extended. The run must
be the one a fresh lookup of the whole prefix gives, to the byte."""

from __future__ import annotations

from typing import Any

import pytest

from tests.twin import patched_in_python
from workbench.data import path as data_path
from workbench.executors.virtual import simulate
from workbench.report.canonical import canonical_report, report_digest
from workbench.sim import scheduler

MOON = str(data_path("mooncake/conversation_trace_head600.jsonl"))


def earlier_and_fresh(engine: dict[str, Any]) -> list[Any]:
    """The run's digest admitting from earlier hits, how many admissions did with
    evictions since the hit, and the digest of the same run with fresh lookups only
    (``Scheduler._routed_memo`` patched)."""
    cfg = {"trace": {"path": MOON, "max_items": 150}}
    used: list[bool] = []
    real = scheduler.Scheduler._routed_memo

    def counted(self: scheduler.Scheduler, seq: scheduler.Sequence) -> Any:
        memo = real(self, seq)
        used.append(memo is not None and self.kv.evictions != memo.evictions)
        return memo

    try:
        scheduler.Scheduler._routed_memo = counted  # type: ignore[method-assign]
        earlier = report_digest(canonical_report(simulate(cfg, engine=engine)))
        scheduler.Scheduler._routed_memo = lambda self, seq: None  # type: ignore[method-assign]
        fresh = report_digest(canonical_report(simulate(cfg, engine=engine)))
    finally:
        scheduler.Scheduler._routed_memo = real  # type: ignore[method-assign]
    return [earlier, sum(used), fresh]


@pytest.mark.parametrize("engine", [
    {"workers": 3, "router": "prefix-aware", "num_blocks": 2500},  # routed hits
    {"num_blocks": 3000, "max_num_seqs": 64, "max_num_batched_tokens": 2048},  # preempting
])  # fmt: skip
def test_admission_from_an_earlier_hit_is_admission_from_a_fresh_lookup(
    engine: dict[str, Any]
) -> None:
    # patched: in the Python twin where the scheduler is compiled (tests/twin.py)
    earlier, used, fresh = patched_in_python(__file__, f"earlier_and_fresh({engine!r})",
                                             globals())  # fmt: skip
    assert used > 20  # used, with evictions since the hit was found
    assert fresh == earlier
