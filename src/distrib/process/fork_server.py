"""A preloaded fork server: a task starts as a fork of a process that has already imported PyTorch.

``import torch`` costs one to two seconds of CPU in every new Python
process. `distrib launch` starts one server per launch, with the tasks'
environment; the server imports `PRELOADED` once and then, for each task,
forks and runs the task's script (or module) as ``__main__`` in the child,
so a task, a restarted task and an elastic replacement start in milliseconds.
The client side is `distrib.process.fork_client`.

A forked task behaves as ``python script.py ARGS`` would: ``sys.argv``,
``sys.path[0]`` (the script's directory, or the working directory for
``-m``), ``__main__`` with its ``__file__``, the working directory, the
whole environment, standard input from ``/dev/null``, its own session,
``PR_SET_PDEATHSIG`` (it dies with the server, which dies with the
launcher), ``sys.orig_argv``, freshly seeded ``random``, NumPy and PyTorch CPU
generators, the exit status of an
uncaught exception (1, traceback without this module's frames), of
``sys.exit`` and of ``KeyboardInterrupt``. What it shares with the server and
its siblings: modules imported before the fork, and the string hash seed
(as if ``PYTHONHASHSEED`` were set).

Protocol (``SOCK_SEQPACKET``, one JSON object per message): the client sends
``{"argv", "env", "cwd", "new_session", "runtime"}`` with the task's standard
output and error; the server answers ``{"pid": N}`` (or ``{"error"}``), later
``{"exit": N, "code": C}`` (``C`` as `subprocess` has it); ``{"signal": N,
"signum": S}`` signals task N's group and its siblings'. Each task gets a line
for the same requests (`distrib.process.fork_channel`): its siblings. The server
starts with ``{"ready": true}`` and exits when the client closes its end.
"""
from __future__ import annotations

import builtins
import gc
import importlib
import json
import os
import select
import signal
import socket
import sys
import types
from typing import Any, Dict, List, NoReturn, Optional, Sequence, Set

from distrib.process import fork_channel

__all__ = ["PRELOADED", "serve"]

#: What the server imports before it forks: the modules every task imports and that cost the most.
#: ``torch._dynamo`` (1.2-1.8 s of CPU) loads in any task that makes a ``torch.optim`` optimizer;
#: it fixes its cache directory from ``TORCHINDUCTOR_CACHE_DIR`` as it loads, so
#: `fork_rules.can_fork` forks a task only where that directory is the server's.
PRELOADED = ("numpy", "torch", "torch._dynamo")

_MAX_MESSAGE = 4 << 20


def _send(sock: socket.socket, message: Dict[str, Any]) -> None:
    sock.sendall(json.dumps(message).encode())


def serve(fd: int) -> None:
    """Preload, answer ``ready``, then fork a task per request until the client hangs up."""
    server_env = dict(os.environ)  # a task's siblings are compared with it (`fork_channel.ServerLine`)
    sock = socket.socket(fileno=fd)
    for name in PRELOADED:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    gc.freeze()  # the collector skips the preloaded objects: a child's collections neither scan nor copy them
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher owns Ctrl-C and stops the tasks
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that the wakeup fd is written
    signal.set_wakeup_fd(wake_write)
    tasks = _Tasks(sock, server_env, [wake_read, wake_write])
    _send(sock, {"ready": True})
    while True:
        try:
            readable, _, _ = select.select([sock, wake_read, *tasks.lines.values()], [], [])
        except InterruptedError:
            continue
        if wake_read in readable:
            while True:
                try:
                    if not os.read(wake_read, 512):
                        break
                except BlockingIOError:
                    break
            tasks.reap()
        for pid, line in list(tasks.lines.items()):
            if line in readable:
                tasks.serve_line(pid, line)
        if sock in readable:
            message, fds, _, _ = socket.recv_fds(sock, _MAX_MESSAGE, 2)
            if not message:
                return  # the launcher is done (or gone): the tasks die with this process
            request = json.loads(message)
            if "signal" in request:
                tasks.signal(int(request["signal"]), int(request["signum"]))
            else:
                _send(sock, tasks.fork(request, fds))


