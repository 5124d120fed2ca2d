"""``distrib env``: the facts a bug report needs, in one screen.

Versions (distrib, Python, torch and its CUDA build, the packages distrib
uses), the devices torch sees, the device and ``torch.distributed`` backend
this process would train with, the cluster it would join (``TF_CONFIG``,
torchrun's or SLURM's variables, as `distrib.cluster.resolve_cluster` reads
them) and where the job secret would come from. The secret itself is never
printed, nor any variable whose name says it holds one.

Example:
    >>> text = env_report({"TF_CONFIG": '{"cluster": {"worker": ["h0:2222", "h1:2222"]}, '
    ...                    '"task": {"type": "worker", "index": 1}}', "DISTRIB_JOB_SECRET": "x" * 43})
    >>> print(next(line for line in text.splitlines() if line.startswith("cluster")))
    cluster:      TF_CONFIG: worker 1 of 2 tasks (worker: 2)
    >>> print(next(line for line in text.splitlines() if line.startswith("job secret")))
    job secret:   DISTRIB_JOB_SECRET (43 bytes; not shown)
"""
from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
import textwrap
from typing import List, Mapping, Optional, Tuple

from distrib.utils.public_names import public_dir

__all__ = ["env_report", "SHOWN_VARIABLES", "PACKAGES"]


def __dir__() -> "list[str]":
    return public_dir(globals(), __all__)


SHOWN_VARIABLES: Tuple[str, ...] = (
    "TF_CONFIG", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
    "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_NPROCS",
    "SLURM_LOCALID", "SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")
"""The cluster and device variables `env_report` lists when set; every ``DISTRIB_*`` one is listed too."""

PACKAGES: Tuple[str, ...] = ("numpy", "safetensors", "fsspec", "tqdm", "cloudpickle", "grpcio",
                             "tensorboard", "matplotlib", "scikit-learn", "keras")
"""The packages whose versions `env_report` prints (the last four are optional)."""

_SECRET_WORDS = ("SECRET", "TOKEN", "PASSWORD", "KEY")
_MAX_VALUE_CHARS = 200
_LABEL_WIDTH = 14
_WIDTH = 80


def env_report(environ: Optional[Mapping[str, str]] = None) -> str:
    """The report ``distrib env`` prints, for ``environ`` (default: this process's environment).

    Each line is ``label: value``; a part that cannot be determined says why
    instead of raising (a malformed ``TF_CONFIG`` shows its one-line error).
    """
    env = dict(os.environ if environ is None else environ)
    rows: List[Tuple[str, str]] = [
        ("distrib", f"{_version('distrib')} ({os.path.dirname(os.path.abspath(__file__))})"),
        ("Python", f"{platform.python_version()} ({sys.executable})"),
        ("platform", f"{platform.platform()}, {os.cpu_count()} CPUs"),
    ]
    rows += _torch_rows(env)
    rows.append(("packages", ", ".join(f"{name} {_version(name)}" for name in PACKAGES)))
    rows.append(_cluster_row(env))
    rows.append(("job secret", _secret_source(env)))
    rows.append(("variables", _variables(env)))
    return "\n".join(_line(label, value) for label, value in rows) + "\n"


def _line(label: str, value: str) -> str:
    """``label: value``, wrapped at 80 columns under the value's column (a word longer than that stays whole)."""
    first, *more = value.split("\n")
    lines = [textwrap.fill(first, _WIDTH, initial_indent=f"{label + ':':<{_LABEL_WIDTH}}",
                           subsequent_indent=" " * _LABEL_WIDTH, break_long_words=False,
                           break_on_hyphens=False) if first else label + ":"]
    lines += [textwrap.fill(text, _WIDTH, initial_indent="  ", subsequent_indent=" " * 4,
                            break_long_words=False, break_on_hyphens=False) for text in more]
    return "\n".join(lines)


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _torch_rows(env: Mapping[str, str]) -> List[Tuple[str, str]]:
    try:
        import torch
    except ImportError as exc:  # distrib needs torch; say so instead of failing the report
        return [("torch", f"cannot be imported ({exc})")]
    cuda = torch.version.cuda or "none (a CPU build)"
    rows = [("torch", f"{torch.__version__} (CUDA build: {cuda}; {os.path.dirname(torch.__file__)})")]
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    gpus = [f"cuda:{i} {torch.cuda.get_device_name(i)}" for i in range(count)]
    rows.append(("devices", ", ".join(gpus) if gpus else "CPU only: torch sees no CUDA device"))
    rows.append(("this process", _device_and_backend(env, count)))
    return rows


