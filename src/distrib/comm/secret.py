"""The job secret: what proves a connection belongs to the job.

`distrib launch` creates one random secret per job and hands it to its tasks
in ``DISTRIB_JOB_SECRET``. Other launchers pass it the same way, or name a
file that holds it in ``DISTRIB_JOB_SECRET_FILE`` (a mounted Kubernetes
secret, a file SLURM's job script wrote with mode 0600). The secret is never
logged, never written into ``TF_CONFIG`` and never stored in a checkpoint.

Example:
    >>> import os
    >>> os.environ["DISTRIB_JOB_SECRET"] = "s3cret-for-this-job"
    >>> job_secret()
    b's3cret-for-this-job'
    >>> del os.environ["DISTRIB_JOB_SECRET"]
"""
from __future__ import annotations

import ipaddress
import logging
import os
import secrets
import socket
import stat
from typing import List, Mapping, Optional

from distrib.errors import DistribError

__all__ = ["SECRET_ENV", "SECRET_FILE_ENV", "JobSecretError", "job_secret", "new_secret", "cluster_secret",
           "local_secret_path", "is_loopback", "NO_SECRET_ADVICE"]

log = logging.getLogger("distrib.comm")
NO_SECRET_ADVICE = ("set one secret for every task: DISTRIB_JOB_SECRET, or DISTRIB_JOB_SECRET_FILE naming "
                    "a file only the job's user can read (a Kubernetes Secret mounted as a file, or a "
                    "0600 file on a filesystem every SLURM task can read)")
_WARNED: List[str] = []

SECRET_ENV = "DISTRIB_JOB_SECRET"
SECRET_FILE_ENV = "DISTRIB_JOB_SECRET_FILE"
_MAX_SECRET_BYTES = 4096


class JobSecretError(DistribError, ValueError):
    """The configured job secret cannot be used (empty, unreadable, too long)."""


def new_secret() -> str:
    """A fresh random secret (256 bits, URL-safe text) for one job."""
    return secrets.token_urlsafe(32)


def job_secret(environ: Optional[Mapping[str, str]] = None) -> Optional[bytes]:
    """The job's secret from the environment, or None when none is configured.

    ``DISTRIB_JOB_SECRET`` wins over ``DISTRIB_JOB_SECRET_FILE``. Surrounding
    white space (a trailing newline in a file) is not part of the secret.

    Raises:
        JobSecretError: the variable is set but empty, or the file cannot be
            read, is empty or is larger than 4 KiB. The message names the
            variable (and the file), never the secret.
    """
    env = os.environ if environ is None else environ
    if SECRET_ENV in env:
        value = env[SECRET_ENV].strip().encode("utf-8")
        if not value:
            raise JobSecretError(f"{SECRET_ENV} is set but empty: give the job's secret, or unset it")
        if len(value) > _MAX_SECRET_BYTES:
            raise JobSecretError(f"{SECRET_ENV} is longer than {_MAX_SECRET_BYTES} bytes")
        return value
    path = env.get(SECRET_FILE_ENV)
    if not path:
        return None
    try:
        with open(path, "rb") as handle:
            value = handle.read(_MAX_SECRET_BYTES + 1).strip()
    except OSError as exc:
        raise JobSecretError(f"{SECRET_FILE_ENV}={path}: cannot read the job secret: "
                             f"{exc.strerror or exc}") from None
    if not value:
        raise JobSecretError(f"{SECRET_FILE_ENV}={path}: the file is empty")
    if len(value) > _MAX_SECRET_BYTES:
        raise JobSecretError(f"{SECRET_FILE_ENV}={path}: the file is larger than {_MAX_SECRET_BYTES} bytes")
    return value


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` resolves to is a loopback address (False if it does not resolve)."""
    try:
        return all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback
                   for info in socket.getaddrinfo(host, None))
    except (OSError, ValueError):
        return False


def local_secret_path(environ: Optional[Mapping[str, str]] = None) -> str:
    """Where this user's automatic single-host secret lives."""
    env = os.environ if environ is None else environ
    runtime_dir = env.get("XDG_RUNTIME_DIR")
    if runtime_dir and os.path.isdir(runtime_dir) and os.stat(runtime_dir).st_uid == os.getuid():
        return os.path.join(runtime_dir, "distrib", "job-secret")
    return os.path.join(os.path.expanduser("~"), ".cache", "distrib", "job-secret")


def _local_secret(path: str) -> bytes:
    """This user's per-host secret at ``path``, created once (atomically, mode 0600) if absent."""
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        if not os.path.exists(path):
            temp = f"{path}.{os.getpid()}.{secrets.token_hex(4)}"
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, new_secret().encode())
            finally:
                os.close(fd)
            try:
                os.link(temp, path)  # fails if another task created it first: then theirs is the one
            except FileExistsError:
                pass
            finally:
                os.unlink(temp)
    except OSError as exc:
        raise JobSecretError(f"{path}: cannot create this user's job secret ({exc.strerror or exc}); set "
                             f"DISTRIB_JOB_SECRET or DISTRIB_JOB_SECRET_FILE, or XDG_RUNTIME_DIR to a "
                             f"writable directory") from None
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise JobSecretError(f"{path}: cannot read this user's job secret: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if info.st_uid != os.getuid() or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise JobSecretError(f"{path}: this user's job secret file must belong to this user with "
                                 f"mode 0600; remove it (distrib creates a new one) or set "
                                 f"DISTRIB_JOB_SECRET")
        value = handle.read(_MAX_SECRET_BYTES + 1).strip()
    if not value or len(value) > _MAX_SECRET_BYTES:
        raise JobSecretError(f"{path}: this user's job secret file is empty or too large; remove it")
    return value


def cluster_secret(chief_host: str, exposes: str = "read and write the job's rendezvous keys",
                   environ: Optional[Mapping[str, str]] = None) -> Optional[bytes]:
    """The secret of a job whose chief listens on ``chief_host``, or None (said once) if it has none.

    ``DISTRIB_JOB_SECRET`` / ``DISTRIB_JOB_SECRET_FILE`` first; else, with the
    chief on loopback, this user's per-host secret (`local_secret_path`);
    else None, after one warning line naming what is exposed (``exposes``)
    and how to set a secret. Every task decides the same way, since each sees
    the same chief host.
    """
    configured = job_secret(environ)
    if configured is not None:
        return configured
    if is_loopback(chief_host):
        return _local_secret(local_secret_path(environ))
    if not _WARNED:
        _WARNED.append(chief_host)
        log.warning("distrib: no job secret and the chief %s is beyond loopback: anyone who can "
                    "reach the job's ports can %s; %s", chief_host, exposes, NO_SECRET_ADVICE)
    return None
