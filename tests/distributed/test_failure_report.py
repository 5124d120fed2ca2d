"""A failing task is reported once: its traceback (or one line for a DistribError) and one summary.

Issue 21: distrib's excepthook and torch.distributed's wrapped each other
until ``RecursionError`` (about 4,000 lines for one ``ValueError``). These
tests run real jobs, make the last task fail in each way a job fails (its own
exception, a distrib diagnosis, a crash inside a callback during ``fit``, a
signal) and count what a person sees: the traceback exactly once, a bounded
number of lines, and one launcher summary naming the task and the cause.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from distrib.testing import free_port

pytestmark = [pytest.mark.timeout(300), pytest.mark.skipif(os.name != "posix", reason="POSIX only")]

DEADLINE = 240

# The last task fails (argv[1] says how); the others wait in a collective and are stopped.
SCRIPT = '''
import os, signal, sys
import torch
import distrib
from distrib.errors import DistribError

how = sys.argv[1]
strategy = distrib.MultiWorkerMirroredStrategy()
resolver = strategy.cluster_resolver
last = resolver.task_id == strategy.num_replicas_in_sync - 1


class Crash(distrib.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if last and batch == 1:
            raise RuntimeError("the callback broke")


if how == "callback":
    with strategy.scope():
        model = distrib.Model(torch.nn.Linear(4, 1))
        model.compile(optimizer="sgd", loss="mse")
    model.fit(torch.randn(64, 4), torch.randn(64, 1), batch_size=8, epochs=1, verbose=0,
              callbacks=[Crash()])
elif last:
    if how == "user":
        raise ValueError("boom in the user's code")
    if how == "distrib":
        raise DistribError("a diagnosis distrib made")
    os.kill(os.getpid(), {"kill": signal.SIGKILL, "term": signal.SIGTERM}[how])
strategy.reduce(distrib.ReduceOp.SUM, strategy.run(lambda: torch.ones(1)), axis=None)
strategy.reduce(distrib.ReduceOp.SUM, strategy.run(lambda: torch.ones(1)), axis=None)
'''

CAUSES = {
    "user": ("ValueError: boom in the user's code", 'raise ValueError("boom in the user\'s code")'),
    "callback": ("RuntimeError: the callback broke", 'raise RuntimeError("the callback broke")'),
    "distrib": ("DistribError: a diagnosis distrib made", None),
    "kill": (None, None),
    "term": (None, None),
}
SUMMARIES = {
    "kill": "was killed by SIGKILL",
    "term": "was killed by SIGTERM",
}


def _launch(script, how: str, workers: int) -> subprocess.CompletedProcess:
    # DISTRIB_LAUNCH_FORK=1 (docs/launcher.md): the tasks fork from one preloaded server, one import of torch
    env = dict(os.environ, COLUMNS="100", DISTRIB_LAUNCH_FORK="1")
    return subprocess.run([sys.executable, "-m", "distrib", "launch", "--workers", str(workers),
                           str(script), how], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=DEADLINE, env=env)


def _check(how: str, workers: int, text: str, returncode: int) -> None:
    lines = text.splitlines()
    last = f"worker {workers - 1}"
    assert returncode == 1, text
    assert "RecursionError" not in text and "Error in sys.excepthook" not in text, text[-3000:]
    assert len(lines) < 40 + 5 * workers, f"{len(lines)} lines:\n{text}"
    cause, raise_line = CAUSES[how]
    tracebacks = [l for l in lines if l.endswith("Traceback (most recent call last):")]
    if raise_line is not None:  # a Python exception: its traceback once, from the failing task
        assert len(tracebacks) == 1 and tracebacks[0].startswith(f"[{last}] "), text
        assert sum(raise_line in l for l in lines) == 1, text
        assert f"[{last}] {cause}" in lines, text
    else:
        assert tracebacks == [], text
    if how == "distrib":
        # On a busy machine a task may first say whom it waits for (start-up progress, not
        # a report of the failure); everything else it prints must be the one cause line.
        own = [l for l in lines if l.startswith(f"[{last}] ") and " to join (timeout " not in l]
        assert own == [
            f"[{last}] distrib: {last}: {cause} (full traceback: set DISTRIB_VERBOSE=1 or use "
            "distrib launch --verbose)"], text
    assert "[rank" not in text, text  # torch's own prefix is not added on top of the launcher's
    summaries = [l for l in lines if l.startswith(f"distrib launch: {last} ")]
    assert len(summaries) == 1, text
    expected = f"({cause})" if cause else SUMMARIES[how]
    assert expected in summaries[0], summaries[0]
    assert lines[-1] == summaries[0], text


@pytest.mark.parametrize("how", ["user", "distrib", "callback", "kill",
                                 pytest.param("term", marks=pytest.mark.slow)])
def test_two_workers_each_failure_is_reported_once(write_script, how):
    script = write_script("fail.py", SCRIPT)
    proc = _launch(script, how, 2)
    _check(how, 2, proc.stdout, proc.returncode)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["user", "distrib", "callback", "kill"])
def test_eight_workers_each_failure_is_reported_once(write_script, how):
    script = write_script("fail.py", SCRIPT)
    proc = _launch(script, how, 8)
    _check(how, 8, proc.stdout, proc.returncode)


def _torchrun() -> str:
    path = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    if path is None:
        pytest.skip("torchrun not installed next to this interpreter")
    return path


@pytest.mark.slow
@pytest.mark.parametrize("how", ["user", "distrib"])
def test_under_torchrun_the_traceback_is_printed_once_and_the_root_cause_names_it(write_script, how):
    script = write_script("fail.py", SCRIPT)
    proc = subprocess.run([_torchrun(), "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
                           "--master_port", str(free_port("127.0.0.1")), str(script), how],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=DEADLINE)
    text, lines = proc.stdout, proc.stdout.splitlines()
    cause, raise_line = CAUSES[how]
    assert proc.returncode == 1, text
    assert "RecursionError" not in text and len(lines) < 80, f"{len(lines)} lines:\n{text}"
    if raise_line is not None:
        assert sum(raise_line in l for l in lines) == 1, text
    else:
        assert sum(f"[rank1]: distrib: rank 1: {cause}" in l for l in lines) == 1, text
    # torchrun's agent summary names the failing rank's exception instead of a link to its docs
    root = text[text.index("Root Cause"):]
    assert "rank      : 1" in root and f"traceback : rank 1: {cause}" in root, root


def test_under_slurm_each_task_reports_once(write_script):
    """``srun`` has no launcher of distrib's: each task's own report is all there is, once."""
    script = write_script("fail.py", SCRIPT)
    port = free_port("127.0.0.1")
    procs = []
    for procid in range(2):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TF_CONFIG"))}
        env.update(SLURM_PROCID=str(procid), SLURM_NTASKS="2", SLURM_JOB_NODELIST="127.0.0.1",
                   SLURM_TASKS_PER_NODE="2", MASTER_PORT=str(port))
        env.pop("RANK", None)
        env.pop("DISTRIB_LAUNCHED", None)
        procs.append(subprocess.Popen([sys.executable, str(script), "user"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    failing = procs[1].communicate(timeout=DEADLINE)[0]
    procs[0].kill()
    procs[0].communicate(timeout=DEADLINE)
    assert procs[1].returncode == 1, failing
    lines = failing.splitlines()
    assert "RecursionError" not in failing and len(lines) < 20, failing
    assert sum("Traceback (most recent call last):" in l for l in lines) == 1, failing
    assert lines[-1].endswith("ValueError: boom in the user's code"), failing
