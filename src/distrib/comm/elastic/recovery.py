"""The recovery protocol: survivors and replacements meet in a new generation.

Everything goes through the job's (authenticated) store, under
``distrib/elastic/`` in the attempt's namespace:

* ``open``: the generation being formed (survivors set it when they start recovering);
* ``g<N>/member/<rank>``: ``{"seq": <collectives completed>, "joining": bool}``,
  posted by each survivor (``joining`` false) and each replacement (true);
* ``g<N>/pg/...``: the new process groups' own keys.

A generation forms once every rank has posted; the *leader* is the survivor
that completed the most collectives (lowest rank on ties). Every member then
destroys its old process groups and builds new ones over ``g<N>/pg``, and the
leader broadcasts the catch-up payload (`distrib.comm.elastic.payload`). If anything
fails while the generation forms (another task dies, a replacement dies), the
members start generation ``N + 1``; after ``timeout`` seconds in all they give
up with `ElasticRecoveryError`.

Example (3 workers, worker 2 killed; worker 0 completed 57 collectives, worker 1 56)::

    open = 1; g1/member/0 = {"seq": 57, "joining": false}; g1/member/1 = {"seq": 56, ...}
    (the launcher starts worker 2 again) g1/member/2 = {"seq": 0, "joining": true}
    leader: worker 0; worker 1 takes result #56 from the payload, worker 2 catches up to #57
"""
from __future__ import annotations

import json
import logging
import time
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from distrib import hooks
from distrib.comm.errors import DistribCommError, first_line
from distrib.comm.process_group import init_process_group

__all__ = ["ElasticRecoveryError", "Member", "form_generation", "rebuild_groups", "broadcast_payload",
           "join_generation", "agreed_backend"]

log = logging.getLogger("distrib.elastic")
_POLL = 0.05

Member = Dict[str, Any]


class ElasticRecoveryError(DistribCommError):
    """Survivors could not form a new generation (the chief is gone, no replacement came in time, ...)."""


def _store(store: Any) -> Any:
    return dist.PrefixStore("distrib/elastic", store)


def form_generation(store: Any, gen: int, rank: int, world: int, seq: int, joining: bool, deadline: float,
                    describe: Callable[[int], str], tasks: Optional[List[int]] = None) -> Dict[int, Member]:
    """Post this task as a member of generation ``gen`` and wait for every rank; returns the members.

    ``tasks``: a survivor of a resized job names the task of each rank, so that a replacement
    (which knows only its task) finds its rank (`join_generation`).
    """
    es = _store(store)
    try:
        es.set(f"g{gen}/member/{rank}", json.dumps({"seq": int(seq), "joining": bool(joining)}))
        if not joining:
            if tasks is not None:
                # before "open": a replacement reads the ranks' tasks once the generation is open
                es.set(f"g{gen}/tasks", json.dumps([int(t) for t in tasks]))
            es.set("open", str(gen))
        keys = [f"g{gen}/member/{r}" for r in range(world)]
        while True:
            missing = [r for r, k in enumerate(keys) if not es.check([k])]
            if not missing:
                break
            if time.monotonic() >= deadline:
                names = ", ".join(describe(r) for r in missing)
                raise ElasticRecoveryError(
                    f"elastic recovery (generation {gen}): {names} neither answered nor was replaced in "
                    f"time; start it again (distrib launch --elastic does) or restart the job from its "
                    f"last checkpoint")
            time.sleep(_POLL)  # poll: the store has no wait-for-any primitive
        members = {r: _member(es.get(k), describe(r)) for r, k in enumerate(keys)}
    except ElasticRecoveryError:
        raise
    except Exception as exc:  # the store lives in the chief: it is gone
        raise ElasticRecoveryError(
            f"elastic recovery (generation {gen}) on {describe(rank)}: the chief's store is unreachable "
            f"({first_line(exc)}): the chief {describe(0)} is gone, so the job restarts from its last "
            f"checkpoint") from None
    return members


def _member(raw: bytes, who: str) -> Member:
    try:
        value = json.loads(raw.decode())
        if isinstance(value, dict) and isinstance(value.get("seq"), int) and isinstance(value.get("joining"), bool):
            return value
    except (UnicodeDecodeError, ValueError):
        pass
    raise ElasticRecoveryError(f"elastic recovery: the entry of {who} in the store is malformed")


