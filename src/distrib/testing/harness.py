"""Run code as a real multi-process cluster on 127.0.0.1, for tests.

`run_cluster` runs a module-level function in every training task and
returns what each returned; `run_script` runs a script or module and returns
its `LaunchResult` with every task's output captured. Both go through
`distrib.launch.launch`, so tasks get exactly the ``TF_CONFIG`` and
environment a user's ``distrib launch`` gives them, on ports picked at run
time, under a hard timeout. Tasks run with ``OMP_NUM_THREADS=1`` unless the
caller's ``env`` or environment sets it (tests share few cores).

Example:
    In ``tests/distributed/test_sum.py``::

        def rank_and_size():
            config = json.loads(os.environ["TF_CONFIG"])
            return [config["task"]["index"], len(config["cluster"]["worker"])]

        def test_sum():
            assert run_cluster(rank_and_size, num_workers=2) == [[0, 2], [1, 2]]
"""
from __future__ import annotations

from distrib.errors import DistribError

import inspect
import json
import os
import tempfile
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from distrib.launch.api import launch
from distrib.launch.layout import ClusterLayout
from distrib.process.ports import free_port
from distrib.launch.result import LaunchResult, LaunchTimeoutError
from distrib.testing.child import result_filename, to_jsonable

__all__ = ["ClusterRunError", "run_cluster", "run_script", "free_port", "TAIL_LINES"]

CHILD_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "child.py")

#: Lines of each task's output quoted in a `ClusterRunError`.
TAIL_LINES = 30

_GRACE_SECONDS = 5.0


class ClusterRunError(DistribError, RuntimeError):
    """A task of a test cluster failed or the cluster timed out.

    The message's first line says what happened; then, for every task, its
    exit status and the last `TAIL_LINES` lines of its output.

    Attributes:
        result: the `LaunchResult` (captured output included).
    """

    def __init__(self, message: str, result: LaunchResult) -> None:
        super().__init__(message)
        self.result = result


def _report(headline: str, result: LaunchResult) -> str:
    lines = [headline]
    outputs = result.outputs or {}
    for name, status in result.tasks.items():
        lines.append(f"--- {status.describe()}; last lines of its output:")
        tail = outputs.get(name, "").splitlines()[-TAIL_LINES:]
        lines.extend(f"    {line}" for line in tail or ["(no output)"])
    return "\n".join(lines)


def _task_env(env: Optional[Mapping[str, Optional[str]]], import_dir: Optional[str]) -> Dict[str, Optional[str]]:
    merged: Dict[str, Optional[str]] = dict(env or {})
    if "OMP_NUM_THREADS" not in merged and "OMP_NUM_THREADS" not in os.environ:
        merged["OMP_NUM_THREADS"] = "1"
    if import_dir is not None:
        current = merged.get("PYTHONPATH", os.environ.get("PYTHONPATH"))
        merged["PYTHONPATH"] = os.pathsep.join(p for p in (import_dir, current) if p)
    return merged


def _locate(fn: Callable[..., Any]) -> Dict[str, str]:
    qualname = getattr(fn, "__qualname__", "")
    module = getattr(fn, "__module__", None)
    if not callable(fn) or not qualname or module is None:
        raise TypeError(f"run_cluster: expected a module-level function, got {fn!r}")
    if "<locals>" in qualname or "<lambda>" in qualname:
        raise TypeError(f"run_cluster: {module}.{qualname} must be defined at module level "
                        "(tasks import it by name)")
    path = inspect.getsourcefile(fn) or inspect.getfile(fn)
    path = os.path.abspath(path)
    if module == "__main__":
        module = os.path.splitext(os.path.basename(path))[0]
    return {"module": module, "qualname": qualname, "file": path}


