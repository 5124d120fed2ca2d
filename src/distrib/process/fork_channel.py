"""A forked task's line back to its fork server: the processes it starts again (local replicas) as forks too.

`distrib.process.fork_server` hands every task it forks one end of a socket
pair (`attach`); `current` is that line in the task (None in a process the
server did not fork). `ServerLine.start` asks the server to fork a command as
it forked the task; the server reports that sibling's exit on the same line
and SIGKILLs the siblings a task asked for when the task ends (as
``PR_SET_PDEATHSIG`` would). Whether such a fork is exact is the caller's
check (`fork_rules.can_fork` against `ServerLine.server_env`); see
`distrib.strategies.local_replicas.connect`.

Example:
    >>> line = current()
    >>> pid = line.start([sys.executable, "train.py"], env, cwd, stderr=log.fileno()) if line else None
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import threading
import time
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

__all__ = ["ServerLine", "attach", "current", "task_request"]

_REPLY_SECONDS = 30.0


def task_request(command: Sequence[str], env: Mapping[str, str], cwd: Optional[str],
                 runtime: Iterable[str]) -> Dict[str, Any]:
    """What a fork server is asked to fork: ``command[1:]`` with ``env`` in ``cwd``, in its own session."""
    return {"argv": [os.fspath(a) for a in command[1:]], "env": dict(env),
            "cwd": os.fspath(cwd) if cwd else os.getcwd(), "new_session": True, "runtime": sorted(runtime)}


class ServerLine:
    """The task's end of its line to the server: requests out, ``{"pid"}``/``{"exit"}`` messages in.

    Attributes:
        server_env: the environment the server started with.
        runtime: the variables the task's starter said may differ from it (`fork_rules.can_fork`'s ``runtime``).
    """

    def __init__(self, sock: socket.socket, server_env: Mapping[str, str], runtime: Iterable[str] = ()) -> None:
        self.sock = sock
        self.server_env: Dict[str, str] = dict(server_env)
        self.runtime = frozenset(runtime)
        self._lock = threading.Lock()
        self._exits: Dict[int, int] = {}
        self._replies: List[Dict[str, Any]] = []
        self._gone = False

    def start(self, command: Sequence[str], env: Mapping[str, str], cwd: Optional[str], *, stderr: int) -> int:
        """Fork ``command`` (``[python, script or -m module, ...]``) in its own session; its process id.

        Its standard output is discarded, its standard error goes to file
        descriptor ``stderr``. Raises `OSError` if the server refuses or is gone.
        """
        request = task_request(command, env, cwd, self.runtime)
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            with self._lock:
                socket.send_fds(self.sock, [json.dumps(request).encode()], [devnull, stderr])
                deadline = time.monotonic() + _REPLY_SECONDS
                while not self._replies and not self._gone and self._read(deadline - time.monotonic()):
                    pass
                reply = self._replies.pop(0) if self._replies else {"error": "the fork server did not answer"}
        finally:
            os.close(devnull)
        if "pid" not in reply:
            raise OSError(reply.get("error", "the fork server gave no process"))
        return int(reply["pid"])

    def exit_code(self, pid: int, timeout: Optional[float]) -> Optional[int]:
        """Process ``pid``'s exit status once it ended (``-9`` if the server is gone); None on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while pid not in self._exits and not self._gone:
                if not self._read(None if deadline is None else deadline - time.monotonic()):
                    break
            if pid in self._exits:
                return self._exits[pid]
            return -signal.SIGKILL if self._gone else None  # siblings die with the server

    @staticmethod
    def signal_group(pid: int, signum: int) -> None:
        """Send ``signum`` to sibling ``pid``'s process group (siblings start no siblings of their own)."""
        try:
            os.killpg(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def _read(self, timeout: Optional[float]) -> bool:
        """With the lock held: take one message, waiting up to ``timeout``; False if none came."""
        ready, _, _ = select.select([self.sock], [], [], None if timeout is None else max(0.0, timeout))
        if not ready:
            return False
        try:
            data = self.sock.recv(1 << 16)
            message = json.loads(data) if data else None
        except (OSError, ValueError):
            message = None
        if not isinstance(message, dict):
            self._gone = True
        elif "exit" in message:
            self._exits[int(message["exit"])] = int(message["code"])
        else:
            self._replies.append(message)
        return True


_line: Optional[ServerLine] = None


def attach(sock: socket.socket, server_env: Mapping[str, str], runtime: Iterable[str] = ()) -> None:
    """In a task the fork server just forked: its end of the line, the server's start-up environment, and
    the variables that may differ from it (those its starter named)."""
    global _line
    _line = ServerLine(sock, server_env, runtime)


def current() -> Optional[ServerLine]:
    """This process's line to the fork server that forked it; None if no server forked it."""
    return _line
