"""`TFConfigClusterResolver`: reads the ``TF_CONFIG`` environment variable as TensorFlow does.

``TF_CONFIG`` is a JSON object::

    {"cluster": {"chief": ["h0:2222"], "worker": ["h1:2222", "h2:2222"], "ps": ["h3:2222"]},
     "task": {"type": "worker", "index": 1},
     "rpc_layer": "grpc",            # optional
     "environment": "cloud"}         # optional

Absent, blank or ``{}`` means a single-process run (no task, empty cluster),
and so does ``{"cluster": {}}``, as in TensorFlow. TensorFlow says nothing
about it; distrib warns (`EmptyTFConfigWarning`) when ``TF_CONFIG`` is *set*
but blank or empty, because that is usually a launcher or a shell that lost
the real value, and the job would otherwise quietly train as N unrelated
single processes. A cluster with only an ``evaluator`` job also warns: it has
no chief or worker to train, so the evaluator runs alone (TensorFlow runs an
evaluator's strategy locally too). Everything else is checked strictly and each
mistake gets one line naming the field, e.g.
``TF_CONFIG['task']['index']: 2 is out of range for job 'worker' with 2 tasks (valid 0..1)``.
Keys TensorFlow tools add (``"job"``, ``"task": {"trial": ...}``) are ignored, and so
is any other unknown key -- unless it is close to a key TF_CONFIG knows, which
is then named: ``TF_CONFIG['task']: unknown key 'tpye' (did you mean 'type'?)``.

As in TensorFlow, an ``evaluator`` task may run beside a cluster that does not
list an ``evaluator`` job (its index must then be 0).

Example:
    >>> r = TFConfigClusterResolver('{"cluster": {"worker": ["localhost:12345", '
    ...     '"localhost:23456"]}, "task": {"type": "worker", "index": 1}}')
    >>> r.task_type, r.task_id, r.is_chief, r.chief_address
    ('worker', 1, False, 'localhost:12345')
"""
from __future__ import annotations

import json
import os
import re
import warnings
from typing import Any, Dict, Mapping, Optional, Union

from distrib.cluster.errors import (
    TASK_TYPES, ClusterConfigError, did_you_mean, kind_of, quoted_list, show)
from distrib.cluster.resolver_base import ResolvedClusterResolver
from distrib.cluster.spec import ClusterSpec

__all__ = ["TFConfigClusterResolver", "load_tf_config", "tf_config_is_empty", "EmptyTFConfigWarning",
           "RPC_LAYERS", "warn_single_process"]


class EmptyTFConfigWarning(UserWarning):
    """``TF_CONFIG`` is set but describes no training cluster: the process runs alone."""

_TOP_KEYS = ("cluster", "task", "rpc_layer", "environment")
#: The ``rpc_layer`` values TensorFlow's servers accept (``""`` means none, as in TF).
RPC_LAYERS = ("grpc", "grpc+verbs", "grpc+mpi", "grpc+gdr", "grpc+loas", "")
_TASK_KEYS = ("type", "index")
_SHAPE = '{"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": 0}}'
_CLUSTER = "TF_CONFIG['cluster']"
_TASK = "TF_CONFIG['task']"


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ClusterConfigError(
                f"TF_CONFIG: key {key!r} appears twice in one JSON object; keep one")
        out[key] = value
    return out


#: How deeply TF_CONFIG may nest arrays and objects (a real one nests 3 deep). Checked before
#: decoding, so the error never depends on the interpreter's recursion limit.
MAX_NESTING = 64
# A JSON string (its brackets are not nesting; an unterminated one runs to the end) or a bracket.
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]')


def _nesting_depth(text: str) -> int:
    """How deeply ``text`` nests JSON arrays and objects, counted without recursion.

    Example:
        >>> _nesting_depth('{"cluster": {"worker": ["h:1"]}, "x": "[[["}')
        3
    """
    depth = deepest = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        first = match.group()[0]
        if first in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif first in "]}":
            depth -= 1
    return deepest


def _too_deep(text: str) -> bool:
    return _nesting_depth(text) > MAX_NESTING


def _decode(text: str) -> Any:
    if _too_deep(text):
        raise ClusterConfigError(
            f"TF_CONFIG: nested too deeply to be a cluster description ({len(text)} characters, "
            f"more than {MAX_NESTING} levels of arrays or objects); expected {_SHAPE}")
    try:
        return json.loads(text, object_pairs_hook=_reject_duplicate_keys)
    except json.JSONDecodeError as err:
        start = max(err.pos - 25, 0)
        near = text[start:err.pos] + " <here> " + text[err.pos:err.pos + 25]
        near = " ".join(near.split())
        raise ClusterConfigError(
            f"TF_CONFIG: not valid JSON: {err.msg} at line {err.lineno} column {err.colno} "
            f"(near: {near!r}); expected {_SHAPE}") from None


