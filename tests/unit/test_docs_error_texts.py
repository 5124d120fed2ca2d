"""Every error text docs/troubleshooting.md quotes is one the code produces.

The page quotes messages in its tables (the first code span of a row's first
cell, when it holds a message rather than a class name) and in its code
blocks. Each quote has a reproducer that makes the code produce the message
for real, and the test checks that the produced text contains the quote's
parts in order (``...`` in a quote stands for what varies: an address, a
reason). The reproducers that need several processes (a rendezvous, a lost
worker, the launcher) are in
``tests/distributed/test_docs_error_texts_processes.py``; a quote without a
reproducer, or a reproducer without its quote, fails here.
"""
from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import pickle
import re
import socket
import subprocess
import sys
import warnings
from typing import Callable, Dict, List, Optional

import pytest
import torch

import distrib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "troubleshooting.md"
PROCESSES = ROOT / "tests" / "distributed" / "test_docs_error_texts_processes.py"
_CODE_SPAN = re.compile(r"`([^`]+)`")
_TABLE_ROW = re.compile(r"^\|(?P<cell>[^|]*)\|")


def quoted_errors(text: str) -> List[str]:
    """The messages a page quotes: table rows' first code span with a space in it, and the lines of
    code blocks without a language (a ```` ```text ```` or ```` ```bash ```` block is an example, not a message)."""
    quotes: List[str] = []
    fence: Optional[str] = None  # the opening fence of the code block we are in, if any
    for line in text.splitlines():
        if line.startswith("```"):
            fence = line.strip() if fence is None else None
            continue
        if fence is not None:
            if fence == "```" and line.strip():
                quotes.append(line.strip())
            continue
        row = _TABLE_ROW.match(line)
        if row and not set(row.group("cell").strip()) <= set("-: "):
            span = _CODE_SPAN.search(row.group("cell"))
            if span and " " in span.group(1):
                quotes.append(span.group(1))
    return quotes


def assert_produced(quote: str, produced: str) -> None:
    """``produced`` holds the quote's parts (split at ``...``) in order."""
    parts = [p for p in (part.strip() for part in quote.split("...")) if p]
    assert parts, quote
    at = 0
    for part in parts:
        found = produced.find(part, at)
        assert found >= 0, f"the code does not produce {part!r} (of the quote {quote!r}) here:\n{produced}"
        at = found + len(part)


def quote_for(key: str) -> str:
    """The one quote of the page that ``key`` (a reproducer's name: part of its quote) identifies."""
    found = [q for q in quoted_errors(PAGE.read_text(encoding="utf-8")) if key in q]
    assert len(found) == 1, f"{key!r} identifies {len(found)} quotes of {PAGE.name}: {found}"
    return found[0]


def _error(call: Callable[[], object]) -> str:
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - whichever error the code raises is what the page quotes
        return f"{type(exc).__name__}: {exc}"
    raise AssertionError("no error was raised")


def _resolver(cluster: Dict[str, List[str]], task_type: str):
    from distrib.cluster import ClusterSpec, SimpleClusterResolver

    return SimpleClusterResolver(ClusterSpec(cluster), task_type=task_type, task_id=0)