class _Tasks:
    """The server's forked tasks: each one's line (`distrib.process.fork_channel`), and whose sibling each is."""

    def __init__(self, sock: socket.socket, server_env: Dict[str, str], server_fds: List[int]) -> None:
        self.sock = sock
        self.server_env = server_env
        self.server_fds = server_fds
        self.lines: Dict[int, socket.socket] = {}  # task pid -> the server's end of its line
        self.asked_by: Dict[int, int] = {}  # sibling pid -> the task that asked for it
        self.running: Set[int] = set()  # forked, not yet reaped

    def fork(self, request: Dict[str, Any], fds: Sequence[int], asked_by: Optional[int] = None) -> Dict[str, Any]:
        """Fork the task ``request`` describes (output and errors to ``fds``); the answer to send."""
        try:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        except OSError as exc:
            ours = theirs = None
            error: Optional[OSError] = exc
        else:
            try:
                pid = os.fork()
                error = None
            except OSError as exc:
                ours.close()
                theirs.close()
                error = exc
            else:
                if pid == 0:
                    self.sock.close()  # through the objects: a bare os.close would close a reused fd later
                    ours.close()
                    for line in self.lines.values():
                        line.close()
                    fork_channel.attach(theirs, self.server_env, request.get("runtime") or ())
                    _become_task(request, fds, self.server_fds)
                theirs.close()
        for fd_ in fds:
            os.close(fd_)
        if error is not None:
            return {"error": f"fork failed: {error}"}
        self.lines[pid] = ours
        self.running.add(pid)
        if asked_by is not None:
            self.asked_by[pid] = asked_by
        return {"pid": pid}

    def serve_line(self, pid: int, line: socket.socket) -> None:
        """Task ``pid`` asks for a sibling (or hung up); a request that is not one is answered with an error."""
        try:
            message, fds, _, _ = socket.recv_fds(line, _MAX_MESSAGE, 2)
        except OSError:
            message, fds = b"", []
        if not message:
            for fd_ in fds:
                os.close(fd_)
            del self.lines[pid]
            line.close()
            return
        try:
            request = json.loads(message)
        except ValueError:
            request = None
        if _is_request(request) and len(fds) == 2:
            answer = self.fork(request, fds, asked_by=pid)
        else:
            for fd_ in fds:
                os.close(fd_)
            answer = {"error": "a sibling request is JSON {argv, env, cwd} (strings) with two file descriptors"}
        self._tell(line, answer)

    def reap(self) -> None:
        """Report each ended task to whoever started it; SIGKILL the siblings an ended task asked for."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.running.discard(pid)
            message = {"exit": pid, "code": os.waitstatus_to_exitcode(status)}
            if pid in self.asked_by:
                line = self.lines.get(self.asked_by.pop(pid))
                if line is not None:
                    self._tell(line, message)
            else:
                _send(self.sock, message)
            line = self.lines.pop(pid, None)
            if line is not None:
                line.close()
            for sibling in [s for s, task in self.asked_by.items() if task == pid]:
                try:
                    os.kill(sibling, signal.SIGKILL)  # they die with the task that started them
                except ProcessLookupError:
                    pass

    def signal(self, pid: int, signum: int) -> None:
        """Send ``signum`` to task ``pid``'s process group and those of the siblings it asked for.

        (A forked local replica is in a session of its own: what the launcher sends to
        replica 0's group reaches it this way, as it reaches a replica that is a new process.)
        """
        for target in [pid, *(s for s, task in self.asked_by.items() if task == pid)]:
            if target in self.running:
                try:
                    os.killpg(target, signum)
                except (ProcessLookupError, PermissionError):
                    pass

    @staticmethod
    def _tell(line: socket.socket, message: Dict[str, Any]) -> None:
        try:
            _send(line, message)
        except OSError:
            pass  # that task is gone


def _is_request(request: Any) -> bool:
    """Whether ``request`` is ``{"argv": [str, ...], "env": {str: str}, "cwd": str, "runtime": [str, ...]}``."""
    if not isinstance(request, dict):
        return False
    argv, env, runtime = request.get("argv"), request.get("env"), request.get("runtime", [])
    return (isinstance(argv, list) and bool(argv) and all(isinstance(a, str) for a in argv)
            and isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
            and isinstance(request.get("cwd"), str)
            and isinstance(runtime, list) and all(isinstance(name, str) for name in runtime))


def _become_task(request: Dict[str, Any], fds: Sequence[int], server_fds: List[int]) -> NoReturn:
    """In the forked child: take the task's process state, run it, exit as Python would."""
    server_pid = os.getppid()
    signal.set_wakeup_fd(-1)
    for fd in server_fds:
        os.close(fd)
    for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if request.get("new_session", True):
        os.setsid()
    _die_with(server_pid)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    out, err = fds
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.close(out)
    os.close(err)
    for stream in (sys.stdout, sys.stderr):
        if stream is not None and not stream.write_through:
            stream.reconfigure(line_buffering=stream.isatty() or stream is sys.stderr)
    os.chdir(request["cwd"])
    preloaded = sys.modules.get("distrib")
    if preloaded is not None:  # what `import distrib` records in a new process started there
        preloaded._START_DIRECTORY = request["cwd"]
    os.environ.clear()
    os.environ.update(request["env"])
    _fresh_generators()
    raise SystemExit(_run_main(request["argv"]))


def _die_with(server_pid: int) -> None:
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != server_pid:
        os._exit(1)  # the server is already gone: the death signal would never come


def _fresh_generators() -> None:
    """What a new process would have: generators seeded afresh.

    (``random`` reseeds itself after a fork; PyTorch seeds its CPU generator from
    ``std::random_device`` when it is imported, NumPy from the OS when it is.)
    """
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.default_generator.seed()


def _run_main(argv: Sequence[str]) -> Any:
    """Run ``argv`` (``[script, *args]`` or ``["-m", module, *args]``) as ``__main__``; the exit status."""
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    try:
        sys.orig_argv = [sys.executable, *argv]  # what `distrib.process.rerun` re-runs (local replicas)
        if argv[0] == "-m":
            import runpy
            sys.argv = [argv[1], *argv[2:]]
            sys.path[0] = os.getcwd()
            runpy._run_module_as_main(argv[1], alter_argv=True)  # what ``python -m`` itself calls
        else:
            script = os.path.abspath(argv[0])
            sys.argv = list(argv)
            sys.path[0] = os.path.dirname(os.path.realpath(script))
            with open(script, "rb") as handle:
                source = handle.read()
            from importlib.machinery import SourceFileLoader
            main.__dict__.update(__file__=script, __cached__=None, __spec__=None,
                                 __loader__=SourceFileLoader("__main__", script))
            exec(compile(source, script, "exec"), main.__dict__)
    except SystemExit:
        raise
    except KeyboardInterrupt as exc:
        _print_uncaught(exc)
        sys.stdout.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)  # as Python does: the task ends by SIGINT
        return 130
    except BaseException as exc:  # noqa: B902 - reported as Python reports an uncaught exception
        _print_uncaught(exc)
        return 1
    return 0


def _print_uncaught(exc: BaseException) -> None:
    tb = exc.__traceback__
    here = os.path.abspath(__file__)
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) == here:
        tb = tb.tb_next
    sys.excepthook(type(exc), exc.with_traceback(tb), tb)


if __name__ == "__main__":
    serve(int(sys.argv[1]))  # (the arguments after it only name the job in `ps`)
