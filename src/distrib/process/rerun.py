"""The command line and directory that run this Python program again from its start.

Local replicas (`distrib.strategies.local_replicas.connect`) re-run the program once
per extra device. The re-run must behave exactly like the first run, even
if the program changed directory before it imported distrib, so it starts
in the directory the program *started* in, with the interpreter options and
arguments it was given:

* ``python dir/train.py ...``: Python makes ``__main__.__file__`` absolute;
  taking the path as typed off its end gives the starting directory.
* ``python -m pkg.train ...``: Python put the starting directory first on
  ``sys.path``.
* ``python -c "code"``: the code is re-run; the starting directory is not
  recorded by Python, so the re-run starts where the program imported
  distrib (the same place unless it changed directory first).
* an interactive session, a notebook, or a program read from standard input
  cannot be re-run: `RerunError` says so in one line.

Example (started as ``cd /home/me && python jobs/train.py --fast``, which then
calls ``os.chdir("/data")`` before ``import distrib``):
    >>> rerun_command("/data")
    RerunCommand(args=['jobs/train.py', '--fast'], cwd='/home/me')
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import List, Optional

from distrib.errors import DistribError
from distrib.utils.callables import module_file

__all__ = ["RerunCommand", "RerunError", "rerun_command"]


class RerunError(DistribError, RuntimeError):
    """This program cannot be started again (interactive session, notebook, standard input)."""


@dataclass(frozen=True)
class RerunCommand:
    """What to run after ``sys.executable`` (interpreter options included), and where."""

    args: List[str]
    cwd: Optional[str]


def rerun_command(import_directory: Optional[str], why: str = "this program must be re-run") -> RerunCommand:
    """How to start this program again (see the module docstring).

    Args:
        import_directory: the working directory when the program imported distrib
            (where the re-run starts when the starting directory is unknown).
        why: the start of the error line if the program cannot be re-run.

    Raises:
        RerunError: the program is an interactive session, a notebook or standard input.
    """
    main = sys.modules.get("__main__")
    argv = list(sys.argv)
    orig = list(sys.orig_argv or [sys.executable, *argv])
    cut = len(orig) - len(argv)  # orig[cut] is what Python put in argv[0]: the script, module or code
    first = argv[0] if argv else ""
    if "ipykernel" in sys.modules or first.endswith("ipykernel_launcher.py"):
        raise RerunError(f"{why}, which is impossible from a notebook: put the code in a script and run "
                         "`python script.py`, or use `distrib launch`")
    if cut < 1 or first in ("", "-") or main is None:
        raise RerunError(f"{why}, which is impossible from an interactive session or standard input: "
                         "run it as `python script.py`, or use `distrib launch`")
    options, target, rest = orig[1:cut], orig[cut], argv[1:]
    if first == "-c":
        return RerunCommand([*options, target, *rest], import_directory)
    if options and options[-1] == "-m":
        head = sys.path[0] if sys.path else ""
        start = head if os.path.isabs(head) and os.path.isdir(head) else import_directory
        return RerunCommand([*options, target, *rest], start)
    main_file = module_file(main)  # None under -c or an interactive shell
    if not main_file:
        raise RerunError(f"{why}, but the program's script cannot be found (sys.argv[0] is {first!r}): "
                         "run it as `python script.py`, or use `distrib launch`")
    if os.path.isabs(target):
        return RerunCommand([*options, target, *rest], import_directory)
    start = _strip(str(main_file), target)
    if start is None and os.path.basename(str(main_file)) == "__main__.py":  # python some_dir (or a .zip)
        start = _strip(os.path.dirname(str(main_file)), target.rstrip(os.sep))
    if start is None:  # not recoverable: run the script by its absolute path from the import directory
        absolute = os.path.abspath(str(main_file))
        if os.path.basename(absolute) == "__main__.py" and not target.endswith(".py"):
            absolute = os.path.dirname(absolute)
        return RerunCommand([*options, absolute, *rest], import_directory)
    return RerunCommand([*options, target, *rest], start)


def _strip(absolute: str, typed: str) -> Optional[str]:
    """``/home/me`` from ``/home/me/jobs/train.py`` and ``jobs/train.py``; None if it does not end so."""
    suffix = os.sep + typed
    if not os.path.isabs(absolute) or not absolute.endswith(suffix):
        return None
    return absolute[:-len(suffix)] or os.sep
