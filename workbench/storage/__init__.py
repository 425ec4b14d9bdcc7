"""Storage of runs: run directories (``rundir``: JSONL records, manifest, lifecycle) and
their Parquet copy (``columnar``: schema, batches, atomic writes). Nothing here computes
a metric: the derived columns of the Parquet copy come from ``workbench.metrics``."""
