"""`SimpleClusterResolver`: a cluster given explicitly in code.

Example:
    >>> r = SimpleClusterResolver({"worker": ["localhost:12345", "localhost:23456"]},
    ...                           task_type="worker", task_id=0)
    >>> r.is_chief, r.world_size
    (True, 2)
    >>> SimpleClusterResolver(ClusterSpec({})).world_size      # single process
    1
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Union

from distrib.cluster.errors import TASK_TYPES, ClusterConfigError, quoted_list, show
from distrib.cluster.resolver_base import ResolvedClusterResolver
from distrib.cluster.spec import ClusterSpec

__all__ = ["SimpleClusterResolver"]


class SimpleClusterResolver(ResolvedClusterResolver):
    """A resolver over an explicit `ClusterSpec` and task.

    Args:
        cluster_spec: a `ClusterSpec` or a mapping accepted by it.
        task_type: this process's job; ``None`` (with ``task_id`` ``None``)
            only for an empty, single-process cluster.
        task_id: this process's index in its job.
        rpc_layer: recorded for TensorFlow compatibility.

    Raises:
        ClusterConfigError: the task is not in the cluster, or only one of
            ``task_type``/``task_id`` is given.
    """

    cluster_field = "cluster_spec"

    def __init__(self, cluster_spec: Union[ClusterSpec, Mapping[str, Any], None] = None,
                 task_type: Optional[str] = None, task_id: Optional[int] = None,
                 rpc_layer: Optional[str] = None) -> None:
        self._spec = ClusterSpec(cluster_spec, field="cluster_spec")
        if task_type is not None and task_type not in TASK_TYPES:
            raise ClusterConfigError(
                f"task_type: {show(task_type)} is not a task type; expected one of "
                f"{quoted_list(TASK_TYPES)}")
        if task_id is not None and (isinstance(task_id, bool) or not isinstance(task_id, int)):
            raise ClusterConfigError(f"task_id: expected an integer, got {show(task_id)}")
        self._task_type, self._task_id, self._rpc_layer = task_type, task_id, rpc_layer
        self._layout  # noqa: B018 - check the task against the cluster now
