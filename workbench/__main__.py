import signal
import sys


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


signal.signal(signal.SIGTERM, _interrupt)  # before anything is imported (workbench.cli)
try:
    from workbench.cli import main
except KeyboardInterrupt:
    print("workbench: interrupted", file=sys.stderr)
    raise SystemExit(130) from None

raise SystemExit(main())