def leader_of(members: Dict[int, Member]) -> Tuple[int, int, int]:
    """``(leader rank, its seq, the smallest survivor seq)``; raises if no survivor is left."""
    alive = {r: m["seq"] for r, m in members.items() if not m["joining"]}
    if not alive:
        raise ElasticRecoveryError("elastic recovery: no survivor holds the training state")
    leader = max(alive, key=lambda r: (alive[r], -r))
    return leader, alive[leader], min(alive.values())


def agreed_backend(store: Any, backend: Optional[str] = None) -> str:
    """The data groups' backend of this job: the chief publishes it (``backend``), the others read it.

    The tasks agree on it at start-up (gloo where two tasks share a GPU, see
    `distrib.comm.gpu_sharing`); a replacement or joiner must build its groups
    with the same one, whatever its own device would suggest.
    """
    es = _store(store)
    if backend is not None:
        es.set("backend", backend)
        return backend
    value = es.get("backend").decode()
    if value not in ("gloo", "nccl", "mpi", "ucc", "xccl"):
        raise ElasticRecoveryError(f"elastic join: the job's backend in the store ({value[:40]!r}) is not one distrib "
                                   f"uses")
    return value


def rebuild_groups(store: Any, gen: int, rank: int, world: int, backend: str, timeout: float) -> Tuple[Any, Any]:
    """Destroy this process's groups and build generation ``gen``'s: ``(data group, control group)``."""
    if dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # a group whose peer died may refuse a clean shutdown; it is dropped anyway
            pass
    pg_timeout = timedelta(seconds=timeout)
    pg_store = dist.PrefixStore(f"g{gen}/pg", _store(store))
    with hooks.excepthook_kept():  # not one more "[rank<N>]:" prefixer per generation
        init_process_group(backend, None, store=pg_store, rank=rank, world_size=world, timeout=pg_timeout)
    return dist.group.WORLD, dist.new_group(backend="gloo", timeout=pg_timeout)


def broadcast_payload(data: bytes, src: int, rank: int, control: Any) -> bytes:
    """``src``'s bytes on every member, over the new control group (not logged)."""
    size = torch.tensor([len(data) if rank == src else 0], dtype=torch.int64)
    dist.broadcast(size, src, group=control)
    buf = torch.zeros(int(size.item()), dtype=torch.uint8)
    if rank == src and len(data):
        buf.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    dist.broadcast(buf, src, group=control)
    return bytes(buf.numpy().tobytes())


def join_generation(store: Any, task: int, deadline: float,
                    describe: Callable[[int], str]) -> Tuple[int, Optional[List[int]]]:
    """A replacement: wait until survivors open a generation that still lacks ``task``.

    Returns ``(generation, the task of each rank)``; the tasks are None when the job
    never changed size (rank ``r`` is task ``r``).
    """
    es = _store(store)
    announced = False
    while time.monotonic() < deadline:
        if es.check(["open"]):
            gen = int(es.get("open").decode())
            tasks = _tasks_of(es, gen)
            if tasks is None or task in tasks:
                rank = task if tasks is None else tasks.index(task)
                if not es.check([f"g{gen}/member/{rank}"]):
                    return gen, tasks
        if not announced:
            log.warning("distrib: %s (replacement) waiting for the survivors to open a recovery", describe(task))
            announced = True
        time.sleep(_POLL)  # poll: survivors open the generation when they notice the loss
    raise ElasticRecoveryError(
        f"elastic join: {describe(task)} found no recovery to join in time (no survivor noticed a lost task)")


def _tasks_of(es: Any, gen: int) -> Optional[List[int]]:
    if not es.check([f"g{gen}/tasks"]):
        return None
    try:
        tasks = json.loads(es.get(f"g{gen}/tasks").decode())
        if isinstance(tasks, list) and tasks and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0
                                                     for t in tasks) and len(set(tasks)) == len(tasks):
            return tasks
    except (UnicodeDecodeError, ValueError):
        pass
    raise ElasticRecoveryError(f"elastic recovery: the task list of generation {gen} in the store is malformed")
