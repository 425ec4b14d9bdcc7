import sys

try:  # the stop signals take Ctrl-C's path before anything else is imported
    from workbench.cli import interrupt_early, main

    interrupt_early()
except KeyboardInterrupt:
    print("workbench: interrupted", file=sys.stderr)
    raise SystemExit(130) from None

raise SystemExit(main())
