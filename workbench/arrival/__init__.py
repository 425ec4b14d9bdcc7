"""Axis 3: when a unit may start (modes, ``MODES``) and how many run at once. Importing
it registers the built-in modes (``schedule``); a new mode is one module and one import.
"""

from workbench.arrival import schedule  # noqa: F401  (the built-in modes register)
from workbench.arrival.modes import MODES, ArrivalMode, register_mode

__all__ = ["MODES", "ArrivalMode", "register_mode"]
