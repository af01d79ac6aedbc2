import sys

from blocklab import interrupts

interrupts.install()  # before the imports: a Ctrl-C that a library swallows while they load is still seen
try:
    from blocklab.cli import main
except KeyboardInterrupt:  # a Ctrl-C before the command line's own handler is in place
    print("blocklab: interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
