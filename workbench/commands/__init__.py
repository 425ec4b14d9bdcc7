"""CLI subcommands: one module each, found by ``cli.py``.

A module here defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int``; adding a subcommand is adding a module.
"""
