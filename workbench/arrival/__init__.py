"""Axis 3: when a unit may start (schedules) and how many run at once (admission)."""
