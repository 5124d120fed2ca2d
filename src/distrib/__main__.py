"""``python -m distrib [launch|plot] ...``: the same as the ``distrib`` console script.

With no arguments it prints the help (exit 0).
"""
import sys

from distrib.launch.cli import main

if __name__ == "__main__":
    sys.exit(main())
