"""How a task enters an elastic job that is already running: as a replacement, or as a joiner.

A replacement (``DISTRIB_ELASTIC_JOIN=1``, started by the launcher for a lost
task) meets the survivors in the generation they open; a joiner (a task
beyond the job's starting size, or ``DISTRIB_ELASTIC_GROW=1``) asks the chief
to admit it at a step's end. Both then take the newest snapshot and the log
since, and catch up (`distrib.comm.elastic.collective.ElasticCollective.catch_up_from`).

Example (what a replacement of worker 2 prints)::

    distrib: worker 2 joined generation 1 in 0.84s; catching up to collective #57 from a 41233-byte snapshot
"""
from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any, Callable, Tuple

import torch

from distrib import hooks
from distrib.comm.attempt import attempt_namespace
from distrib.comm.elastic.oplog import ReplayMismatchError
from distrib.comm.elastic.payload import decode_payload
from distrib.comm.elastic.recovery import (ElasticRecoveryError, agreed_backend, broadcast_payload, form_generation,
                                           join_generation, leader_of, rebuild_groups)
from distrib.comm.elastic.membership import exit_now, tell_launcher
from distrib.comm.elastic.resize import post_join_request, wait_for_admission
from distrib.comm.errors import first_line
from distrib.comm.health import HealthMonitor
from distrib.comm.rendezvous import store_client

__all__ = ["join_as_replacement", "join_running_job", "open_job_store", "connect_to_store"]

log = logging.getLogger("distrib.elastic")


def join_as_replacement(make: Callable[..., Any], resolver: Any, options: Any, world: int) -> Any:
    """A replacement's connect: meet the survivors in their new generation and take the payload.

    ``make``: the collective's constructor (`ElasticCollective`'s arguments);
    ``world``: the tasks that started the job; the survivors of a job that
    changed size since name the task of each rank in the generation they open
    (`join_generation`).
    """
    task, describe = resolver.rank, resolver.describe
    timeout = options.timeout
    start = time.monotonic()
    deadline = start + timeout
    raw_store, store, monitor = open_job_store(resolver, timeout, deadline)
    collective = make(task, world, None, None, monitor, describe, timeout, store, raw_store=raw_store,
                      backend=agreed_backend(store), cluster_size=resolver.world_size)
    hooks.at_exit(collective.shutdown)
    while True:
        gen, tasks = join_generation(store, task, deadline, describe)
        size = world if tasks is None else len(tasks)
        rank = task if tasks is None else tasks.index(task)
        by_rank = describe if tasks is None else (lambda r, tasks=tasks: describe(tasks[r]))
        members = form_generation(store, gen, rank, size, 0, True, deadline, by_rank)
        leader, _, _ = leader_of(members)
        try:
            control = collective.use_groups(rebuild_groups(store, gen, rank, size, collective.backend, timeout))
            payload = decode_payload(broadcast_payload(b"", leader, rank, control))
            break
        except ReplayMismatchError:
            raise
        except Exception as exc:
            if time.monotonic() >= deadline:
                raise ElasticRecoveryError(f"elastic join of {describe(task)} gave up: {first_line(exc)}") from None
    if payload["error"]:
        raise ElasticRecoveryError(f"elastic join of {describe(task)}: {payload['error']}")
    members_now = list(range(size)) if tasks is None else tasks
    monitor.forget([t for t in range(resolver.world_size) if t not in members_now])
    collective.membership.set_generation(gen, tasks, rank, describe)
    collective.catch_up_from(payload)
    log.warning("distrib: %s joined generation %d in %.2fs; catching up to collective #%d from a %d-byte "
                "snapshot", describe(task), gen, time.monotonic() - start, payload["until"],
                len(payload["snapshot"]))
    return collective


def join_running_job(make: Callable[..., Any], resolver: Any, options: Any) -> Any:
    """A joiner's connect: ask the running job to admit this task, then catch up from the chief."""
    task, world, describe = resolver.rank, resolver.world_size, resolver.describe
    timeout = options.timeout
    start = time.monotonic()
    raw_store, store, monitor = open_job_store(resolver, timeout, start + timeout)
    number = post_join_request(store, task)
    log.warning("distrib: %s asks to join the running job", describe(task))
    admitted = wait_for_admission(store, task, number, start + 4 * timeout, describe(task))
    if admitted is None:
        log.warning("distrib: %s: the job ended before it could join; nothing to do", describe(task))
        monitor.close()
        exit_now(0)
    gen, tasks = admitted
    tell_launcher("joined")  # from now on this task is a member: its failure is the job's
    rank = tasks.index(task)
    collective = make(rank, len(tasks), None, None, monitor, describe, timeout, store, raw_store=raw_store,
                      backend=agreed_backend(store), cluster_size=world, joined_late=True)
    hooks.at_exit(collective.shutdown)
    control = collective.use_groups(rebuild_groups(store, gen, rank, len(tasks), collective.backend, timeout))
    payload = decode_payload(broadcast_payload(b"", 0, rank, control))
    if payload["error"]:
        raise ElasticRecoveryError(f"elastic join of {describe(task)}: {payload['error']}")
    collective.membership.set_members(tasks, rank, gen, describe)
    monitor.forget([t for t in range(world) if t not in tasks])
    collective.catch_up_from(payload)
    log.warning("distrib: %s joined the running job (generation %d, replica %d of %d) in %.2fs; catching up "
                "to collective #%d from a %d-byte snapshot", describe(task), gen, rank, len(tasks),
                time.monotonic() - start, payload["until"], len(payload["snapshot"]))
    return collective


def open_job_store(resolver: Any, timeout: float, deadline: float) -> Tuple[Any, Any, HealthMonitor]:
    """A replacement's or joiner's ``(raw store, attempt's store, health monitor)`` at the chief's address."""
    host, port = resolver.rendezvous_address
    task, world, describe = resolver.rank, resolver.world_size, resolver.describe
    raw_store = connect_to_store(host, port, world, deadline, describe(task))
    raw_store.set_timeout(timedelta(seconds=timeout))
    store = torch.distributed.PrefixStore(attempt_namespace(), raw_store)
    monitor = HealthMonitor(host, port, task, world, timeout, describe, namespace=attempt_namespace())
    return raw_store, store, monitor


def connect_to_store(host: str, port: int, world: int, deadline: float, me: str) -> Any:
    """A client of the chief's store, retried until ``deadline``."""
    while True:
        try:
            return store_client(host, port, world, max(0.5, min(10.0, deadline - time.monotonic())))
        except Exception as exc:
            if time.monotonic() >= deadline:
                raise ElasticRecoveryError(f"elastic join: {me} cannot reach the chief's store at "
                                           f"{host}:{port}: {first_line(exc)}") from None
        time.sleep(0.1)  # poll: the chief's store may be busy
