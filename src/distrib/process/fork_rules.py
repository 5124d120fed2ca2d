"""Whether a fork of a preloaded server starts a task exactly as a new process would (`can_fork`).

A fork shares what the server loaded before it, so it is only exact for
``python script ...`` or ``python -m module ...`` with this interpreter, an
environment that differs from the server's only in variables read after
start-up (`RUNTIME_VARIABLES`, ``DISTRIB_*``, an equal inductor cache
directory), and no preloaded module's name shadowed beside the script;
`distrib.process.fork_client` forks only where this says so.

Example:
    >>> can_fork(["/usr/bin/python3", "train.py"], {"TF_CONFIG": "{}"}, {"TF_CONFIG": "..."},
    ...          python="/usr/bin/python3", cwd="/")
    True
    >>> can_fork(["/usr/bin/python3", "train.py"], {"PYTHONHASHSEED": "1"}, {"PYTHONHASHSEED": "2"},
    ...          python="/usr/bin/python3", cwd="/")
    False
"""
from __future__ import annotations

import getpass
import os
import re
import sys
import tempfile
from typing import Iterable, Mapping, Optional, Sequence

from distrib.process.fork_server import PRELOADED

__all__ = ["RUNTIME_VARIABLES", "INDUCTOR_CACHE_DIR", "can_fork", "read_at_run_time"]

#: Variables a task reads only once it runs (besides ``DISTRIB_*``): they may differ between tasks
#: that fork from one server. (``OMP_NUM_THREADS`` is not one: OpenMP and OpenBLAS read it when they load.)
#: The others are read by what loads after the fork (none is read while `PRELOADED` loads), and a
#: launching process often sets them itself: distrib's Keras saving sets ``KERAS_BACKEND``, its gloo
#: setup ``GLOO_SOCKET_IFNAME``, pytest ``PYTEST_CURRENT_TEST`` (for every test).
RUNTIME_VARIABLES = frozenset({
    "TF_CONFIG", "COLUMNS", "LINES", "CUDA_VISIBLE_DEVICES",
    "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
    "KERAS_BACKEND", "KERAS_HOME", "GLOO_SOCKET_IFNAME", "PYTEST_CURRENT_TEST",
})

#: Read by ``torch._dynamo`` as it loads (in the server), and set by it to its default where unset:
#: a launching process that has made an optimizer has it, its tasks' environments too.
INDUCTOR_CACHE_DIR = "TORCHINDUCTOR_CACHE_DIR"
#: What the default of `INDUCTOR_CACHE_DIR` is made of: the user's name and the temporary directory.
_CACHE_DEFAULT_INPUTS = ("LOGNAME", "USER", "LNAME", "USERNAME", "TMPDIR", "TEMP", "TMP")


def read_at_run_time(key: str, runtime: Iterable[str] = ()) -> bool:
    """Whether variable ``key`` may differ between a server and a task it forks (read only once the
    task runs): `RUNTIME_VARIABLES`, ``DISTRIB_*`` and the caller's own ``runtime`` names."""
    return key in RUNTIME_VARIABLES or key.startswith("DISTRIB_") or key in runtime


def can_fork(command: Sequence[str], env: Mapping[str, str], server_env: Mapping[str, str], *,
             python: str = sys.executable, cwd: Optional[str] = None, runtime: Iterable[str] = ()) -> bool:
    """Whether a fork of a server started with ``server_env`` would start ``command`` as a new process would.

    ``runtime`` names more variables that may differ: the caller's own, which
    nothing reads before the task's program does (a test's ``PS_TEST_DIR``).
    """
    if len(command) < 2 or command[0] != python:
        return False
    if command[1] == "-m":
        if len(command) < 3:
            return False
        home = cwd or os.getcwd()
    elif command[1].startswith("-"):
        return False
    else:
        script = command[1] if os.path.isabs(command[1]) else os.path.join(cwd or os.getcwd(), command[1])
        home = os.path.dirname(os.path.realpath(script))
    for key in set(env) ^ set(server_env) | {k for k in env if env[k] != server_env.get(k)}:
        if key == INDUCTOR_CACHE_DIR:
            mine = _inductor_cache_dir(env)
            if key not in runtime and (mine is None or mine != _inductor_cache_dir(server_env)):
                return False
        elif not read_at_run_time(key, runtime):
            return False
    tops = {name.partition(".")[0] for name in PRELOADED}
    return not any(os.path.exists(os.path.join(home, name)) or os.path.exists(os.path.join(home, name + ".py"))
                   for name in tops)


def _inductor_cache_dir(env: Mapping[str, str]) -> Optional[str]:
    """The directory ``torch._dynamo`` fixes as it loads in a process with ``env``; None where unknown.

    Its ``TORCHINDUCTOR_CACHE_DIR``, made absolute (None for a relative one: it
    depends on the directory the process loads in), else torch's default,
    ``<tempdir>/torchinductor_<user>``, computed here when ``env`` names the
    same user and temporary directory as this process (None otherwise).

    Example (user ``root``, temporary directory ``/tmp``):
        ``{}`` -> ``/tmp/torchinductor_root``; ``{"TORCHINDUCTOR_CACHE_DIR": "/c/"}`` -> ``/c``;
        ``{"TORCHINDUCTOR_CACHE_DIR": "c"}`` -> None.
    """
    value = env.get(INDUCTOR_CACHE_DIR)
    if value is not None:
        return os.path.normpath(value) if os.path.isabs(value) else None
    if any(env.get(name) != os.environ.get(name) for name in _CACHE_DEFAULT_INPUTS):
        return None
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid_{os.getuid()}"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))
