"""The parameter server: `ParameterServerStrategy`, its `ClusterCoordinator` and what serves them.

Layout (one concern a module):

- ``strategy``: `ParameterServerStrategy`, the role each task plays (chief, worker, ps).
- ``coordinator``, ``dispatch``, ``values``: scheduling closures on workers and their results.
- ``variables``, ``partitioners``, ``server``: variables that live on the ps tasks.
- ``worker``: what a worker task runs.
- ``exporter``: how functions and modules travel to workers (by value, or by registered name).
- ``importer``: the worker's side: definitions installed once, references resolved, pickles refused where asked.
- ``registered``: `remote_function`, the registry and the closed forms of ``DISTRIB_PS_FUNCTIONS=registered``.
- ``transport``, ``wire``, ``auth``, ``runtime``, ``cluster``: the authenticated gRPC channel.
- ``errors``: `UnavailableError`, `CancelledError` and the channel's errors.
"""
from distrib.strategies.parameter_server.strategy import ParameterServerStrategy

__all__ = ["ParameterServerStrategy"]
