"""Run code as a real multi-process cluster on 127.0.0.1, for tests.

`run_cluster` runs a module-level function in every training task and
returns what each returned; `run_script` runs a script or module and returns
its `LaunchResult` with every task's output captured. Both go through
`distrib.launch.launch`, so tasks get exactly the ``TF_CONFIG`` and
environment a user's ``distrib launch`` gives them, on ports picked at run
time, under a hard timeout. Tasks run with ``OMP_NUM_THREADS=1`` unless the
caller's ``env`` or environment sets it (tests share few cores).

Tasks start as forks of one preloaded server per test process (a
`distrib.process.fork_client.SharedForkServer`, the launcher's fork server
kept between launches), so a suite imports PyTorch once per process instead
of once per task; a task that server cannot start exactly (another
``PYTHONPATH``, ``OMP_NUM_THREADS``...) is a new process. With
``DISTRIB_LAUNCH_FORK`` in the caller's ``env`` or environment, the launcher's
own rule applies instead (``0``: new processes only).

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
from distrib.hooks import at_exit

import inspect
import json
import os
import subprocess
import sys
import tempfile
import threading
from typing import IO, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from distrib.launch.api import launch
from distrib.launch.layout import ClusterLayout
from distrib.process.fork_client import FORK_ENV, ForkedProcess, ForkServer, SharedForkServer, TaskStarter
from distrib.process.ports import free_port
from distrib.process.spawn import start_task
from distrib.launch.result import LaunchResult, LaunchTimeoutError
from distrib.testing.child import result_filename, to_jsonable
from distrib.utils.callables import where_defined

__all__ = ["ClusterRunError", "run_cluster", "run_script", "run_python", "start_python", "free_port", "TAIL_LINES"]

CHILD_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "child.py")

TAIL_LINES = 30
"""Lines of each task's output quoted in a `ClusterRunError`."""

_GRACE_SECONDS = 5.0

_SHARED_SERVER = SharedForkServer(max_servers=2)
at_exit(_SHARED_SERVER.close)


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


def _task_env(env: Optional[Mapping[str, Optional[str]]]) -> Dict[str, Optional[str]]:
    merged: Dict[str, Optional[str]] = dict(env or {})
    if "OMP_NUM_THREADS" not in merged and "OMP_NUM_THREADS" not in os.environ:
        merged["OMP_NUM_THREADS"] = "1"
    return merged


def _shared_server(env: Mapping[str, Optional[str]]) -> Optional[SharedForkServer]:
    """The process's shared server, unless the caller chose a fork mode itself."""
    return None if FORK_ENV in env or FORK_ENV in os.environ else _SHARED_SERVER


def _locate(fn: Callable[..., Any]) -> Dict[str, str]:
    module, qualname = where_defined(fn)
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
            first on ``sys.path``).
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
        task_env = _task_env(env)
        try:
            result = launch(CHILD_SCRIPT, [spec_path], workers=num_workers, chief=chief,
                            max_restarts=max_restarts, timeout=timeout, output="capture",
                            env=task_env, grace_seconds=_GRACE_SECONDS, fork_server=_shared_server(task_env))
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
    ps: int = 0,
) -> LaunchResult:
    """Launch a script (or module) as a test cluster with its output captured.

    Unlike `run_cluster`, a failing task does not raise: inspect
    ``result.returncode``, ``result.failures``, ``result.tasks``,
    ``result.outputs["worker 1"]`` (that task's output) and
    ``result.output`` (everything, prefixed, with the launcher's messages).
    ``evaluator=True`` adds an ``evaluator`` task (``distrib launch --evaluator``),
    ``ps=N`` N parameter-server tasks (``--ps N``).

    Raises:
        ClusterRunError: time ran out (every task was stopped).
    """
    task_env = _task_env(env)
    try:
        return launch(path_or_module, [str(a) for a in args], workers=num_workers, chief=chief, ps=ps,
                      evaluator=evaluator, module=module, max_restarts=max_restarts, timeout=timeout,
                      output="capture", env=task_env, cwd=cwd, grace_seconds=_GRACE_SECONDS,
                      fork_server=_shared_server(task_env))
    except LaunchTimeoutError as exc:
        raise ClusterRunError(_report(f"run_script({path_or_module}): timed out after "
                                      f"{timeout:g} s", exc.result), exc.result) from None


