"""Axis 3: when a unit may start (modes, ``MODES``) and how many run at once (admission).

Importing this package registers the built-in modes (``schedule``): ``trace-timed``,
``saturated``, ``closed-loop``. A new mode: one module with ``@register_mode``, one
import line here.
"""

from workbench.arrival import schedule  # noqa: F401  (the built-in modes register)
from workbench.arrival.modes import MODES, ArrivalMode, register_mode

__all__ = ["MODES", "ArrivalMode", "register_mode"]
