"""The one place distrib installs process-wide hooks.

A process-wide hook changes how the whole program behaves, not one object:
Python's ``sys.excepthook``, signal handlers and ``atexit`` functions, and
torch's *global* hooks (every optimizer's step, every module's parameter
registration or forward pass). distrib installs all of them through this
module, so one file says what distrib changes in a user's process. The
handler functions stay with their concern:

* `install_excepthook`: one-line distrib errors (handler:
  `distrib.error_report.excepthook`);
* `optimizer_step_pre_hook`: gradient sync before any step
  (`distrib.comm.optimizer_hook`), central storage's held-back steps, the
  parameter server's guard against local steps;
* `module_registration_hook`, `module_forward_pre_hook`: scope capture
  (`distrib.strategies.replication`, `parameter_server.variables`);
* `functional_override`: ``torch.nn.functional``'s dropout functions and the
  dropout inside ``scaled_dot_product_attention`` drop by the example's global
  row in a multi-replica step (`distrib.strategies.layer_patches.global_dropout`);
* `keras_random_override`: Keras 3's seeded dropout on the torch backend
  does too, and so do the ``normal`` and ``uniform`` draws of its
  ``GaussianNoise``, ``GaussianDropout`` and ``AlphaDropout`` layers
  (`distrib.strategies.layer_patches.keras_random`);
* `install_signal_handler`, `restore_signal_handler`: preemption
  (`distrib.checkpoint.preemption`), the launcher (`distrib.launch.signals`);
* `at_exit`: closing a collective, reaping local replicas, shutting a
  parameter-server cluster down, removing test namespaces.

Installing is idempotent: installing the same handler (the same function,
or the same bound method of the same object) again while it is installed
returns the first `Handle` and leaves one hook. ``torch`` is imported only
when a torch hook is installed, so ``import distrib`` stays light.

Example:
    >>> calls = []
    >>> def on_exit(): calls.append("bye")
    >>> first, second = at_exit(on_exit), at_exit(on_exit)
    >>> first is second       # one hook, however often it is installed
    True
    >>> first.remove(); first.installed
    False
"""
from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import types
from typing import Any, Callable, Dict, Hashable, Iterator, Optional, Tuple

from distrib import error_report
from distrib.error_report import is_cluster_task, one_line, short_cause, task_label, verbose

__all__ = ["Handle", "install_excepthook", "optimizer_step_pre_hook", "module_registration_hook",
           "module_forward_pre_hook", "functional_override", "keras_random_override",
           "install_signal_handler", "restore_signal_handler", "at_exit",
           "installed_hooks",
           # one-line errors, re-exported from distrib.error_report for older imports
           "is_cluster_task", "task_label", "one_line", "short_cause", "verbose"]

_lock = threading.Lock()
_installed: Dict[Tuple[str, Hashable], "Handle"] = {}


class Handle:
    """An installed hook; `remove` takes it out again (once; later calls do nothing)."""

    def __init__(self, kind: str, fn: Callable[..., Any], remover: Callable[[], None]) -> None:
        self.kind = kind
        self.fn = fn
        self._remover: Optional[Callable[[], None]] = remover

    @property
    def installed(self) -> bool:
        return self._remover is not None

    def remove(self) -> None:
        with _lock:
            remover, self._remover = self._remover, None
            if _installed.get((self.kind, self.fn)) is self:
                del _installed[(self.kind, self.fn)]
        if remover is not None:
            remover()

    def __repr__(self) -> str:
        state = "installed" if self.installed else "removed"
        return f"<distrib hook {self.kind} {getattr(self.fn, '__qualname__', self.fn)!r} {state}>"


def _install(kind: str, fn: Callable[..., Any], add: Callable[[], Callable[[], None]]) -> Handle:
    """Install ``fn`` as a ``kind`` hook unless it already is; ``add`` installs and returns a remover."""
    with _lock:
        existing = _installed.get((kind, fn))
        if existing is not None:
            return existing
        handle = Handle(kind, fn, add())
        _installed[(kind, fn)] = handle
        return handle


def installed_hooks() -> Dict[str, int]:
    """How many hooks of each kind distrib has installed now (for diagnostics and tests)."""
    with _lock:
        counts: Dict[str, int] = {}
        for kind, _ in _installed:
            counts[kind] = counts.get(kind, 0) + 1
        return counts


# ------------------------------------------------------------------ Python
def install_excepthook() -> None:
    """Make uncaught distrib errors one line (`distrib.error_report`); idempotent.

    A hook installed after distrib's that wraps it (torch.distributed's
    ``init_process_group`` does: it prefixes ``[rank0]:``) is left in place:
    wrapping it in turn would make the two hooks call each other for ever.
    Under ``distrib launch``, whose ``[worker 0]`` prefix already names the
    task, torch's wrapper is taken off again so lines are not prefixed twice.
    """
    with _lock:
        current = sys.excepthook
        if _hook_chain_has(current, error_report.excepthook):
            if os.environ.get("DISTRIB_LAUNCHED") == "1" and _is_torch_rank_prefixer(current):
                sys.excepthook = error_report.excepthook
            return
        error_report.previous_excepthook = current
        sys.excepthook = error_report.excepthook


