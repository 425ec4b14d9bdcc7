"""Executors: where a replay's plan runs (docs/executors.md); ``dispatch`` picks one."""
