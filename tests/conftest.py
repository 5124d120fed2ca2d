"""Fixtures shared by unit and distributed tests (keep this file small)."""
from __future__ import annotations

import gc
import os
import textwrap
from pathlib import Path
from typing import Callable, Optional

import pytest

# The suite runs on CPU, GPU host or not: its multi-process tests compare CPU
# runs bit for bit (with each other, with references computed here, with
# TensorFlow's CPU outputs), and a task that found a GPU would train there.
# So the GPUs are hidden before anything asks torch about CUDA. The tests
# marked `cuda` need a GPU: `DISTRIB_TEST_GPU=1 pytest -m cuda` runs them with
# the GPUs visible (./scripts/test.sh does so where torch sees one).
if os.environ.get("DISTRIB_TEST_GPU") != "1":
    os.environ["CUDA_VISIBLE_DEVICES"] = ""

# Two pytest processes and their tasks share the cores: an OpenMP thread with no work sleeps instead
# of spinning (OMP_WAIT_POLICY=PASSIVE), so it leaves the core to a process that has work. The threads
# and how the work is split between them are unchanged: every result is the same.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _ports_of_this_test_process(lowest: int = 10000) -> Optional[str]:
    """A ``DISTRIB_PORT_RANGE`` for the tasks this pytest process starts.

    Below the kernel's ephemeral range, so no program's ``bind(0)`` (gloo's
    listeners, another test's store) or outgoing connection takes a port
    between its choice and its use, and disjoint from the other xdist
    workers' ranges. None where the ephemeral range leaves too little room.
    """
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            first_ephemeral = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    workers = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1), 1)
    index = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:] or 0) % workers
    size = (first_ephemeral - lowest) // workers
    if size < 500:
        return None
    start = lowest + index * size
    return f"{start}-{start + size - 1}"


_PORTS = _ports_of_this_test_process()
if _PORTS is not None:
    os.environ["DISTRIB_PORT_RANGE"] = _PORTS


@pytest.fixture(scope="module")
def mnist_npz(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``distrib.datasets.mnist.load_data()``'s arrays in one Keras-style npz (for ``DISTRIB_MNIST``):
    a module's example runs read the data instead of each building it."""
    import numpy as np

    from distrib.datasets import mnist

    (x_train, y_train), (x_test, y_test) = mnist.load_data()
    path = tmp_path_factory.mktemp("mnist") / "mnist.npz"
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return str(path)


@pytest.fixture
def write_script(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write a small dedented Python file under ``tmp_path`` and return its path.

    Example:
        >>> path = write_script("hello.py", '''
        ...     print("hello")
        ... ''')
    """

    def write(name: str, source: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source).lstrip("\n"), encoding="utf-8")
        return path

    return write


@pytest.fixture(autouse=True)
def _fresh_secret_mismatch_log(monkeypatch):
    """Each test starts with this process's log of mismatched job secrets empty.

    The log is process-wide and bounded (it names a limited number of hosts), and a rendezvous
    timeout quotes it: hosts an earlier test recorded must neither crowd out the ones a later test
    looks for nor appear in a later test's error message, whatever order the tests ran in.
    """
    import sys

    module = sys.modules.get("distrib.comm.store_server")
    if module is not None:  # not imported yet: nothing recorded in this process
        monkeypatch.setattr(module, "_MISMATCHES", module.HostLog())


@pytest.fixture(scope="session")
def docs_site(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """The documentation site's one strict build in this run (tests/docs_site.py), built by whoever asks first."""
    import docs_site as site

    worker = hasattr(request.config, "workerinput")  # an xdist worker: its basetemp is below the run's
    return site.build_once(site.shared_tmp_of_the_run(tmp_path_factory.getbasetemp(), worker))


# ---------------------------------- what the suite says before its first dot (issue 50)
import suite_timing  # noqa: E402 - tests/ is on sys.path, as this file's directory

_announced = False


def _say(config: pytest.Config, line: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_line(line)


def _announce(config: pytest.Config, nodeids: list, processes: int) -> None:
    global _announced
    if _announced:
        return
    _announced = True
    seed = config.getoption("randomly_seed", None) if config.pluginmanager.hasplugin("randomly") else None
    _say(config, suite_timing.announcement(nodeids, processes, seed if isinstance(seed, int) else None))


def pytest_sessionstart(session: pytest.Session) -> None:
    processes = session.config.getoption("numprocesses", None)
    if processes and not hasattr(session.config, "workerinput"):  # the xdist controller
        _say(session.config, suite_timing.HOLD_ON.format(n=processes))


def pytest_collection_finish(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # one process: it collected, and says so
        _announce(session.config, [item.nodeid for item in session.items], 1)
    # What collection loaded (torch, Keras, every test module: ~10^6 objects) lives as long as the
    # process: the cyclic collector leaves it alone from now on, so that a full collection (Keras's
    # clear_session, a test's own gc.collect, Python's own) scans what the tests made, not 1 s of heap.
    gc.collect()
    gc.freeze()


def pytest_configure(config: pytest.Config) -> None:
    """Each of ``-n N`` pytest processes computes on its share of the cores (unless OMP_NUM_THREADS says).

    torch's default, a thread per core in every process, makes N processes' kernels (and the
    tasks they start) wait on each other's spinning threads: a test of bitwise-equal optimizer
    steps took ten times as long in the suite as alone. The tasks the harness starts have their
    own setting (``OMP_NUM_THREADS=1``); only this process's torch is set, not its environment.
    """
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if workers > 1 and "OMP_NUM_THREADS" not in os.environ:
        import torch

        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        torch.set_num_threads(max(1, cores // workers))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids: list) -> None:  # noqa: ANN001 - xdist's hook
    _announce(node.config, list(ids), node.config.getoption("numprocesses", None) or 1)
