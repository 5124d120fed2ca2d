"""Which functions a task of a parameter-server job serves on its channel, by role.

A handler is called by its name, ``module:qualname`` (`runtime.handler_name`);
nothing outside this table runs for a caller, whatever name a call carries.

Example:
    >>> sorted(name.rsplit(":", 1)[1] for name in role_handlers("chief"))
    ['ping']
"""
from __future__ import annotations

from typing import Callable, Dict, List

from distrib.strategies.parameter_server import server as ps_server, worker as ps_worker
from distrib.strategies.parameter_server.runtime import handler_name, ping, request_stop

__all__ = ["role_handlers"]


def role_handlers(role: str) -> Dict[str, Callable]:
    """The handlers of ``role`` (``"chief"``, ``"worker"``, ``"ps"``, ``"evaluator"``), keyed by name."""
    fns: List[Callable] = [ping]
    if role == "worker":
        fns += [request_stop, ps_worker.run_closure]
    elif role == "ps":
        fns += [request_stop, ps_server.create_variables, ps_server.write_variables,
                ps_server.read_variables, ps_server.create_optimizer, ps_server.apply_gradients,
                ps_server.inventory, ps_server.read_optimizer_state, ps_server.write_optimizer_state]
    return {handler_name(f): f for f in fns}