@contextlib.contextmanager
def excepthook_kept() -> Iterator[None]:
    """Undo whatever the block does to ``sys.excepthook``.

    torch's ``init_process_group`` wraps the hook in a ``[rank<N>]:`` prefixer
    each time it runs; an elastic task builds new process groups at every
    resize or recovery, and its errors would read ``[rank2]: [rank1]: ...``.
    """
    hook = sys.excepthook
    try:
        yield
    finally:
        sys.excepthook = hook


def _is_torch_rank_prefixer(hook: Any) -> bool:
    return (getattr(hook, "__qualname__", "").endswith("_distributed_excepthook")
            and getattr(hook, "__module__", "") == "torch.distributed.distributed_c10d")


def _hook_chain_has(hook: Any, target: Callable[..., Any], depth: int = 8) -> bool:
    """Whether ``hook`` is ``target`` or calls it through closures/``__wrapped__`` (bounded search)."""
    seen: set = set()
    pending = [(hook, 0)]
    while pending:
        fn, level = pending.pop()
        if fn is target:
            return True
        if level >= depth or id(fn) in seen or not callable(fn):
            continue
        seen.add(id(fn))
        inner = [getattr(fn, "__wrapped__", None)]  # any user callable: only functools.wraps wrappers have one
        closure = fn.__closure__ if isinstance(fn, (types.FunctionType, types.MethodType)) else None
        for cell in closure or ():  # a function's cells (a method's are its function's)
            try:
                inner.append(cell.cell_contents)
            except ValueError:  # an empty cell
                continue
        pending.extend((candidate, level + 1) for candidate in inner if callable(candidate))
    return False


def at_exit(fn: Callable[[], Any]) -> Handle:
    """Run ``fn`` when the interpreter exits (``atexit``; last installed runs first)."""
    def add() -> Callable[[], None]:
        atexit.register(fn)
        return lambda: atexit.unregister(fn)
    return _install("atexit", fn, add)


def install_signal_handler(signum: int, handler: Callable[[int, Any], Any]) -> Any:
    """Handle ``signum`` with ``handler``; return the handler it replaces (for `restore_signal_handler`).

    Main thread only (Python's rule): elsewhere it raises ``ValueError``.
    Installing the handler that is already installed changes nothing and
    returns that handler.
    """
    with _lock:
        return signal.signal(signum, handler)


def restore_signal_handler(signum: int, previous: Any) -> None:
    """Put back the handler `install_signal_handler` returned (``None`` means the default)."""
    with _lock:
        signal.signal(signum, signal.SIG_DFL if previous is None else previous)


# ------------------------------------------------------------------- torch
def optimizer_step_pre_hook(fn: Callable[..., Any]) -> Handle:
    """Call ``fn(optimizer, args, kwargs)`` before every optimizer's ``step`` (torch's global hook)."""
    def add() -> Callable[[], None]:
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        return register_optimizer_step_pre_hook(fn).remove
    return _install("optimizer_step_pre", fn, add)


def module_registration_hook(kind: str, fn: Callable[..., Any]) -> Handle:
    """Call ``fn(module, name, value)`` whenever any module registers a ``kind`` (``"parameter"``,
    ``"buffer"`` or ``"module"``: a submodule)."""
    if kind not in ("parameter", "buffer", "module"):
        raise ValueError(f"module_registration_hook: kind must be 'parameter', 'buffer' or 'module', got {kind!r}")

    def add() -> Callable[[], None]:
        from torch.nn.modules import module as module_mod

        register = {"parameter": module_mod.register_module_parameter_registration_hook,
                    "buffer": module_mod.register_module_buffer_registration_hook,
                    "module": module_mod.register_module_module_registration_hook}[kind]
        return register(fn).remove
    return _install(f"module_{kind}_registration", fn, add)


def module_forward_pre_hook(fn: Callable[..., Any]) -> Handle:
    """Call ``fn(module, args)`` before every module's forward (torch's global hook)."""
    def add() -> Callable[[], None]:
        from torch.nn.modules import module as module_mod

        return module_mod.register_module_forward_pre_hook(fn).remove
    return _install("module_forward_pre", fn, add)


def functional_override(name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Handle:
    """Replace ``torch.nn.functional.<name>`` by ``make(original)`` until the handle is removed.

    Code that looks the function up when it calls it sees the replacement
    (``F.dropout(...)``, torch's own layers and ``multi_head_attention_forward``);
    a name imported before (``from torch.nn.functional import dropout``) keeps
    the original. Idempotent per ``make``, as every hook here.
    """
    def add() -> Callable[[], None]:
        import torch.nn.functional as functional

        original = getattr(functional, name)
        setattr(functional, name, make(original))
        return lambda: setattr(functional, name, original)
    return _install(f"functional_{name}", make, add)


def keras_random_override(name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Handle:
    """Replace ``<name>`` of Keras 3's torch-backend random module by ``make(original)`` until removed.

    Keras's layers and ``keras.random`` call ``backend.random.<name>`` when
    they run, so they see the replacement. Only call it once ``keras`` is
    imported on the torch backend.
    """
    def add() -> Callable[[], None]:
        from keras.src.backend.torch import random as keras_random

        original = getattr(keras_random, name)
        setattr(keras_random, name, make(original))
        return lambda: setattr(keras_random, name, original)
    return _install(f"keras_random_{name}", make, add)
