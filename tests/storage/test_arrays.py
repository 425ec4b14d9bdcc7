"""``storage.arrays``: Arrow arrays made from and read through their buffers are the ones
``pa.array`` and the compute functions give, and a ``simulate -o`` process never imports
pandas (docs/virtual-time.md, "The run files without pandas")."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import workbench
from workbench.storage import arrays

pa = pytest.importorskip("pyarrow")
pc = pytest.importorskip("pyarrow.compute")
pq = pytest.importorskip("pyarrow.parquet")

INTS = [
    [1, 2, 3], [None, 5, None], [], [None], [2**63 - 1, -(2**63)], [0, -1, None, 7],
]  # fmt: skip
TEXTS = [["ok", None, "error", ""], [], [None, None], ["é", "日本", "a\x00b", "ok"], ["x" * 70]]
BOOLS = [[True, False, None], [], [None], [False, False]]


@pytest.mark.parametrize("values", INTS)
def test_int64_is_pa_array(values):
    got = arrays.int64(values)
    assert got.equals(pa.array(values, type=pa.int64()))
    assert got.null_count == values.count(None)


@pytest.mark.parametrize("values", TEXTS)
def test_strings_are_pa_array(values):
    got = arrays.strings(values)
    assert got.equals(pa.array(values, type=pa.string()))
    assert got.null_count == values.count(None)


@pytest.mark.parametrize("values", BOOLS)
def test_bools_are_pa_array(values):
    assert arrays.bools(values).equals(pa.array(values, type=pa.bool_()))


@pytest.mark.parametrize("values", [
    [1.0, 2], [True, 1], [2**63], [-(2**63) - 1], ["1"], [np.int64(3)],
])  # fmt: skip
def test_int64_leaves_anything_but_plain_ints_to_pa_array(values):
    assert arrays.int64(values) is None


@pytest.mark.parametrize("values", [[1, "a"], ["\ud800"], [b"a"]])
def test_strings_leave_anything_but_encodable_text_to_pa_array(values):
    assert arrays.strings(values) is None


def test_bools_leave_ints_to_pa_array():
    assert arrays.bools([1, True]) is None


def test_from_numpy_is_pa_array_nan_as_null_only_when_asked():
    floats = np.array([1.5, np.nan, -np.inf, 0.0])
    assert arrays.from_numpy(floats, pa.float64(), nan_is_null=True).equals(
        pa.array(floats, type=pa.float64(), from_pandas=True))
    plain = arrays.from_numpy(floats, pa.float64())
    assert plain.null_count == 0 and plain.type == pa.float64()  # NaN kept as a value
    assert np.array_equal(np.frombuffer(plain.buffers()[1], dtype=np.float64), floats,
                          equal_nan=True)
    ints = np.arange(5, dtype=np.int64)[::2]  # not contiguous
    assert arrays.from_numpy(ints, pa.int64()).equals(pa.array(ints, type=pa.int64()))
    assert arrays.from_numpy(ints, pa.float64()) is None  # another dtype: pa.array decides
    assert arrays.from_numpy(floats, pa.int64()) is None


def test_list_array_rows_over_flat_values():
    flat = arrays.from_numpy(np.array([1, 2, 3, 4], dtype=np.int64), pa.int64())
    got = arrays.list_array(np.array([2, 0, 2]), flat)
    assert got.equals(pa.array([[1, 2], [], [3, 4]], type=pa.list_(pa.int64())))


def _sliced(arr):
    return [arr, arr.slice(1), arr.slice(2, 3)] if len(arr) > 3 else [arr]


@pytest.mark.parametrize("values,kind", [
    ([3, None, -4, 5, None], pa.int64()), ([1.5, None, float("nan"), 2.0, None], pa.float64()),
    ([True, None, False, True, True], pa.bool_()), (["ok", None, "", "é", "x"], pa.string()),
    ([None, None, None, None], pa.int64()), ([], pa.float64()), ([1, 2, 3, 4], pa.int32()),
])  # fmt: skip
def test_filled_is_fill_null_then_to_numpy(values, kind):
    for arr in _sliced(pa.array(values, type=kind)):
        got, valid = arrays.filled(arr)
        assert np.array_equal(valid, arr.is_valid().to_numpy(zero_copy_only=False))
        if pa.types.is_floating(kind):
            want = arr.to_numpy(zero_copy_only=False)
        else:
            fill = False if pa.types.is_boolean(kind) else "" if kind == pa.string() else 0
            want = pc.fill_null(arr, fill).to_numpy(zero_copy_only=False)
        assert got.dtype == want.dtype
        assert np.array_equal(got, want, equal_nan=got.dtype.kind == "f")


@pytest.mark.parametrize("value", ["ok", "", "error", "é", "okay"])
def test_equal_text_is_pc_equal(value):
    arr = pa.array(["ok", None, "", "error", "é", "okay", "ok", None, "o"])
    for a in _sliced(arr):
        want = pc.fill_null(pc.equal(a, value), False).to_numpy(zero_copy_only=False)
        assert np.array_equal(arrays.equal_text(a, value), want)
    assert arrays.equal_text(pa.array([], type=pa.string()), value).shape == (0,)


def test_dense_rank_is_pc_rank():
    arr = pa.array(["b", None, "a", "é", "b", "Z", None, "", "日本", "a\x00"])
    for a in _sliced(arr):
        want = pc.rank(a, sort_keys="ascending", tiebreaker="dense").to_numpy()
        assert np.array_equal(arrays.dense_rank(arrays.texts(a)), want.astype(np.int64))


def test_a_simulate_run_with_its_files_never_imports_pandas(tmp_path):
    """The whole ``simulate -o`` command with its records on disk (as a large trace keeps
    them: records.parquet, the summary from it, summary.json) in a process of its own:
    pandas (and pyarrow.compute) never imported."""
    trace = str(Path(workbench.__file__).parent / "data/tracelab/multi_session_example.csv")
    cfg = tmp_path / "on-disk.json"
    cfg.write_text('{"executor": {"keep_records": false}}')
    code = ("import sys\nfrom workbench.cli import main\n"
            f"sys.argv = ['workbench', 'simulate', '--trace', {trace!r},\n"
            f"            '--config', {str(cfg)!r}, '--slo', 'ttft_ms<=2000',\n"
            f"            '-o', {str(tmp_path)!r}, '--run-id', 'r']\n"
            "status = main()\n"
            "print(status, 'pandas' in sys.modules, 'pyarrow.compute' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    assert out.split()[-3:] == ["0", "False", "False"]
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["records_kept"] is False
    assert pq.read_table(tmp_path / "r" / "records.parquet").num_rows == 8
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["ok"] == 8 and summary["slo"], summary.keys()
