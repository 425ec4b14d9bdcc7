"""Calibration: fit the embedded engine's cost model from a real engine's runs (``fit``), and
check the fit by predicting those runs in virtual time (``workbench.executors.virtual``)."""
