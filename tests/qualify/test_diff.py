"""Where two canonical reports first differ (qualify/diff.py)."""

from __future__ import annotations

import copy

from parity_specs import MOON, canonical_report

from workbench.executors.virtual import simulate
from workbench.qualify.diff import first_difference, first_path


def test_first_path_walks_sorted_keys_and_list_indices():
    a = {"b": [1, 2, {"x": 1}], "a": 1}
    b = {"b": [1, 2, {"x": 2}], "a": 1}
    assert first_path(a, b) == ("b[2].x", 1, 2)
    assert first_path([1, 2], [1, 2, 3]) == (".length", 2, 3)
    assert first_path({"k": 1}, {"k": 1.0}) == ("k", 1, 1.0)  # types count, as in the digest
    assert first_path(a, copy.deepcopy(a)) is None


def test_a_report_that_differs_only_in_its_manifest_names_no_request():
    report = canonical_report(simulate({"trace": {"path": str(MOON), "max_items": 10}}))
    other = copy.deepcopy(report)
    other["manifest"]["engine"]["decode_floor_ms"] = 6.0
    diff = first_difference(report, other)
    assert diff is not None and "request" not in diff
    assert diff["sections"] == {"manifest": ["manifest.engine.decode_floor_ms"]}
    assert first_difference(report, copy.deepcopy(report)) is None


def test_the_first_differing_request_is_first_in_dispatch_order():
    report = canonical_report(simulate({"trace": {"path": str(MOON), "max_items": 10}}))
    other = copy.deepcopy(report)
    order = sorted(other["records"], key=lambda r: (r["dispatch_ns"], r["request_id"]))
    order[7]["end_ns"] += 1
    order[3]["cached_tokens"] += 16
    diff = first_difference(report, other)
    assert diff["request"]["index"] == 3
    assert diff["request"]["request_id"] == order[3]["request_id"]
    assert diff["request"]["field"] == "cached_tokens"
    other["records"].remove(order[0])
    missing = first_difference(report, other)["request"]
    assert (missing["index"], missing["field"]) == (0, "<missing in candidate>")
