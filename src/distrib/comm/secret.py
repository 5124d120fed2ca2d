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

import os
import secrets
from typing import Mapping, Optional

from distrib.errors import DistribError

__all__ = ["SECRET_ENV", "SECRET_FILE_ENV", "JobSecretError", "job_secret", "new_secret"]

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