def run_cluster(
    fn: Callable[..., Any],
    num_workers: int = 2,
    *,
    args: Sequence[Any] = (),
    kwargs: Optional[Mapping[str, Any]] = None,
    chief: bool = False,
    timeout: float = 120,
    env: Optional[Mapping[str, Optional[str]]] = None,
    max_restarts: int = 0,
) -> List[Any]:
    """Run ``fn(*args, **kwargs)`` in each training task; return the values in rank order.

    Args:
        fn: a module-level function; tasks import its module by name, or from
            its file when that name is not importable (its directory is put
            on ``PYTHONPATH``).
        num_workers: number of ``worker`` tasks.
        args, kwargs: passed to ``fn`` as JSON (tensors and arrays arrive as nested lists).
        chief: add a ``chief`` task (its value comes first).
        timeout: hard limit in seconds for the whole cluster.
        env: extra environment for the tasks (``None`` values remove a variable).
        max_restarts: as for `distrib.launch.launch`.

    Returns:
        ``[chief value (if chief), worker 0 value, worker 1 value, ...]``,
        each converted with `to_jsonable` and read back from JSON, so
        tensors come back as nested lists and tuples as lists.

    Raises:
        ClusterRunError: a task failed, wrote no result, or time ran out.
    """
    where = _locate(fn)
    label = f"run_cluster({where['module']}:{where['qualname']})"
    layout = ClusterLayout(workers=num_workers, chief=chief)
    with tempfile.TemporaryDirectory(prefix="distrib-run-cluster-") as tmp:
        spec = dict(where, results=tmp, args=to_jsonable(list(args)),
                    kwargs=to_jsonable(dict(kwargs or {})))
        spec_path = os.path.join(tmp, "spec.json")
        try:
            spec_text = json.dumps(spec)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{label}: args and kwargs must be JSON-able: {exc}") from None
        with open(spec_path, "w", encoding="utf-8") as handle:
            handle.write(spec_text)
        try:
            result = launch(CHILD_SCRIPT, [spec_path], workers=num_workers, chief=chief,
                            max_restarts=max_restarts, timeout=timeout, output="capture",
                            env=_task_env(env, os.path.dirname(where["file"])),
                            grace_seconds=_GRACE_SECONDS)
        except LaunchTimeoutError as exc:
            raise ClusterRunError(_report(f"{label}: timed out after {timeout:g} s", exc.result),
                                  exc.result) from None
        if result.returncode != 0:
            cause = result.failures[-1] if result.failures else f"exit code {result.returncode}"
            raise ClusterRunError(_report(f"{label}: {cause}", result), result)
        values = []
        for task in layout.training_tasks():
            path = os.path.join(tmp, result_filename(task.name))
            try:
                with open(path, encoding="utf-8") as handle:
                    record = json.load(handle)
            except FileNotFoundError:
                raise ClusterRunError(_report(f"{label}: {task.name} finished but wrote no result",
                                              result), result) from None
            if record.get("restart_count") != result.restarts:
                raise ClusterRunError(_report(f"{label}: {task.name} did not finish in the last "
                                              f"attempt (restart {result.restarts})", result), result)
            values.append(record["value"])
        return values


def run_script(
    path_or_module: str,
    num_workers: int = 2,
    *,
    args: Sequence[Any] = (),
    chief: bool = False,
    timeout: float = 120,
    env: Optional[Mapping[str, Optional[str]]] = None,
    max_restarts: int = 0,
    module: bool = False,
    cwd: Optional[str] = None,
    evaluator: bool = False,
) -> LaunchResult:
    """Launch a script (or module) as a test cluster with its output captured.

    Unlike `run_cluster`, a failing task does not raise: inspect
    ``result.returncode``, ``result.failures``, ``result.tasks``,
    ``result.outputs["worker 1"]`` (that task's output) and
    ``result.output`` (everything, prefixed, with the launcher's messages).
    ``evaluator=True`` adds an ``evaluator`` task (``distrib launch --evaluator``).

    Raises:
        ClusterRunError: time ran out (every task was stopped).
    """
    try:
        return launch(path_or_module, [str(a) for a in args], workers=num_workers, chief=chief,
                      evaluator=evaluator, module=module, max_restarts=max_restarts, timeout=timeout,
                      output="capture", env=_task_env(env, None), cwd=cwd,
                      grace_seconds=_GRACE_SECONDS)
    except LaunchTimeoutError as exc:
        raise ClusterRunError(_report(f"run_script({path_or_module}): timed out after "
                                      f"{timeout:g} s", exc.result), exc.result) from None
