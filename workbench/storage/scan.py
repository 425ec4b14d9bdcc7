"""A DuckDB view over one run's ``records.parquet``: the storage side of the SQL metrics.

``workbench.metrics.scan`` computes the metrics as SQL aggregates over the view ``r``
that ``Scan`` opens here (warm-up rows excluded unless asked).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from workbench.errors import ConfigError

MEMORY_LIMIT = "1GB"


def available() -> bool:
    """True when duckdb and pyarrow are importable (``pip install 'workbench[large]'``)."""
    try:
        import duckdb  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


class Scan:
    """A DuckDB connection with a view ``r`` over one run's records (warmup excluded)."""

    def __init__(self, run_dir: str | Path, *, warmup: bool = False, token_times: bool = False):
        try:
            import duckdb
        except ImportError:
            from workbench.storage.columnar import INSTALL_HINT

            raise ConfigError(f"scanning large runs needs duckdb: {INSTALL_HINT}") from None
        from workbench.storage import columnar
        from workbench.storage.rundir import resolve_run_dir

        self.run_dir = resolve_run_dir(run_dir)
        self.path = columnar.parquet_path(self.run_dir, token_times=token_times or None)
        self.columns = set(columnar.parquet_columns(self.path))
        self.con = duckdb.connect(config={"memory_limit": MEMORY_LIMIT})
        src = str(self.path).replace("'", "''")
        where = "" if warmup else " WHERE NOT warmup"
        self.con.execute(f"CREATE VIEW r AS SELECT * FROM read_parquet('{src}'){where}")

    def one(self, sql: str) -> tuple[Any, ...]:
        row = self.con.execute(sql).fetchone()
        assert row is not None
        return row

    def df(self, sql: str) -> pd.DataFrame:
        return self.con.execute(sql).df()

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Scan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


