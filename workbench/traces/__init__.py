"""Axis 1: trace formats. One module per format, registered in ``FORMATS``."""
