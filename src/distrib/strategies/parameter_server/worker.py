"""What a ``worker`` task does: run scheduled functions against variables on the ps tasks.

For each function the chief sends (`run_closure`), the worker, in its main
thread:

1. installs the shared objects the function needs that it does not have yet
   (modules, optimizers, metrics, per-worker datasets and iterators);
2. reads the current value of every variable the function uses from the ps
   tasks into its local tensors, and clears their gradients (each scheduled
   function is a fresh step, like a ``GradientTape``);
3. runs the function. ``optimizer.step()`` on an optimizer created in the
   chief's scope sends the gradients to the ps tasks, which apply the update
   (`RemoteOptimizer`); metrics created in scope start from zero;
4. replies with the result and each metric's change, which the chief adds
   to its own metric. A lost ps task is reported as such (the chief stops);
   any other exception is sent back and raised by ``join``/``fetch``.

Example (the chief's side of one call):
    >>> reply = runtime.call(TaskInfo("worker", 0), run_closure, (defs, payload, hyper))
    >>> reply[0]
    'ok'
"""
from __future__ import annotations

import traceback
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from distrib.cluster.task import TaskInfo
from distrib.strategies.parameter_server import server as ps_server, wire as ps_wire
from distrib.strategies.parameter_server.errors import UnavailableError
from distrib.strategies.parameter_server.importer import Importer
from distrib.strategies.parameter_server.registered import registered_only
from distrib.strategies.parameter_server.runtime import run_on_main_thread
from distrib.strategies.parameter_server.variables import VariableInfo, read_values, split_rows
from distrib.utils.nest import map_structure

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

__all__ = ["WorkerState", "RemoteOptimizer", "run_closure", "serve_worker", "refresh_variables", "error_reply"]

_STATE: List["WorkerState"] = []


class RemoteOptimizer(torch.optim.Optimizer):
    """A worker's stand-in for an optimizer created in the chief's scope.

    It has the chief optimizer's param groups (over the worker's local
    tensors) and hyper-parameters, so ``zero_grad`` and reading
    ``param_groups`` work as usual; ``step()`` sends each gradient to the ps
    task holding the variable (split by shard), where the real optimizer
    applies it, and returns when every ps has applied it.
    """

    def __init__(self, key: int, spec: Dict[str, Any], param: Callable[[VariableInfo], torch.nn.Parameter],
                 runtime: Any) -> None:
        groups = [{**g["hyper"], "params": [param(i) for i in g["params"]]} for g in spec["groups"]]
        super().__init__(groups, {})
        self._key = key
        self._runtime = runtime
        self._infos = {id(param(i)): i for g in spec["groups"] for i in g["params"]}
        self.remote_name = spec["name"]

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        hyper = {i: {k: v for k, v in g.items() if k != "params"} for i, g in enumerate(self.param_groups)}
        by_ps: Dict[int, Tuple[List[Any], List[torch.Tensor]]] = {}
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                info = self._infos[id(p)]
                for shard, grad in zip(info.shards, split_rows(info, p.grad)):
                    keys, grads = by_ps.setdefault(shard.ps, ([], []))
                    keys.append(shard.key)
                    grads.append(grad)
        futures = {ps: self._runtime.call_async(TaskInfo("ps", ps), ps_server.apply_gradients,
                                                (self._key, keys, grads, hyper))
                   for ps, (keys, grads) in by_ps.items()}
        for ps, future in futures.items():
            self._runtime.wait(TaskInfo("ps", ps), future)
        return loss


