"""Every published measurement table against its preset, row by row (docs/hardware.md).

Each table of ``workbench/data/measurements`` is replayed on the embedded engine in
virtual time with the preset it names (``presets.fit.table_errors``); the error of every
row is printed (``pytest -s``) and bounded, and the median absolute errors over all rows
are the ones the presets state (``presets.stated.FIT_ERROR``), which every plan figure
quotes."""

from statistics import median

import pytest

from workbench.sim.presets import fit
from workbench.sim.presets.stated import FIT_ERROR

TABLES = {t.name: t for t in fit.load_tables()}
ROWS: dict[str, list[fit.RowError]] = {}


def _rows(name: str) -> list[fit.RowError]:
    if name not in ROWS:
        ROWS[name] = fit.table_errors(TABLES[name])
    return ROWS[name]


def test_every_table_names_its_source_and_how_to_replay_it() -> None:
    assert len(TABLES) == 3
    for t in TABLES.values():
        assert t.meta["source"].startswith("https://") and t.rows
        assert t.kind in ("closed_loop", "batch_latency")


@pytest.mark.parametrize("name", sorted(TABLES))
def test_preset_against_published_table(name: str) -> None:
    rows = _rows(name)
    print(f"\n{name} ({TABLES[name].meta['source']})")
    for r in rows:
        print(f"  {r.preset:28} {r.key:>22} {r.metric:17} published {r.published:10.2f} "
              f"simulated {r.simulated:10.2f} error {r.error:+.1%}")
    assert rows and all(r.simulated > 0 for r in rows)
    # no row is off by more than a factor of two (the table's shape is reproduced)
    assert all(abs(r.error) < 1.0 for r in rows), [(r.key, r.metric, r.error) for r in rows]


def test_the_stated_median_errors_are_the_tables() -> None:
    rows = [r for name in sorted(TABLES) for r in _rows(name)]
    for metric, stated in FIT_ERROR.items():
        got = median(abs(r.error) for r in rows if r.metric == metric)
        assert got == pytest.approx(stated, abs=0.005), metric
