"""The program each task of `run_cluster` runs: call one function, save its result as JSON.

It is started by file path (``python .../child.py SPEC.json``), not as
``distrib.testing.child``, so that a task imports nothing it does not need:
only the standard library here, plus whatever the test function's module
imports. ``SPEC.json`` holds the function's module, qualified name and file,
its arguments, and the directory for results. The task's return value is
converted by `to_jsonable` and written atomically to
``<results>/<task name>.json`` (``worker-1.json``) as
``{"task": ..., "restart_count": ..., "value": ...}``; no pickle anywhere.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from typing import Any, Callable, Dict, List

__all__ = ["to_jsonable", "result_filename", "main"]


def to_jsonable(value: Any) -> Any:
    """Turn tensors and arrays into nested lists, recursively through dicts, lists and tuples.

    Example:
        >>> import numpy as np, torch
        >>> to_jsonable({"w": torch.ones(2), "n": (np.int64(3), [np.zeros(1)])})
        {'w': [1.0, 1.0], 'n': [3, [[0.0]]]}
    """
    if isinstance(value, dict):
        return {key: to_jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(item) for item in value]
    root = type(value).__module__.split(".")[0]
    if root in ("torch", "numpy") and hasattr(value, "tolist"):
        if root == "torch" and hasattr(value, "detach"):
            value = value.detach().cpu()
        return to_jsonable(value.tolist())
    return value


def result_filename(task_name: str) -> str:
    """``'worker 1'`` -> ``'worker-1.json'``."""
    return task_name.replace(" ", "-") + ".json"


def _resolve(spec: Dict[str, Any]) -> Callable[..., Any]:
    module_name, qualname, path = spec["module"], spec["qualname"], spec["file"]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name and not module_name.startswith(f"{exc.name}."):
            raise
        # Imported by pytest under a name that is not importable here: load the file itself.
        loader_spec = importlib.util.spec_from_file_location(module_name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise ImportError(f"run_cluster: cannot load {path} as module {module_name}") from None
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[module_name] = module
        loader_spec.loader.exec_module(module)
    target: Any = module
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


def _limit_threads() -> None:
    torch = sys.modules.get("torch")
    threads = os.environ.get("OMP_NUM_THREADS")
    if torch is not None and threads and threads.isdigit():
        torch.set_num_threads(max(1, int(threads)))


def _write_atomically(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def main(argv: List[str]) -> int:
    """Run the function described by ``argv[1]`` (a spec file) and save what it returns."""
    with open(argv[1], encoding="utf-8") as handle:
        spec = json.load(handle)
    name = os.environ.get("DISTRIB_TASK_NAME", "task")
    sys.path.insert(0, os.path.dirname(spec["file"]))  # the function's module and its siblings import
    fn = _resolve(spec)
    _limit_threads()
    value = fn(*spec["args"], **spec["kwargs"])
    if os.environ.get("DISTRIB_LOCAL_REPLICA", "0/").split("/")[0] != "0":
        return 0  # an extra local replica re-running this task: the task's result is replica 0's
    try:
        text = json.dumps({
            "task": name,
            "restart_count": int(os.environ.get("DISTRIB_RESTART_COUNT", "0")),
            "value": to_jsonable(value),
        })
    except (TypeError, ValueError) as exc:
        raise TypeError(f"run_cluster: {name} returned a value that is not JSON-able even after "
                        f"converting tensors and arrays to lists: {exc}") from None
    _write_atomically(os.path.join(spec["results"], result_filename(name)), text)
    return 0


if __name__ == "__main__":
    # Run by path, Python put this file's directory first on sys.path; it
    # must not shadow the test's own modules.
    if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]
    sys.exit(main(sys.argv))
