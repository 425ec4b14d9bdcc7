"""Executors: where a replay's plan runs — in this process (``local``), in worker processes
(``processes``), on Ray (``ray``) or in virtual time (``virtual``) — and ``dispatch``
(``run``/``run_async``), which picks one from ``executor.kind``."""
