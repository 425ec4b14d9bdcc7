import signal
import sys

from workbench.errors import STOP_SIGNAL_NAMES  # cheap: no dependency


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


for _name in STOP_SIGNAL_NAMES:  # before anything else is imported (workbench.cli)
    if hasattr(signal, _name):
        signal.signal(getattr(signal, _name), _interrupt)
try:
    from workbench.cli import main
except KeyboardInterrupt:
    print("workbench: interrupted", file=sys.stderr)
    raise SystemExit(130) from None

raise SystemExit(main())