def _device_and_backend(env: Mapping[str, str], gpu_count: int) -> str:
    """The device and backend `MultiWorkerMirroredStrategy` would pick here, with default options."""
    import torch

    from distrib.comm.options import CommunicationOptions
    from distrib.errors import DistribError
    from distrib.strategies.local_replicas.local_gpu import local_task_index

    device = torch.device("cpu")
    if gpu_count:
        try:
            device = torch.device("cuda", local_task_index(_resolver_or_none(env), env) % gpu_count)
        except (DistribError, ValueError) as exc:
            return f"cannot choose a GPU: {exc}"
    backend = CommunicationOptions().backend_for(device)
    return f"trains on {device}, torch.distributed backend {backend}"


def _resolver_or_none(env: Mapping[str, str]) -> object:
    from distrib.cluster import resolve_cluster
    from distrib.errors import DistribError

    try:
        return resolve_cluster(env)
    except (DistribError, ValueError):
        return None


def _cluster_row(env: Mapping[str, str]) -> Tuple[str, str]:
    from distrib.cluster import resolve_cluster
    from distrib.errors import DistribError

    try:
        resolver = resolve_cluster(env)
        spec = resolver.cluster_spec().as_dict()
    except (DistribError, ValueError) as exc:
        return "cluster", f"refused: {type(exc).__name__}: {exc}"
    if not spec:
        return "cluster", "none: no TF_CONFIG, torchrun or SLURM variables, so this process runs alone"
    source = type(resolver).__name__.replace("ClusterResolver", "")
    source = {"TFConfig": "TF_CONFIG", "Torchrun": "torchrun's variables", "Slurm": "SLURM's variables"}.get(
        source, source)
    jobs = ", ".join(f"{job}: {len(tasks)}" for job, tasks in spec.items())
    total = sum(len(tasks) for tasks in spec.values())
    task = f"{resolver.task_type} {resolver.task_id}" if resolver.task_type else "no task of its own"
    return "cluster", f"{source}: {task} of {total} tasks ({jobs})"


def _secret_source(env: Mapping[str, str]) -> str:
    from distrib.comm.secret import SECRET_ENV, SECRET_FILE_ENV, JobSecretError, job_secret, local_secret_path

    try:
        secret = job_secret(env)
    except JobSecretError as exc:
        return f"refused: {exc}"
    if secret is not None and SECRET_ENV in env:
        return f"{SECRET_ENV} ({len(secret)} bytes; not shown)"
    if secret is not None:
        return f"the file {SECRET_FILE_ENV}={env[SECRET_FILE_ENV]} ({len(secret)} bytes; not shown)"
    return (f"none set: distrib launch makes one per job; a job whose chief is on this host uses "
            f"{local_secret_path(env)}; one beyond it runs unauthenticated ({SECRET_ENV} or {SECRET_FILE_ENV})")


def _variables(env: Mapping[str, str]) -> str:
    names = [n for n in SHOWN_VARIABLES if n in env]
    names += sorted(n for n in env if n.startswith("DISTRIB_") and n not in names)
    if not names:
        return "none of distrib's, torchrun's or SLURM's are set"
    return "".join(f"\n{name}={_shown(name, env[name])}" for name in names)


def _shown(name: str, value: str) -> str:
    if any(word in name.upper() for word in _SECRET_WORDS) and not name.endswith("_FILE"):
        return "(set; not shown)"
    value = value.replace("\n", " ")
    if len(value) > _MAX_VALUE_CHARS:
        return f"{value[:_MAX_VALUE_CHARS]}... ({len(value)} characters)"
    return value

