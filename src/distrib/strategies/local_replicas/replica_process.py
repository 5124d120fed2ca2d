"""A local-replica process, and what code outside every scope does in it.

TensorFlow's ``MirroredStrategy`` drives all of a machine's devices from one
process. distrib runs one *process* per replica instead, so a program using
``MirroredStrategy(["cpu:0", "cpu:1"])`` runs, whole, in two processes (see
`distrib.strategies.local_replicas.connect`; under ``distrib launch`` each launched
task is adopted as one of them). Code inside the Mirrored scope is
replicated: each process computes its replica. Code *outside* every scope
ran once in TF's single process, on the default strategy (or on a
`OneDeviceStrategy`). To give that code TF's meaning, once a
`MirroredStrategy` with several replica processes exists, each of those
processes is marked as a *local-replica process* of the program:

* a model that is not replicated (created outside any scope, loaded with
  ``load_model`` outside a scope, or under a `OneDeviceStrategy`) trains in
  every local-replica process, identically: the same code on the same data
  from the same seeds gives the same weights in each;
* its side effects happen once: the default and one-device strategies are
  the chief only in local replica 0, so files (``model.save``, checkpoints,
  callbacks' logs) are written by replica 0 alone (the others write to
  private temporary paths, as every non-chief does) and progress is printed
  by replica 0 alone;
* the model's weights are compared when such training starts (one
  fingerprint per process): processes that would train differently (seeded
  from the process id, say) stop with `DivergedReplicasError`;
* a save by such a strategy ends together in every replica process (a
  barrier on the job's collective), so a ``load_model`` right after it reads
  the complete file in every process.

``MultiWorkerMirroredStrategy`` never marks its processes: there each task
is a real TF worker, and training a model outside any scope stays refused.

Example (2 local CPU replicas; both processes run every line):
    >>> strategy = distrib.MirroredStrategy(["cpu:0", "cpu:1"])
    >>> model = distrib.Model(torch.nn.Linear(4, 1))     # outside any scope: default strategy
    >>> model.compile(optimizer="sgd", loss="mse")
    >>> model.fit(x, y)               # trains in both processes, identically; replica 0 prints
    >>> model.save("/tmp/m.keras")    # written by replica 0; both continue when it is complete
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Optional

import torch

from distrib.errors import DistribError

__all__ = ["LocalReplicaProcess", "DivergedReplicasError", "mark", "current", "writes_side_effects", "settle",
           "check_same_weights"]


class DivergedReplicasError(DistribError, RuntimeError):
    """Unreplicated code would run differently in the local replica processes (raised in each)."""


@dataclass(frozen=True)
class LocalReplicaProcess:
    """This process's place among the local replica processes of one program.

    Attributes:
        index: its replica id (0 performs the side effects of unreplicated code).
        count: how many replica processes run the program.
        collective: the job's collective (all of those processes).
    """

    index: int
    count: int
    collective: Any


_current: Optional[LocalReplicaProcess] = None


def mark(index: int, count: int, collective: Any) -> None:
    """Record that this process is local replica ``index`` of ``count`` (a `MirroredStrategy` does this)."""
    global _current
    if count > 1:
        _current = LocalReplicaProcess(index=index, count=count, collective=collective)


def current() -> Optional[LocalReplicaProcess]:
    """This process's `LocalReplicaProcess`, or None (a plain process, or a real multi-worker task)."""
    if _current is not None and _current.collective.closed:
        return None
    return _current


def writes_side_effects() -> bool:
    """True unless this is a local-replica process other than replica 0."""
    here = current()
    return here is None or here.index == 0


def settle() -> None:
    """In a local-replica process, wait until every replica process gets here (no-op otherwise)."""
    here = current()
    if here is not None:
        here.collective.barrier()


def check_same_weights(module: torch.nn.Module, what: str) -> None:
    """In a local-replica process, raise `DivergedReplicasError` unless ``module`` is the same in every one.

    A collective: every local-replica process calls it at the same point (the
    same code runs in each).
    """
    here = current()
    if here is None:
        return
    digest = hashlib.sha256()
    for name, tensor in module.state_dict().items():
        if isinstance(tensor, torch.nn.parameter.UninitializedParameter):
            continue
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    prints = here.collective.all_gather_json(digest.hexdigest())
    odd = next((i for i, p in enumerate(prints) if p != prints[0]), None)
    if odd is not None:
        raise DivergedReplicasError(
            f"{what}: the model (created outside any strategy scope) has different weights in local replica "
            f"processes 0 and {odd}, so they would train differently where TF trains once; seed torch the same "
            "way in every process before creating it (torch.manual_seed at the top of the program), or create "
            "it inside `with strategy.scope():`")
