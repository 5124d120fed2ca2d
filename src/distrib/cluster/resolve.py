"""`resolve_cluster`: pick the resolver the environment calls for.

Order: a non-empty ``TF_CONFIG``; else torchrun's ``RANK`` + ``WORLD_SIZE`` +
``MASTER_ADDR``; else a SLURM step of more than one task (``SLURM_PROCID``
and ``SLURM_NTASKS`` > 1); else a single-process run -- with an
`EmptyTFConfigWarning` when ``TF_CONFIG`` is set but blank or ``{}``, since
that is usually a launcher or shell that lost the real value.

Example:
    >>> resolve_cluster({}).world_size
    1
    >>> type(resolve_cluster({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h0",
    ...                       "MASTER_PORT": "29500"})).__name__
    'TorchrunClusterResolver'
"""
from __future__ import annotations

import os
from typing import Mapping, Optional

from distrib.cluster.resolver_base import ClusterResolver
from distrib.cluster.simple import SimpleClusterResolver
from distrib.cluster.slurm import SlurmClusterResolver, slurm_num_tasks_variable
from distrib.cluster.spec import ClusterSpec
from distrib.cluster.tf_config import TFConfigClusterResolver, tf_config_is_empty, warn_single_process
from distrib.cluster.torchrun import TORCHRUN_VARIABLES, TorchrunClusterResolver

__all__ = ["resolve_cluster"]


def resolve_cluster(environ: Optional[Mapping[str, str]] = None) -> ClusterResolver:
    """Returns the resolver for this process's environment (default ``os.environ``).

    Raises:
        ClusterConfigError: the chosen description is malformed. A malformed
            ``TF_CONFIG`` is reported, never skipped in favour of another source.
    """
    env = os.environ if environ is None else environ
    if not tf_config_is_empty(env):
        return TFConfigClusterResolver(environ=env)
    if all(name in env for name in TORCHRUN_VARIABLES):
        return TorchrunClusterResolver(env)
    if "SLURM_PROCID" in env and _slurm_has_several_tasks(env):
        return SlurmClusterResolver(env)
    if env.get("TF_CONFIG") is not None:  # set, but blank or {}: usually a launcher that lost the value
        warn_single_process(f"TF_CONFIG is set but empty ({env['TF_CONFIG'][:20]!r})")
    return SimpleClusterResolver(ClusterSpec({}))


def _slurm_has_several_tasks(env: Mapping[str, str]) -> bool:
    text = env.get(slurm_num_tasks_variable(env))
    if text is None:
        return False
    try:
        return int(text) > 1
    except ValueError:
        return True  # malformed: let SlurmClusterResolver say what is wrong
