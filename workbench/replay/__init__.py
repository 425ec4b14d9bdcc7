"""The core of one replay: the plan, its rounds, the runner that dispatches them, the
admission queue, the client measuring itself, the clocks, and the session that opens a
target and writes the run directory. Executors (``workbench.executors``) drive it."""
