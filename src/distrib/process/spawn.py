"""Start one local process, send signals to it, collect its exit status (POSIX).

The one way distrib starts processes on this machine (`distrib launch`'s
tasks and a task's local replicas alike), with these guarantees:

* **Children die with their parent.** On Linux a tiny ``python -S`` stub sets
  ``PR_SET_PDEATHSIG`` (SIGKILL) and then ``exec``\\ s the real command (the
  setting survives ``exec``), so a parent that is itself killed with SIGKILL
  leaves no child running. The child still runs as the very command given
  (``python script.py ...``), same process id, no wrapper frames. (The signal
  fires when the *thread* that started the child ends: start children from a
  thread that lives as long as they should.)
* **Process groups.** ``new_session=True`` (the launcher's tasks) puts the
  child in its own session, hence its own process group: a Ctrl-C typed at
  the terminal reaches only the parent, which then stops the children in an
  orderly way, and `signal_task` reaches the processes the child started
  (data-loader workers, for instance). ``new_session=False`` (local replicas)
  keeps the child in the parent's group, so a Ctrl-C reaches all of them.
* **Output** goes where the caller says: pipes to read line by line (the
  launcher), ``DEVNULL``, or a file (a replica's standard error kept for the
  error report). Standard input is always closed.
* **Exit status** is collected by `wait_or_kill` (a child stuck past its
  time is killed, never waited on forever) and described by
  `distrib.process.exit_codes.describe_returncode`.

Example:
    >>> python_command("train.py", ["--epochs", "3"])[1:]
    ['train.py', '--epochs', '3']
    >>> python_command("pkg.train", [], module=True)[1:]
    ['-m', 'pkg.train']
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import IO, Any, List, Mapping, Optional, Sequence, Union

__all__ = ["python_command", "start_process", "start_task", "signal_task", "kill_leftovers",
           "wait_or_kill", "Output"]

#: Where a child's standard output or error goes: ``subprocess.PIPE``,
#: ``subprocess.DEVNULL``, an open file, or ``None`` (inherit the parent's).
Output = Union[int, IO[Any], None]

# argv: <launcher pid> <program> <args...>. Exits quietly if the launcher is
# already gone (the death signal would never come).
_DEATH_SIGNAL_STUB = (
    "import ctypes,os,sys\n"
    "try:\n"
    "    ctypes.CDLL(None,use_errno=True).prctl(1,9,0,0,0)\n"  # PR_SET_PDEATHSIG, SIGKILL
    "except Exception:\n"
    "    pass\n"
    "if os.getppid()!=int(sys.argv[1]):\n"
    "    os._exit(1)\n"
    "os.execvp(sys.argv[2],sys.argv[2:])\n"
)


def python_command(target: str, args: Sequence[str], *, module: bool = False,
                   python: Optional[str] = None) -> List[str]:
    """``[python, script, *args]`` or ``[python, -m, module, *args]``."""
    exe = python or sys.executable
    head = [exe, "-m", target] if module else [exe, target]
    return head + [str(a) for a in args]


def start_process(command: Sequence[str], env: Mapping[str, str], cwd: Optional[str] = None, *,
                  stdout: Output = subprocess.PIPE, stderr: Output = subprocess.PIPE,
                  new_session: bool = True, pass_fds: Sequence[int] = ()) -> subprocess.Popen:
    """Start ``command``, tied to this process's life (see the module docstring).

    Args:
        command: the program and its arguments (``[python, script, ...]``).
        env: the child's whole environment.
        cwd: its working directory (default: this process's).
        stdout: where its standard output goes (default: a pipe).
        stderr: where its standard error goes (default: a pipe).
        new_session: run it in a session (process group) of its own.
        pass_fds: file descriptors the child keeps (all others are closed).

    Returns:
        The `subprocess.Popen`; its stdin is ``/dev/null``.
    """
    argv = [str(a) for a in command]
    if sys.platform.startswith("linux"):
        argv = [sys.executable, "-S", "-E", "-c", _DEATH_SIGNAL_STUB, str(os.getpid())] + argv
    return subprocess.Popen(
        argv,
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        start_new_session=new_session,
        close_fds=True,
        pass_fds=tuple(pass_fds),
    )


def start_task(command: Sequence[str], env: Mapping[str, str],
               cwd: Optional[str] = None) -> subprocess.Popen:
    """A launcher task: `start_process` with piped stdout/stderr, in a new session."""
    return start_process(command, env, cwd)


def wait_or_kill(proc: subprocess.Popen, timeout: float) -> int:
    """The exit status of ``proc``, killing it (and its group) if it runs past ``timeout`` seconds.

    Returns:
        As `subprocess` reports it: ``0``, the exit code, or ``-N`` (killed by
        signal ``N``; ``-9`` when this function had to kill it).
    """
    try:
        return proc.wait(timeout=max(0.0, timeout))
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def signal_task(proc: subprocess.Popen, signum: int) -> None:
    """Send ``signum`` to the task's process group; a task already gone is ignored."""
    if proc.returncode is not None:
        return
    try:
        os.killpg(proc.pid, signum)
    except ProcessLookupError:
        pass
    except PermissionError:
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass


def kill_leftovers(pgid: int) -> None:
    """SIGKILL whatever still runs in a finished task's process group."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
