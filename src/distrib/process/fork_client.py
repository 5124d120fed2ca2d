"""Starting a launch's tasks as forks of one preloaded server, or as new processes where that would differ.

`TaskStarter` is what `distrib launch` starts its tasks with. Its
`distrib.process.fork_server` is started with the environment of the first
task; every task whose start that server can reproduce exactly is then a fork
of it, returned as a `ForkedProcess` (the parts of `subprocess.Popen` the
launcher uses). A task is started as a new process (`spawn.start_task`) when:

* its command is not ``[sys.executable, script, ...]`` or
  ``[sys.executable, "-m", module, ...]`` (another interpreter, options);
* its environment differs from the server's in a variable that a new
  process reads at start-up (``PYTHONPATH``, ``PYTHONHASHSEED``,
  ``LD_PRELOAD``, ``OMP_NUM_THREADS``...): only
  `RUNTIME_VARIABLES` and ``DISTRIB_*`` may differ;
* a preloaded module's name is a file or directory beside the script (a new
  process would import that one instead);
* the server failed to start, or ``DISTRIB_LAUNCH_FORK=0`` (or the platform
  is not Linux).

By default (``spare``) the server only stands by for restarts and elastic
replacements; see `TaskStarter`. Whether a fork is exact: `distrib.process.fork_rules`.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import IO, Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Union

from distrib.process.fork_channel import ServerLine, task_request
from distrib.process.fork_rules import RUNTIME_VARIABLES, can_fork, read_at_run_time
from distrib.process.spawn import start_process, start_task

__all__ = ["FORK_ENV", "RUNTIME_VARIABLES", "ForkedProcess", "ForkServer", "SharedForkServer", "TaskStarter",
           "can_fork"]

log = logging.getLogger("distrib.launch")

#: ``0`` (new processes only), ``spare`` (default) or ``1`` (every task a fork): see `TaskStarter`.
FORK_ENV = "DISTRIB_LAUNCH_FORK"

_READY_SECONDS = 120.0
_REPLY_SECONDS = 30.0


class ForkServer:
    """One `distrib.process.fork_server` process and the thread that reads its messages.

    ``first_command`` only labels the server (and its forks) in ``ps``:
    ``python -m distrib.process.fork_server 5 -- train.py --epochs 3``.

    The server gets ready (imports `PRELOADED`) in the background; `start`
    refuses until it is (see `wait_ready`).
    """

    def __init__(self, env: Mapping[str, str], cwd: Optional[str] = None,
                 first_command: Sequence[str] = ("python",)) -> None:
        self.env: Dict[str, str] = dict(env)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock = ours
        try:
            shown = [os.path.basename(a) if i == 0 else a for i, a in enumerate(first_command[1:])]
            self._proc = start_process([sys.executable, "-m", "distrib.process.fork_server", str(theirs.fileno()),
                                        "--", *shown],
                                       self.env, cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                       pass_fds=(theirs.fileno(),))
        finally:
            theirs.close()
        self._lock = threading.Lock()
        self._changed = threading.Condition()
        self._exits: Dict[int, int] = {}
        self._started: Set[int] = set()
        self._replies: list = []
        self._ready = False
        self._gone = False
        self._reader = threading.Thread(target=self._read, name="distrib-fork-server", daemon=True)
        self._reader.start()

    @property
    def gone(self) -> bool:
        """Whether the server has exited (or hung up)."""
        return self._gone or self._proc.poll() is not None

    def wait_ready(self, timeout: float = _READY_SECONDS) -> bool:
        """Whether the server is ready to fork, waiting up to ``timeout`` seconds for it."""
        with self._changed:
            return self._await(lambda: self._ready, timeout) and not self._gone

    def start(self, command: Sequence[str], env: Mapping[str, str], cwd: Optional[str],
              output: Optional[int] = None, runtime: Iterable[str] = ()) -> "ForkedProcess":
        """Fork a task running ``command[1:]`` with ``env`` in ``cwd``.

        Its standard output and error come back on pipes (the result's
        ``stdout`` and ``stderr``), or both go to the file descriptor ``output``.
        ``runtime``: as `can_fork`'s, for the local replicas the task forks (`fork_channel`).
        """
        if not self.wait_ready(0):
            raise OSError("the fork server is not ready")
        if output is None:
            out_read, out_write = os.pipe()
            err_read, err_write = os.pipe()
            ours, theirs = [out_read, err_read], [out_write, err_write]
        else:
            ours, theirs = [], [output, output]
        request = task_request(command, env, cwd, runtime)
        try:
            with self._lock:
                socket.send_fds(self._sock, [json.dumps(request).encode()], theirs)
                reply = self._next_reply()
            if "pid" not in reply:
                raise OSError(reply.get("error", "fork server gave no process"))
        except BaseException:
            for fd in ours:
                os.close(fd)
            raise
        finally:
            if output is None:
                for fd in theirs:
                    os.close(fd)
        with self._changed:
            self._started.add(int(reply["pid"]))
        streams = [os.fdopen(fd, "rb", buffering=0) for fd in ours] or [None, None]
        return ForkedProcess(int(reply["pid"]), streams[0], streams[1], self)

    def signal_group(self, pid: int, signum: int) -> None:
        """Send ``signum`` to task ``pid``'s process group and to those of the local replicas it forked."""
        try:
            with self._lock:
                self._sock.send(json.dumps({"signal": pid, "signum": int(signum)}).encode())
        except OSError:  # no server: no forked replicas either
            try:
                os.killpg(pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def running(self) -> int:
        """How many of the tasks forked through this client have not ended."""
        with self._changed:
            return 0 if self._gone else len(self._started - set(self._exits))

    def exit_code(self, pid: int, timeout: Optional[float]) -> Optional[int]:
        """Task ``pid``'s exit status once it ended (``-9`` if the server died under it); None on timeout."""
        with self._changed:
            if self._await(lambda: pid in self._exits, timeout):
                return self._exits[pid]
            return -signal.SIGKILL if self._gone else None  # tasks die with the server (PR_SET_PDEATHSIG)

    def close(self) -> None:
        """Hang up: the server exits (tasks still running die with it); one still importing is killed."""
        if not self.wait_ready(0):
            self._proc.kill()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def _receive(self) -> Dict[str, Any]:
        data = self._sock.recv(1 << 16)
        if not data:
            raise ValueError("the fork server closed its end")
        return json.loads(data)

    def _next_reply(self) -> Dict[str, Any]:
        with self._changed:
            if self._await(lambda: bool(self._replies), _REPLY_SECONDS):
                return self._replies.pop(0)
            raise OSError("the fork server is gone" if self._gone else "the fork server did not answer")

    def _await(self, done: Callable[[], bool], timeout: Optional[float]) -> bool:
        """With the condition held: wait until ``done()``, the server is gone or ``timeout`` passed; ``done()``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not done() and not self._gone:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                break
            self._changed.wait(remaining)
        return done()

    def _read(self) -> None:
        try:
            while True:
                message = self._receive()
                with self._changed:
                    if "exit" in message:
                        self._exits[int(message["exit"])] = int(message["code"])
                    elif message == {"ready": True}:
                        self._ready = True
                    else:
                        self._replies.append(message)
                    self._changed.notify_all()
        except (OSError, ValueError):
            with self._changed:
                self._gone = True
                self._changed.notify_all()


class ForkedProcess:
    """A task forked by a `ForkServer`: the parts of `subprocess.Popen` the launcher uses.

    ``server`` reports its exit: the `ForkServer`, or for a task's sibling (a local
    replica) the task's `distrib.process.fork_channel.ServerLine`.
    """

    def __init__(self, pid: int, stdout: Optional[IO[bytes]], stderr: Optional[IO[bytes]],
                 server: Union[ForkServer, ServerLine]) -> None:
        self.pid = pid
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: Optional[int] = None
        self._server = server

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            self.returncode = self._server.exit_code(self.pid, 0)
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        if self.returncode is None:
            code = self._server.exit_code(self.pid, timeout)
            if code is None:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0)
            self.returncode = code
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signum)

    def signal_group(self, signum: int) -> None:
        """`spawn.signal_task` for a fork: its process group, and those of the local replicas it forked."""
        if self.returncode is None:
            self._server.signal_group(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class TaskStarter:
    """Starts one launch's tasks: new processes, or forks of a preloaded server where that is exact.

    ``mode`` (``DISTRIB_LAUNCH_FORK``):

    * ``"spare"`` (the default): the first tasks start as new processes, which
      import PyTorch in parallel; where tasks may be started again
      (``restarts_possible``: ``--max-restarts`` or ``--elastic``), `prewarm`
      then starts the server beside them, so that a restarted task or an
      elastic replacement starts as a fork;
    * ``"1"``: every task that can be is a fork, the first ones included
      (less CPU: one import instead of one per task);
    * ``"0"``: every task is a new process.

    With ``shared`` (a `SharedForkServer`), every task that can be is a fork
    of that server, which outlives this starter (``mode`` is then ignored).

    Start tasks from the thread that lives as long as they should (the
    server, like a task, dies with the thread that started it).
    """

    def __init__(self, mode: Optional[str] = None, *, restarts_possible: bool = True,
                 shared: Optional["SharedForkServer"] = None) -> None:
        mode = (os.environ.get(FORK_ENV, "spare") if mode is None else mode).strip() or "spare"
        if mode not in ("0", "1", "spare"):
            raise ValueError(f"{FORK_ENV} must be 0, 1 or spare, got {mode!r}")
        if not (sys.platform.startswith("linux") and hasattr(socket, "send_fds")):
            mode = "0"
        self.mode = mode
        self._spare_needed = restarts_possible
        self._server: Optional[ForkServer] = None
        self._failed = False
        self._shared = shared if self.mode != "0" or shared is None else None

    def start(self, command: Sequence[str], env: Mapping[str, str],
              cwd: Optional[str] = None) -> Union[subprocess.Popen, ForkedProcess]:
        if self.mode == "1" and self._shared is None:
            self.prewarm(command, env, cwd)
        server = self._shared.server_for(command, env, cwd) if self._shared is not None else self._server
        if server is not None and can_fork(command, env, server.env, cwd=cwd):
            # A server still importing is waited for: a new process would import the same, competing with it.
            server.wait_ready()
            try:
                return server.start(command, env, cwd)
            except OSError as exc:
                log.debug("distrib launch: starting a new process instead of a fork: %s", exc)
        return start_task(command, env, cwd=cwd)

    def prewarm(self, command: Sequence[str], env: Mapping[str, str], cwd: Optional[str] = None) -> None:
        """Start the server (once, in the background) with the environment of the task ``command``."""
        if self.mode == "0" or self._shared is not None or self._server is not None or self._failed:
            return
        if self.mode == "spare" and not self._spare_needed:
            return
        if not can_fork(command, env, env, cwd=cwd):
            return
        try:
            self._server = ForkServer(env, cwd, first_command=command)
        except OSError as exc:
            self._failed = True
            log.debug("distrib launch: no fork server: %s", exc)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None


class SharedForkServer:
    """Preloaded servers that outlive launches: one per start-up environment, started at its first task.

    A test suite runs hundreds of launches and scripts in one process; forking
    their tasks from a shared server, it pays ``import torch`` once instead of
    once per task. A task is forked from the live server whose start-up
    environment is its own (`can_fork`: the same variables but
    `RUNTIME_VARIABLES` and ``DISTRIB_*``); without one, a server is started
    for it. At most ``max_servers`` live at once: the least recently used one
    that runs no task makes room, and if every one runs tasks, the task is a
    new process. A server dies with the thread that started it; a later task
    then starts another.

    Example:
        >>> shared = SharedForkServer()
        >>> # launch("train.py", workers=2, fork_server=shared); launch(..., fork_server=shared)
        >>> shared.close()
    """

    def __init__(self, max_servers: int = 2) -> None:
        self._lock = threading.Lock()
        self._servers: List[ForkServer] = []  # the most recently used last
        self._max = max(1, int(max_servers))
        self._asked: Dict[frozenset, int] = {}  # start-up environments asked for while no server had them

    def server_for(self, command: Sequence[str], env: Mapping[str, str], cwd: Optional[str] = None,
                   runtime: Iterable[str] = (), start_at: int = 1) -> Optional[ForkServer]:
        """A live server that can fork ``command`` exactly, started now if needed; None if none can.

        ``runtime``: the caller's own variables that may differ from the server's (see `can_fork`).
        ``start_at``: a server for a start-up environment no live server has is started at its
        ``start_at``-th request, None before: with 2, a process whose environment is its own (a
        test's private ``TMPDIR``) is a new process, not a server that serves it alone and makes a
        busier one give way.
        """
        if not can_fork(command, env, env, cwd=cwd):
            return None
        runtime = frozenset(runtime)
        with self._lock:
            for server in [s for s in self._servers if s.gone]:
                self._servers.remove(server)
                server.close()
            for server in self._servers:
                if can_fork(command, env, server.env, cwd=cwd, runtime=runtime):
                    self._servers.remove(server)
                    self._servers.append(server)
                    return server
            startup = frozenset((k, v) for k, v in env.items() if not read_at_run_time(k, runtime))
            asked = self._asked.pop(startup, 0) + 1
            if asked < start_at:
                if len(self._asked) >= 256:  # bounded: the oldest are forgotten
                    self._asked.pop(next(iter(self._asked)))
                self._asked[startup] = asked
                return None
            if len(self._servers) >= self._max:
                idle = [s for s in self._servers if not s.running()]
                if not idle:
                    return None
                self._servers.remove(idle[0])
                idle[0].close()
            try:
                server = ForkServer(env, cwd, first_command=command)
            except OSError as exc:
                log.debug("distrib launch: no shared fork server: %s", exc)
                return None
            self._servers.append(server)
            return server

    def close(self) -> None:
        """Close every server (tasks still running die with theirs)."""
        with self._lock:
            servers, self._servers = self._servers, []
        for server in servers:
            server.close()