def _one_line_error_of_a_cluster_task(tmp_path: pathlib.Path) -> str:
    config = {"cluster": {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}, "task": {"type": "worker", "index": 5}}
    env = dict(os.environ, TF_CONFIG=json.dumps(config), PYTHONPATH=str(ROOT / "src"))
    env.pop("DISTRIB_VERBOSE", None)
    proc = subprocess.run([sys.executable, "-c", "import distrib; distrib.MultiWorkerMirroredStrategy()"],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    return proc.stderr


def _tf_config(text: str) -> Callable[[], object]:
    return lambda: distrib.cluster.TFConfigClusterResolver(environ={"TF_CONFIG": text})


def _empty_tf_config(tmp_path: pathlib.Path) -> str:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _tf_config("{}")()
    return "\n".join(f"{w.category.__name__}: {w.message}" for w in seen)


def _host_that_does_not_resolve(tmp_path: pathlib.Path) -> str:
    from distrib.cluster.hostcheck import resolve_cluster_hosts

    spec = distrib.cluster.ClusterSpec({"worker": ["127.0.0.1:2222", "node7:2222"]})
    try:
        socket.getaddrinfo("node7", None)
    except OSError:
        return _error(lambda: resolve_cluster_hosts(spec, "TF_CONFIG"))
    pytest.skip("the host name node7 resolves on this machine")


def _address_of_another_machine(tmp_path: pathlib.Path) -> str:
    from distrib.cluster.hostcheck import own_interface

    return _error(lambda: own_interface("10.0.0.9", "worker 0", "10.0.0.9:2222"))


def _no_secret_beyond_loopback(tmp_path: pathlib.Path) -> str:
    program = ("import distrib\n"
               "from distrib.cluster import ClusterSpec, SimpleClusterResolver\n"
               "spec = ClusterSpec({'chief': ['10.0.0.9:2222'], 'worker': ['10.0.0.9:2223'], 'ps': ['10.0.0.9:2224']})\n"
               "distrib.ParameterServerStrategy(SimpleClusterResolver(spec, task_type='chief', task_id=0))\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("DISTRIB_JOB_SECRET", "DISTRIB_JOB_SECRET_FILE", "DISTRIB_PS_FUNCTIONS", "TF_CONFIG")}
    env["PYTHONPATH"] = str(ROOT / "src")
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                          env=env, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    return proc.stderr


def _registered_only(case: str) -> Callable[[pathlib.Path], str]:
    def produce(tmp_path: pathlib.Path) -> str:
        from test_ps_registered import _exporter, _importer, _Registry, apply, tied_model

        strategy = distrib.get_strategy()
        if case == "unregistered function":
            model = tied_model(2)
            return _error(lambda: _exporter(strategy, _Registry(model)).export_closure(lambda m: m, (model,), {}))
        if case == "unbuilt module":
            plain = torch.nn.Linear(2, 2)
            return _error(lambda: _exporter(strategy, _Registry(plain)).export_closure(apply, (plain, None), {}))
        if case == "pickle":
            return _error(lambda: _importer(strategy).loads_call(pickle.dumps(len)))
        from distrib.strategies.parameter_server import wire

        reference = object()
        call = wire.encode((reference, (), {}),
                           reference=lambda o: ("fn", "__main__:train_step") if o is reference else None)
        return _error(lambda: _importer(strategy).loads_call(call))
    return produce


def _gpus_shared(tmp_path: pathlib.Path) -> str:
    from datetime import timedelta

    from distrib.comm.gpu_sharing import choose_backend

    store = torch.distributed.HashStore()
    store.set_timeout(timedelta(seconds=5))
    store.set("distrib/gpu/1", json.dumps([socket.gethostname(), "0"]))  # worker 1 on this host's GPU 0
    store.set("distrib/gpu/read/1", "1")
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}

    def describe(rank: int) -> str:
        return f"worker {rank} (127.0.0.1:{2222 + rank})"

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "environ", env)
        return _error(lambda: choose_backend(store, 0, 2, torch.device("cuda", 0), "nccl", False, 5, describe))


def _weights_that_do_not_fit(tmp_path: pathlib.Path) -> str:
    path = str(tmp_path / "w.weights.safetensors")
    distrib.Model(torch.nn.Sequential(torch.nn.Linear(3, 2))).save_weights(path)
    return _error(lambda: distrib.Model(torch.nn.Sequential(torch.nn.Linear(4, 2))).load_weights(path))


def _missing_fsspec_backend(tmp_path: pathlib.Path) -> str:
    if importlib.util.find_spec("s3fs") is not None:
        pytest.skip("s3fs is installed here, so s3:// has a backend")
    return _error(lambda: distrib.callbacks.BackupAndRestore("s3://bucket/b"))


