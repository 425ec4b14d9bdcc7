"""Storage of runs: run directories (``rundir``: JSONL records, manifest, lifecycle),
their Parquet copy (``columnar``) and DuckDB views over it (``scan``). Nothing here
computes a metric from records beyond the per-record columns of the Parquet copy."""
