"""`TorchrunClusterResolver`: the environment ``torchrun`` (and ``torch.distributed.launch``) sets.

Variables: ``RANK`` (this process, 0..WORLD_SIZE-1), ``WORLD_SIZE``,
``MASTER_ADDR`` and ``MASTER_PORT`` (where rank 0 holds the rendezvous), and
optionally ``LOCAL_RANK`` / ``LOCAL_WORLD_SIZE``.

Every process is a ``worker``; ``task_id`` is its rank, worker 0 is the chief
and its address is ``MASTER_ADDR:MASTER_PORT``. torchrun does not tell a
process where the other workers live, so their addresses in the cluster spec
are ``None`` and `describe` names them by rank.

Example:
    >>> r = TorchrunClusterResolver({"RANK": "2", "WORLD_SIZE": "4",
    ...                              "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"})
    >>> r.task_type, r.task_id, r.rank, r.world_size, r.rendezvous_address
    ('worker', 2, 2, 4, ('10.0.0.1', 29500))
    >>> r.cluster_spec().as_dict(), r.describe(3)
    ({'worker': ['10.0.0.1:29500', None, None, None]}, 'worker 3 (rank 3)')
"""
from __future__ import annotations

import os
from typing import Mapping, Optional

from distrib.cluster.address import format_address
from distrib.cluster.env import env_host, env_int, env_optional_int
from distrib.cluster.resolver_base import ResolvedClusterResolver
from distrib.cluster.spec import ClusterSpec

__all__ = ["TorchrunClusterResolver", "TORCHRUN_VARIABLES"]

#: Variables whose presence (all three) selects this resolver in `resolve_cluster`.
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR")


class TorchrunClusterResolver(ResolvedClusterResolver):
    """The cluster described by torchrun's environment variables.

    Args:
        environ: where to read the variables (default ``os.environ``).

    Raises:
        ClusterConfigError: a variable is missing or malformed; the message names it.
    """

    cluster_field = "the torchrun environment"
    _task_type = "worker"

    def __init__(self, environ: Optional[Mapping[str, str]] = None) -> None:
        env = os.environ if environ is None else environ
        world_size = env_int(env, "WORLD_SIZE", minimum=1)
        self._task_id = env_int(env, "RANK", maximum=world_size - 1,
                             context=f"for WORLD_SIZE {world_size}")
        host = env_host(env, "MASTER_ADDR")
        port = env_int(env, "MASTER_PORT", minimum=1, maximum=65535)
        self._local_world_size = env_optional_int(env, "LOCAL_WORLD_SIZE", minimum=1)
        self._local_rank = env_optional_int(
            env, "LOCAL_RANK",
            maximum=None if self._local_world_size is None else self._local_world_size - 1,
            context="" if self._local_world_size is None
            else f"for LOCAL_WORLD_SIZE {self._local_world_size}")
        master = format_address(host, port)
        self._spec = ClusterSpec({"worker": [master] + [None] * (world_size - 1)},
                                 field=self.cluster_field)

    @property
    def local_rank(self) -> Optional[int]:
        """``LOCAL_RANK``: this process's index on its machine, when torchrun set it."""
        return self._local_rank

    @property
    def local_world_size(self) -> Optional[int]:
        """``LOCAL_WORLD_SIZE``: processes on this machine, when torchrun set it."""
        return self._local_world_size
