"""``tf.config.threading``: how many CPU threads one process's operators use.

TensorFlow's names, carried by torch's settings:

* `set_intra_op_parallelism_threads(n)`: threads inside one operator (a
  matrix product, a convolution) -- ``torch.set_num_threads(n)``; ``0``
  goes back to the default (one per CPU this process may use, or
  ``OMP_NUM_THREADS`` when set). Unlike TF, it may be changed at any time.
* `set_inter_op_parallelism_threads(n)`: threads running independent
  operators at once -- ``torch.set_num_interop_threads(n)``; as in TF, only
  before the first parallel work (later it raises ``RuntimeError`` naming the
  fix); ``0`` keeps the default.
* the getters return what was set, or ``0`` ("the default"), as TF's do.

The default, decided: distrib leaves a single process at torch's default of
one thread per core (TF's default count too), and divides the cores among the
processes it starts itself (local replicas, ``distrib launch`` tasks). It does
not pick a thread count from how busy the machine is: the count changes how
torch splits its sums, so the last bits of the weights would then depend on
the moment a program started. On a machine that other programs keep busy,
torch's spinning OpenMP threads are the worst case (measured here, 2 cores
under load: a CNN step took 76-193 ms on 2 threads against 6-9 ms on 1), so
the first ``fit`` of such a process, when nobody chose a thread count, warns
once (`BusyMachineWarning`) with the fix: ``set_intra_op_parallelism_threads(1)``
(or ``OMP_NUM_THREADS=1``).

Example:
    >>> distrib.config.threading.set_intra_op_parallelism_threads(1)
    >>> distrib.config.threading.get_intra_op_parallelism_threads()
    1
"""
from __future__ import annotations

import os
import warnings
from typing import Optional

from distrib.utils.public_names import public_dir

__all__ = ["set_intra_op_parallelism_threads", "get_intra_op_parallelism_threads",
           "set_inter_op_parallelism_threads", "get_inter_op_parallelism_threads",
           "default_intra_op_threads", "BusyMachineWarning", "warn_if_oversubscribed"]


def __dir__() -> list:
    return public_dir(globals(), __all__)


_intra: int = 0
_inter: int = 0
_warned = False


class BusyMachineWarning(UserWarning):
    """A single process runs torch on every core of a machine other programs keep busy."""


def _count(num_threads: int, who: str) -> int:
    if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 0:
        raise ValueError(f"{who}({num_threads!r}): give a thread count >= 1, or 0 for the default")
    return num_threads


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def default_intra_op_threads() -> int:
    """torch's default count here: ``OMP_NUM_THREADS`` when set, else the CPUs this process may use."""
    env = os.environ.get("OMP_NUM_THREADS", "")
    return int(env) if env.isdigit() and int(env) > 0 else _usable_cpus()


def set_intra_op_parallelism_threads(num_threads: int) -> None:
    """Threads inside one operator (``torch.set_num_threads``); 0 restores the default."""
    import torch

    global _intra
    _intra = _count(num_threads, "set_intra_op_parallelism_threads")
    torch.set_num_threads(_intra or default_intra_op_threads())


def get_intra_op_parallelism_threads() -> int:
    """The count given to `set_intra_op_parallelism_threads`, or 0 (the default) if none was."""
    return _intra


def set_inter_op_parallelism_threads(num_threads: int) -> None:
    """Threads running independent operators (``torch.set_num_interop_threads``), before any parallel work.

    Raises:
        RuntimeError: torch already started its inter-op pool (or it was set before).
    """
    import torch

    global _inter
    count = _count(num_threads, "set_inter_op_parallelism_threads")
    if count == 0:
        _inter = 0
        return
    if count == torch.get_num_interop_threads():
        _inter = count
        return
    try:
        torch.set_num_interop_threads(count)
    except RuntimeError:
        raise RuntimeError(
            f"set_inter_op_parallelism_threads({count}): torch already runs {torch.get_num_interop_threads()} "
            "inter-op threads and cannot change them once parallel work started; call it at the top of the "
            "program, before any torch computation (as TensorFlow requires too)") from None
    _inter = count


def get_inter_op_parallelism_threads() -> int:
    """The count given to `set_inter_op_parallelism_threads`, or 0 (the default) if none was."""
    return _inter


def warn_if_oversubscribed(load_average: Optional[float] = None) -> bool:
    """Warn once if this lone process uses every core of a machine already busy; True if it warned.

    Only where nobody chose a count: not after `set_intra_op_parallelism_threads`,
    nor with ``OMP_NUM_THREADS`` set (distrib sets it for the processes it starts).
    The warning's text depends on the machine's load; what the program computes does not.
    """
    import torch

    global _warned
    if _warned or _intra or "OMP_NUM_THREADS" in os.environ:
        return False
    threads = torch.get_num_threads()
    if threads <= 1:
        return False
    if load_average is None:
        try:
            load_average = os.getloadavg()[0]
        except OSError:  # not available here
            return False
    cpus = _usable_cpus()
    if load_average < cpus:
        return False
    _warned = True
    warnings.warn(
        f"torch runs {threads} threads per operator in this process, but the machine is already busy (load "
        f"{load_average:.1f} on {cpus} CPUs) and spinning threads can make each step many times slower; call "
        "distrib.config.threading.set_intra_op_parallelism_threads(1) (or set OMP_NUM_THREADS=1) if it crawls",
        BusyMachineWarning, stacklevel=4)
    return True
