"""One decision for every worker: the chief looks, everyone gets the chief's answer.

Reading shared state (a directory listing, a file's existence, a checksum)
independently on each worker races with the chief's writes: a late worker
sees a checkpoint the chief has just published, an early one does not, and
the two restore different steps. `chief_decides` runs the look-up on the
chief only and hands its result -- or its error, and the warnings it raised --
to every worker through the strategy's collective.

Under a single process it simply calls the function.

Example (two workers; the chief has just published ``ckpt-1``)::

    >>> chief_decides(role, "latest_checkpoint('/ckpts')", lambda: first_valid(...))
    None                    # on both workers: the chief looked before it published

`job_role` finds the role for free functions such as `latest_checkpoint`,
which no `Checkpoint` is attached to: the open scope's strategy, else the job
strategy this process joined, else None (one process, or a process outside
any multi-worker job: it looks for itself).
"""
from __future__ import annotations

import warnings
from typing import Any, Callable, Optional

from distrib.checkpoint.files.storage import CheckpointWarning
from distrib.comm.errors import first_line
from distrib.errors import DistribError
from distrib.strategies import context
from distrib.strategies.checkpoint_role import CheckpointRole

__all__ = ["chief_decides", "chiefs_path", "job_role", "AgreementError"]


class AgreementError(DistribError, RuntimeError):
    """The chief could not make a decision every worker needed (raised on every worker)."""


def job_role() -> Optional[CheckpointRole]:
    """The `CheckpointRole` of this process's multi-replica job, or None outside one."""
    strategy = context.current_scope_strategy() or context.job_strategy()
    if strategy is None or not strategy.multi_replica:
        return None
    return strategy.checkpoint_role()


def chief_decides(role: Optional[CheckpointRole], what: str, compute: Callable[[], Any]) -> Any:
    """``compute()`` evaluated on the chief only; its JSON-serialisable result on every worker.

    Collective when ``role`` spans several replicas: every worker must call it
    at the same point of the program. Warnings the chief raised while deciding
    are raised again on the other workers, so each one's log says why.

    Raises:
        AgreementError: on every worker, if ``compute`` raised on the chief.
    """
    if role is None or not role.multi_replica or not role.collective.distributed:
        return compute()
    mine: Optional[dict] = None
    if role.is_chief:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                mine = {"value": compute()}
            except Exception as exc:  # reported to every worker below
                mine = {"error": f"{role.who} could not decide {what}: {first_line(exc)[:400]}"}
        mine["warnings"] = [[w.category.__name__, str(w.message)] for w in caught]
        for w in caught:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    views = [v for v in role.collective.all_gather_json(mine) if isinstance(v, dict)]
    if len(views) != 1:
        raise AgreementError(f"{what}: expected one chief's decision, got {len(views)}")
    decision = views[0]
    if not role.is_chief:
        for category, message in decision.get("warnings", []):
            warnings.warn(f"(the chief's view) {message}", _category(category), stacklevel=3)
    if "error" in decision:
        raise AgreementError(decision["error"])
    return decision["value"]


def chiefs_path(role: Optional[CheckpointRole], path: Optional[str], what: str) -> Optional[str]:
    """The path the chief wrote, returned by a save on every worker (collective like the save itself).

    Local replicas are processes: a directory each computed for itself
    (``tempfile.mkdtemp()``) differs between them, and only the chief's holds
    the checkpoint, so every replica gets that one (which every replica can restore).
    """
    return chief_decides(role, f"the path {what} wrote", lambda: path)


def _category(name: str) -> type:
    return CheckpointWarning if name == "CheckpointWarning" else UserWarning