def run_python(args: Sequence[Union[str, "os.PathLike[str]"]], *, env: Optional[Mapping[str, str]] = None,
               cwd: Union[None, str, "os.PathLike[str]"] = None, timeout: float = 120,
               runtime: Sequence[str] = ()) -> "subprocess.CompletedProcess[str]":
    """``subprocess.run([sys.executable, *args], capture_output=True, text=True)``, forked where exact.

    The process is a fork of this test process's preloaded server (as the
    tasks of `run_cluster` are) when that starts it exactly as a new
    ``python`` would (`distrib.process.fork_rules.can_fork`), else a new
    process; ``DISTRIB_LAUNCH_FORK=0`` in ``env`` or the environment always
    makes a new one. A server is started for a start-up environment at its
    second request: the first program with an environment of its own (a
    test's ``TMPDIR``) is a new process.

    Args:
        args: the interpreter's arguments: ``[script, *args]`` or ``["-m", module, *args]``.
        env: the whole environment (default: this process's).
        cwd: the working directory (default: the current one).
        timeout: seconds before the process is killed and `subprocess.TimeoutExpired` raised.
        runtime: the caller's own variables of ``env`` that may differ from the server's
            (nothing reads them before the program does), as for `start_python`.

    Example:
        >>> proc = run_python(["-m", "distrib", "launch", "--help"])
        >>> proc.returncode, proc.stdout.startswith("usage: distrib launch")
        (0, True)
    """
    command, full_env, cwd = _python_command(args, env, cwd)
    forked = _forking_server(command, full_env, cwd, runtime, start_at=2)
    if forked is None:
        return subprocess.run(command, env=full_env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    proc = forked.start(command, full_env, cwd, runtime=runtime)
    chunks: Dict[str, List[bytes]] = {"out": [], "err": []}
    readers = [threading.Thread(target=_drain, args=(stream, chunks[key]), daemon=True)
               for key, stream in (("out", proc.stdout), ("err", proc.stderr))]
    for reader in readers:
        reader.start()
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(_GRACE_SECONDS)
        for reader in readers:
            reader.join(_GRACE_SECONDS)
        raise subprocess.TimeoutExpired(command, timeout, _text(chunks["out"]), _text(chunks["err"])) from None
    for reader in readers:
        reader.join()
    return subprocess.CompletedProcess(command, code, _text(chunks["out"]), _text(chunks["err"]))


def _drain(stream: IO[bytes], into: List[bytes]) -> None:
    with stream:
        for chunk in iter(lambda: stream.read(1 << 16), b""):
            into.append(chunk)


def _text(chunks: List[bytes]) -> str:
    return b"".join(chunks).decode("utf-8", errors="replace")


def start_python(args: Sequence[Union[str, "os.PathLike[str]"]], *, output: IO[bytes],
                 env: Optional[Mapping[str, str]] = None, cwd: Union[None, str, "os.PathLike[str]"] = None,
                 runtime: Sequence[str] = ()) -> Union[subprocess.Popen, ForkedProcess]:
    """Start ``python *args`` in its own session, output and errors to the file ``output``; do not wait.

    As `run_python`, a fork of the test process's preloaded server where
    that is exact, else a new process; ``runtime`` names the caller's own
    variables that may differ from the server's (nothing reads them before
    the program does; nor before its local replicas' programs do, which then
    fork too). The result has ``pid`` (its process group too),
    ``poll()``, ``wait(timeout)`` (`subprocess.TimeoutExpired`), ``kill()``
    and ``terminate()``.
    """
    command, full_env, cwd = _python_command(args, env, cwd)
    forked = _forking_server(command, full_env, cwd, runtime)
    if forked is None:
        return subprocess.Popen(command, env=full_env, cwd=cwd, stdout=output, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    return forked.start(command, full_env, cwd, output=output.fileno(), runtime=runtime)


def start_piped_task(command: Sequence[str], env: Mapping[str, str],
                     cwd: Optional[str] = None) -> Union[subprocess.Popen, ForkedProcess]:
    """Start a launcher-style task (own session, output and errors on pipes), forked where that is exact.

    As `distrib launch` starts a task (`fork_client.TaskStarter`), from the
    test process's preloaded server; a new process (`spawn.start_task`) where
    the caller chose a fork mode itself.
    """
    shared = _shared_server(env)
    if shared is None:
        return start_task(command, env, cwd=cwd)
    return TaskStarter(shared=shared).start(command, env, cwd)


def _python_command(args: Sequence[Union[str, "os.PathLike[str]"]], env: Optional[Mapping[str, str]],
                    cwd: Union[None, str, "os.PathLike[str]"]) -> Tuple[List[str], Dict[str, str], Optional[str]]:
    return ([sys.executable, *[os.fspath(a) for a in args]], dict(os.environ if env is None else env),
            None if cwd is None else os.fspath(cwd))


def _forking_server(command: Sequence[str], env: Mapping[str, str], cwd: Optional[str],
                    runtime: Sequence[str] = (), start_at: int = 1) -> Optional[ForkServer]:
    """A ready shared server that starts ``command`` exactly, or None (then: a new process).

    ``start_at`` (`SharedForkServer.server_for`): `run_python` starts a server for an environment
    only when it was asked for before, since one that is a test's own would cost a server and make
    the suite's common one give way; `start_python`, which starts a cluster's tasks, at once.
    """
    shared = _shared_server(env)
    server = shared.server_for(command, env, cwd, runtime, start_at) if shared is not None else None
    return server if server is not None and server.wait_ready() else None