def _launch_usage_error(*args: str) -> Callable[[pathlib.Path], str]:
    def produce(tmp_path: pathlib.Path) -> str:
        (tmp_path / "train.py").write_text("print('trained')\n", encoding="utf-8")
        proc = subprocess.run([sys.executable, "-m", "distrib", "launch", *args], capture_output=True, text=True,
                              timeout=60, cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
        assert proc.returncode == 2 and "trained" not in proc.stdout, proc.stdout + proc.stderr
        return proc.stderr
    return produce


#: A part of each quote (unique on the page) -> what makes the code produce it, here in one process.
REPRODUCERS: Dict[str, Callable[[pathlib.Path], str]] = {
    "distrib: worker 5: ClusterConfigError: TF_CONFIG['task']['index']: 5": _one_line_error_of_a_cluster_task,
    "TF_CONFIG['task']['index']: 2 is out of range": lambda tmp: _error(_tf_config(json.dumps(
        {"cluster": {"worker": ["h0:2222", "h1:2222"]}, "task": {"type": "worker", "index": 2}}))),
    "TF_CONFIG: not valid JSON": lambda tmp: _error(_tf_config('{"cluster": {"worker": ["h0:2222"]}, "task": }')),
    "MultiWorkerMirroredStrategy does not use 'ps' tasks": lambda tmp: _error(
        lambda: distrib.MultiWorkerMirroredStrategy(_resolver(
            {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"], "ps": ["127.0.0.1:2224"]}, "worker"))),
    "ParameterServerStrategy needs at least one 'ps' task": lambda tmp: _error(
        lambda: distrib.ParameterServerStrategy(_resolver(
            {"chief": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223"]}, "chief"))),
    "EmptyTFConfigWarning": _empty_tf_config,
    "(address node7:2222) does not resolve": _host_that_does_not_resolve,
    "is not an address of this machine": _address_of_another_machine,
    "parameter-server job without a job secret": _no_secret_beyond_loopback,
    "the scheduled function": _registered_only("unregistered function"),
    "a Linear module was not built by a registered function": _registered_only("unbuilt module"),
    "no function is registered as '__main__:train_step'": _registered_only("registered name"),
    "refused a pickled one": _registered_only("pickle"),
    "the weights do not fit Sequential": _weights_that_do_not_fit,
    "would both use GPU 0": _gpus_shared,
    "needs an fsspec backend that is not installed": _missing_fsspec_backend,
    "not found; check the path": lambda tmp: _error(
        lambda: distrib.train.Checkpoint(model=torch.nn.Linear(1, 1)).read(str(tmp / "missing" / "ckpt-1"))),
    "unrecognized arguments: --num-workers": _launch_usage_error("--num-workers", "2", "train.py"),
    "no script given": _launch_usage_error("--workers", "2"),
    "--output-from worker:5 names worker 5": _launch_usage_error("--workers", "2", "--output-from", "worker:5",
                                                                 "train.py"),
}


def _process_reproducers() -> List[str]:
    spec = importlib.util.spec_from_file_location("docs_error_texts_processes", PROCESSES)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.REPRODUCERS)


def test_the_quote_parser_reads_tables_and_blocks() -> None:
    text = ("| message | fix |\n|---|---|\n| `Foo: bar ... baz` | x |\n| `ClassName` naming y | z |\n"
            "\n```\ndistrib: worker 1: E: boom\n```\n```bash\nls -l\n```\n```text\nan: example\n```\n")
    assert quoted_errors(text) == ["Foo: bar ... baz", "distrib: worker 1: E: boom"]
    assert_produced("Foo: bar ... baz", "x Foo: bar (1.2.3.4) baz y")
    with pytest.raises(AssertionError, match="does not produce"):
        assert_produced("Foo: bar ... baz", "baz Foo: bar")


def test_every_quote_has_exactly_one_reproducer_and_every_reproducer_its_quote() -> None:
    quotes = quoted_errors(PAGE.read_text(encoding="utf-8"))
    keys = list(REPRODUCERS) + _process_reproducers()
    assert len(quotes) >= 25, quotes
    for quote in quotes:
        owners = [k for k in keys if k in quote]
        assert len(owners) == 1, (f"{PAGE.name} quotes {quote!r}; reproducers for it: {owners} (add one to "
                                  f"REPRODUCERS here, or to {PROCESSES.name} if it needs processes)")
    for key in keys:
        quote_for(key)


@pytest.mark.parametrize("key", list(REPRODUCERS))
def test_the_code_produces_the_quoted_error(key: str, tmp_path: pathlib.Path) -> None:
    assert_produced(quote_for(key), REPRODUCERS[key](tmp_path))
