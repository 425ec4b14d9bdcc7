"""CLI subcommands, one module each (``NAME``, ``HELP``, ``add_arguments``, ``run``),
found by ``cli.py``."""