def load_tf_config(tf_config: Union[str, Mapping[str, Any], None] = None,
                   environ: Optional[Mapping[str, str]] = None) -> dict[str, Any]:
    """Returns TF_CONFIG as a dict (``{}`` when absent or blank), checking only that it is an object.

    Args:
        tf_config: JSON text or an already decoded mapping; when ``None``,
            ``environ["TF_CONFIG"]`` is read (``environ`` defaults to ``os.environ``).
    """
    if tf_config is None:
        tf_config = (os.environ if environ is None else environ).get("TF_CONFIG")
    if tf_config is None:
        return {}
    if isinstance(tf_config, str):
        if not tf_config.strip():
            return {}
        tf_config = _decode(tf_config)
    if not isinstance(tf_config, Mapping):
        raise ClusterConfigError(
            f"TF_CONFIG: expected a JSON object like {_SHAPE}, got {kind_of(tf_config)} "
            f"{show(tf_config)}")
    return dict(tf_config)


def tf_config_is_empty(environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether TF_CONFIG is absent, blank or ``{}`` (malformed text is *not* empty)."""
    text = (os.environ if environ is None else environ).get("TF_CONFIG")
    if text is None or not text.strip():
        return True
    if _too_deep(text):  # malformed: the resolver names the problem
        return False
    try:
        return bool(json.loads(text) == {})
    except ValueError:
        return False


class TFConfigClusterResolver(ResolvedClusterResolver):
    """The cluster described by ``TF_CONFIG``.

    Args:
        tf_config: JSON text or a decoded dict to use instead of the environment.
        environ: where to read ``TF_CONFIG`` (default ``os.environ``).

    Raises:
        ClusterConfigError: TF_CONFIG is malformed; the message names the field.
    """

    cluster_field = _CLUSTER

    def __init__(self, tf_config: Union[str, Mapping[str, Any], None] = None,
                 environ: Optional[Mapping[str, str]] = None) -> None:
        config = load_tf_config(tf_config, environ)
        if tf_config is None and not config and (os.environ if environ is None else environ).get(
                "TF_CONFIG") is not None:
            _warn_alone("TF_CONFIG is set but empty")
        self._rpc_layer = _parse_rpc_layer(config)
        self._environment = _optional_str(config, "environment") or ""
        if not config:
            self._spec, self._task_type, self._task_id = ClusterSpec(), None, None
            return
        _check_keys(config, _TOP_KEYS, "TF_CONFIG")
        if "cluster" not in config:
            raise ClusterConfigError(
                f"{_CLUSTER}: missing; TF_CONFIG must look like {_SHAPE} (or be empty for a "
                f"single-process run)")
        self._spec = _parse_spec(config["cluster"])
        self._task_type, self._task_id = _parse_task(config.get("task"), self._spec)
        if not self._spec and tf_config is None:
            _warn_alone("TF_CONFIG['cluster'] is empty")
        self._layout  # noqa: B018 - derive (and so check) everything now, not at first use
        if self._spec and not ({"chief", "worker"} & set(self._spec.jobs)):
            _warn_alone(f"TF_CONFIG['cluster'] has no 'chief' or 'worker' job (jobs: "
                        f"{quoted_list(self._spec.jobs)}), so nothing trains", evaluator=True)

    @property
    def environment(self) -> str:
        return self._environment


def warn_single_process(what: str) -> None:
    """Warn (`EmptyTFConfigWarning`) that ``what`` makes this process run alone, not in a cluster."""
    _warn_alone(what)


def _warn_alone(what: str, evaluator: bool = False) -> None:
    fix = ("add the training tasks to TF_CONFIG['cluster'] (e.g. \"worker\": [\"host:port\", ...])"
           if evaluator else
           'unset TF_CONFIG for a single-process run, or give the whole cluster: ' + _SHAPE)
    # One line, as distrib's other messages: a plain warnings.warn also prints the source line that
    # warned (a line of distrib, of no use to the user). Line 0 of "distrib" has no source to echo.
    warnings.warn_explicit(f"{what}: this process runs as a single process, not part of a cluster; {fix}",
                           EmptyTFConfigWarning, "distrib", 0, module="distrib", registry=_ONCE)


#: The warnings registry of `_warn_alone` (each distinct text is shown once per process under the default filter).
_ONCE: Dict[Any, Any] = {}


def _check_keys(mapping: Mapping[str, Any], known: tuple[str, ...], where: str) -> None:
    """Name an unknown key that is a near miss of a known one (others are ignored, as in TF)."""
    for key in mapping:
        if key in known:
            continue
        hint = did_you_mean(key, known)
        if hint:
            raise ClusterConfigError(f"{where}: unknown key {key[:60]!r}{hint}")


def _optional_str(config: Mapping[str, Any], key: str) -> Optional[str]:
    value = config.get(key)
    if value is not None and not isinstance(value, str):
        raise ClusterConfigError(
            f"TF_CONFIG[{key!r}]: expected a string, got {kind_of(value)} {show(value)}")
    return value


def _parse_rpc_layer(config: Mapping[str, Any]) -> Optional[str]:
    """``rpc_layer`` if it is one TensorFlow knows (or absent); a typo such as ``"grcp"`` is an error."""
    layer = _optional_str(config, "rpc_layer")
    if layer is None or layer in RPC_LAYERS:
        return layer
    raise ClusterConfigError(
        f"TF_CONFIG['rpc_layer']: {layer[:60]!r} is not an RPC layer TensorFlow knows; expected one of "
        f"{quoted_list(RPC_LAYERS)}{did_you_mean(layer, RPC_LAYERS)} (distrib's own traffic goes over "
        f"torch.distributed whatever it says)")


def _parse_spec(cluster: Any) -> ClusterSpec:
    if not isinstance(cluster, Mapping):
        raise ClusterConfigError(
            f"{_CLUSTER}: expected an object mapping job names to address lists, like "
            f'{{"worker": ["host:port", ...]}}, got {kind_of(cluster)} {show(cluster)}')
    for job, tasks in cluster.items():
        entries = tasks.items() if isinstance(tasks, Mapping) else \
            enumerate(tasks) if isinstance(tasks, (list, tuple)) else ()
        for index, address in entries:
            if address is None:
                raise ClusterConfigError(
                    f"{_CLUSTER}[{job!r}][{index}]: expected a 'host:port' string, got null")
    return ClusterSpec(cluster, field=_CLUSTER)


def _parse_task(task: Any, spec: ClusterSpec) -> tuple[Optional[str], Optional[int]]:
    if task is None:
        if spec:
            raise ClusterConfigError(
                f"{_TASK}: missing; every process of a cluster needs its own "
                f'{{"type": ..., "index": ...}} (cluster jobs: {quoted_list(spec.jobs)})')
        return None, None
    if not isinstance(task, Mapping):
        raise ClusterConfigError(
            f'{_TASK}: expected an object like {{"type": "worker", "index": 0}}, got '
            f"{kind_of(task)} {show(task)}")
    if not task and not spec:
        return None, None
    _check_keys(task, _TASK_KEYS, _TASK)
    task_type = _parse_type(task, spec)
    return task_type, _parse_index(task, task_type, spec)


def _parse_type(task: Mapping[str, Any], spec: ClusterSpec) -> str:
    field = f"{_TASK}['type']"
    if "type" not in task:
        raise ClusterConfigError(
            f"{field}: missing; expected one of {quoted_list(TASK_TYPES)}")
    task_type = task["type"]
    if not isinstance(task_type, str):
        raise ClusterConfigError(
            f"{field}: expected a string, one of {quoted_list(TASK_TYPES)}; got "
            f"{kind_of(task_type)} {show(task_type)}")
    if task_type not in TASK_TYPES:
        raise ClusterConfigError(
            f"{field}: {task_type!r} is not a task type; expected one of "
            f"{quoted_list(TASK_TYPES)}{did_you_mean(task_type, TASK_TYPES)}")
    if task_type not in spec.jobs and not (task_type == "evaluator" and spec):
        jobs = f"jobs: {quoted_list(spec.jobs)}" if spec else "it is empty"
        raise ClusterConfigError(
            f"{field}: {task_type!r} is not a job in {_CLUSTER} ({jobs})")
    return task_type


def _parse_index(task: Mapping[str, Any], task_type: str, spec: ClusterSpec) -> int:
    field = f"{_TASK}['index']"
    if "index" not in task:
        raise ClusterConfigError(f"{field}: missing; expected this task's integer index in job "
                                 f"{task_type!r}")
    index = task["index"]
    if isinstance(index, bool) or not isinstance(index, int):
        hint = " (write it without quotes)" if isinstance(index, str) else ""
        raise ClusterConfigError(
            f"{field}: expected an integer, got {kind_of(index)} {show(index)}{hint}")
    if index < 0:
        raise ClusterConfigError(f"{field}: {index} is negative; task indices start at 0")
    count = spec.num_tasks(task_type)
    if count == 0:  # an evaluator beside the cluster
        if index != 0:
            raise ClusterConfigError(
                f"{field}: {index} is out of range for the single evaluator (valid 0)")
    elif not spec.has_task(task_type, index):
        indices = spec.task_indices(task_type)
        if indices == list(range(count)):
            raise ClusterConfigError(
                f"{field}: {index} is out of range for job {task_type!r} with {count} "
                f"task{'s' if count != 1 else ''} (valid 0..{count - 1})")
        raise ClusterConfigError(
            f"{field}: {index} is not a task of job {task_type!r} (indices: "
            f"{', '.join(map(str, indices))})")
    return index
