"""`JitForward`: ``compile(jit_compile=True)`` — the step's forward pass and loss, compiled by ``torch.compile``.

Keras compiles its train step with XLA; distrib compiles the part of the
default `train_step`/`test_step` that is one pure function of the batch:
the module's forward pass (under the policy's autocast) and the compiled
loss, regularisation included. ``torch.compile`` traces it into one graph
(``fullgraph=True``) whose backward AOTAutograd compiles too; the gradient
all-reduce (parameter hooks), the optimizer step and the metric updates stay
as they are, so the step computes what the eager step computes (to float
rounding: a compiled graph may fuse and reorder floating-point operations).

Where the function cannot be one graph (a data-dependent branch, a host read
or a print in ``forward``, a module dynamo cannot trace), nothing has run yet
when ``torch.compile`` says so: the step runs eagerly instead, and stays
eager for this compile, after one warning line naming the reason. A batch the
module cannot take fails while it is traced too: the eager step then raises
the error it always raised, and nothing is said about compiling.

Compiling costs seconds at the first step (and at each new batch shape,
such as a short last batch); on a GPU the compiled graph launches fewer
kernels per step, on a CPU a tiny model can get slower (the benchmark in
``bench/bench_step_cost.py`` measures both).

Example:
    >>> model.compile(optimizer="adam", loss="mse", jit_compile=True)
    >>> model.fit(x, y)        # the first step compiles; later ones run the graph
    >>> model.loop.jit.compiled_steps > 0
    True
"""
from __future__ import annotations

import os
import warnings
from typing import Any, Callable, Optional, Tuple

import torch

from distrib.errors import first_line

__all__ = ["JitForward", "resolve_jit_compile", "BACKEND_ENV"]

#: The ``torch.compile`` backend (default ``inductor``); ``aot_eager`` traces and runs the same graph
#: without generating code (fast to compile: how the tests check the tracing, and how to tell whether
#: a difference comes from inductor's code).
BACKEND_ENV = "DISTRIB_JIT_BACKEND"


def resolve_jit_compile(jit_compile: Any) -> bool:
    """``compile(jit_compile=...)`` as a bool: True, False or ``"auto"`` (eager, as Keras's torch backend)."""
    if jit_compile == "auto" or jit_compile is None:
        return False
    if isinstance(jit_compile, bool):
        return jit_compile
    raise ValueError(f"compile(jit_compile=...) must be True, False or 'auto', got {jit_compile!r}")


def _is_compile_failure(error: BaseException) -> bool:
    """An error of ``torch.compile`` itself (tracing or compiling), raised before the graph ran."""
    module = type(error).__module__ or ""
    return module.startswith(("torch._dynamo", "torch._inductor"))


class JitForward:
    """The compiled forward-and-loss of one compiled model (see the module docstring).

    Args:
        name: the model's name, for the fallback warning.
        forward_and_loss: ``fn(x, y, sample_weight, global_batch_size) -> (y_pred, loss)``, the eager
            function it compiles.
    """

    def __init__(self, name: str, forward_and_loss: Callable[..., Tuple[Any, torch.Tensor]]) -> None:
        self.name = name
        self._eager = forward_and_loss
        self._compiled = torch.compile(forward_and_loss, fullgraph=True,
                                       backend=os.environ.get(BACKEND_ENV) or "inductor")
        #: Why the steps run eagerly, or None while they run compiled.
        self.disabled: Optional[str] = None
        #: Steps that ran the compiled function.
        self.compiled_steps = 0

    def __call__(self, x: Any, y: Any, sample_weight: Any, global_batch_size: int) -> Tuple[Any, torch.Tensor]:
        if self.disabled is not None:
            return self._eager(x, y, sample_weight, global_batch_size)
        try:
            out = self._compiled(x, y, sample_weight, global_batch_size)
        except Exception as error:  # noqa: BLE001 - only torch.compile's own errors fall back
            if not _is_compile_failure(error):
                raise
            # Eager first: where the input itself is wrong, its error line is the one to see.
            out = self._eager(x, y, sample_weight, global_batch_size)
            self.disabled = first_line(error, skip=_COMPILE_BOILERPLATE, typed=True, limit=240)
            warnings.warn(f"compile(jit_compile=True): {self.name} runs eagerly, torch.compile cannot "
                          f"make its forward pass and loss one graph: {self.disabled}", stacklevel=3)
            return out
        self.compiled_steps += 1
        return out


#: Lines of a torch.compile error that say where, not what.
_COMPILE_BOILERPLATE = ("from user code", "File ", "Set TORCH", "You can suppress")