class WorkerState:
    """Everything a worker keeps between functions."""

    def __init__(self, runtime: Any, strategy: "Strategy", worker_index: int) -> None:
        self.runtime = runtime
        self.worker_index = worker_index
        self.importer = Importer(strategy, self._make_optimizer, self._make_per_worker,
                                 registered_only=registered_only())

    def _make_optimizer(self, key: int, spec: Dict[str, Any], param: Callable) -> RemoteOptimizer:
        return RemoteOptimizer(key, spec, param, self.runtime)

    def _make_per_worker(self, recipe: Tuple[Any, ...]) -> Any:
        kind, value = recipe
        if kind == "call":
            return value()
        if kind == "iter":
            return iter(value)
        if kind == "values":
            if self.worker_index >= len(value):
                raise IndexError(f"PerWorkerValues has {len(value)} values, but this is worker "
                                 f"{self.worker_index}: give one value per worker")
            return value[self.worker_index]
        return value  # "value": a dataset object shipped as it is

    def execute(self, defs: Sequence[Tuple[int, str, bytes, Tuple[int, ...]]], payload: bytes,
                hyper: Dict[int, Dict[int, Dict[str, Any]]]) -> Tuple[Any, ...]:
        """Run one scheduled function; returns ``("ok", result, deltas)``, ``("ps", message, task)``
        or ``("error", {"class": name, "args": [...]}, traceback text)``."""
        try:
            imp = self.importer
            for key, kind, data, deps in defs:
                imp.install(key, kind, data, deps)
            (fn, args, kwargs), var_ids, keys = imp.loads_call(payload)
            for key, groups in hyper.items():
                for index, values in groups.items():
                    imp.objects[key].param_groups[index].update(values)
            infos = [imp.infos[v] for v in sorted(var_ids)]
            for info, value in zip(infos, read_values(self.runtime, infos)):
                p = imp.params[info.var_id]
                p.data = value
                p.grad = None
            metrics = {k: imp.objects[k] for k in keys if imp.kinds.get(k) == "metric"}
            initial = {}
            for key, metric in metrics.items():
                metric.reset_state()
                initial[key] = {n: t.clone() for n, t in metric.state_tensors().items()}
            with imp.scope_for(payload):
                result = map_structure(_detached, fn(*args, **kwargs))
            deltas = {key: {n: (t - initial[key].get(n, _state_start(metric, n))).detach()
                            for n, t in metric.state_tensors().items()}
                      for key, metric in metrics.items()}
        except UnavailableError as exc:
            if (exc.task or "").startswith("ps"):
                return ("ps", str(exc), exc.task)
            return error_reply(exc)
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the chief
            return error_reply(exc)
        try:
            ps_wire.encode(result)
        except ps_wire.WireFormatError as exc:
            return error_reply(TypeError(f"the scheduled function's return value could not be sent to the "
                                          f"chief ({exc}); return tensors, numbers, strings or lists, "
                                          f"tuples and dicts of them"))
        return ("ok", result, deltas)


def _detached(value: Any) -> Any:
    return value.detach() if isinstance(value, torch.Tensor) else value


def error_reply(exc: BaseException) -> Tuple[str, Dict[str, Any], str]:
    """The exception by class name and arguments (the chief rebuilds it), and its traceback text."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        name = ps_server.class_name(type(exc))
        args = list(exc.args)
        ps_wire.encode(args)
    except (TypeError, ps_wire.WireFormatError):
        name, args = "builtins:RuntimeError", [f"{type(exc).__name__}: {exc}"]
    return ("error", {"class": name, "args": args}, text)


def run_closure(defs: Sequence[Tuple[int, str, bytes, Tuple[int, ...]]], payload: bytes,
                hyper: Dict[int, Dict[int, Dict[str, Any]]]) -> torch.futures.Future:
    """Channel handler: run a scheduled function in this worker's main thread (the reply waits for it).

    The worker's state is looked up there, not in this handler thread: the
    channel serves as soon as it starts, and a call can arrive before
    `serve_worker` has made the state; the main thread runs the call once it
    serves, which is after that.
    """
    return run_on_main_thread(lambda: _STATE[0].execute(defs, payload, hyper))


def refresh_variables(tensors: Sequence[torch.Tensor]) -> None:
    """Re-read from the ps tasks the current values of those ``tensors`` that are this worker's
    variables (a scheduled function running several steps sees the updates of its earlier ones).
    Outside a worker, or for tensors that are not variables, nothing happens."""
    if not _STATE:
        return
    state = _STATE[0]
    imp = state.importer
    var_of = {id(p): var_id for var_id, p in imp.params.items()}
    infos = [imp.infos[var_of[id(t)]] for t in tensors if id(t) in var_of]
    if not infos:
        return
    for info, value in zip(infos, read_values(state.runtime, infos)):
        imp.params[info.var_id].data = value


def serve_worker(runtime: Any, strategy: "Strategy", worker_index: int) -> None:
    """Serve scheduled functions until the chief's program ends."""
    _STATE.append(WorkerState(runtime, strategy, worker_index))
    runtime.serve()


def _state_start(metric: Any, name: str) -> float:
    """The initial value of a state a metric created during the closure (F1Score builds on its first batch)."""
    return float(getattr(metric, "_state_init", {}).get(name, 0.0))
