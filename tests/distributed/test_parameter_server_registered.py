"""A parameter-server job of registered functions: nothing travels as a pickle, and no task loads one.

This file is the script every task runs (``python test_parameter_server_registered.py
SCENARIO OUT``): its registered functions sit above ``ParameterServerStrategy()``,
so the workers run those definitions too. The chief trains a small model with a
module, an optimizer, a metric and a per-worker dataset, all shared by recipe.
Under ``DISTRIB_PS_FUNCTIONS=registered`` it then plays the stranger (see each
scenario).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import distrib
from distrib.coordinator import ClusterCoordinator, remote_function

HERE = os.path.abspath(__file__)


@remote_function
def build_model(width):
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, width), torch.nn.BatchNorm1d(width), torch.nn.Tanh(),
                               torch.nn.Linear(width, 1))


@remote_function
def make_dataset():
    import torch

    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 3, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.3
    return distrib.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)


@remote_function
def train_step(model, optimizer, iterator, loss_mean, scale=1.0):
    x, y = next(iterator)
    loss = ((model(x) - y) ** 2).mean() * scale
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    loss_mean.update_state(loss.detach())
    return {"loss": loss.detach()}


@remote_function
def which_strategy():
    return type(distrib.get_strategy()).__name__


class _Evil:
    """Unpickling this creates the marker file named by ``path``: proof the bytes were loaded."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _train(strategy, steps):
    import torch

    with strategy.scope():
        model = build_model(8)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        loss_mean = distrib.metrics.Mean()
    coordinator = ClusterCoordinator(strategy)
    iterator = iter(coordinator.create_per_worker_dataset(make_dataset))
    results = [coordinator.schedule(train_step, args=(model, optimizer, iterator, loss_mean),
                                    kwargs={"scale": 1.0}) for _ in range(steps)]
    coordinator.join()
    out = {"losses": [float(r.fetch()["loss"]) for r in results], "mean": float(loss_mean.result()),
           "weights": {n: strategy.read_variable(p).flatten().tolist() for n, p in model.named_parameters()}}
    return out, coordinator, (model, optimizer, iterator, loss_mean)


def _worker_reply(strategy, defs, payload):
    """What the worker answers to a call made with the job's own token (a job member, not a stranger)."""
    from distrib.cluster.task import TaskInfo
    from distrib.strategies.parameter_server.worker import run_closure

    reply = strategy._runtime.call(TaskInfo("worker", 0), run_closure, (defs, payload, {}))
    return reply[0] if reply[0] == "ok" else f"{reply[1]['class']}: {reply[1]['args'][0]}"


def _pickles_to_every_port(strategy, evil):
    """A stranger's pickle, without a token, to each task's channel port and to the store's port."""
    import socket

    import grpc

    from distrib.strategies.parameter_server.transport import METHOD

    answers = {}
    for task_type in ("chief", "worker", "ps"):
        address = strategy.channel_address(task_type, 0)
        with grpc.insecure_channel(address) as channel:
            try:
                channel.unary_unary(METHOD)(evil(f"grpc-{task_type}"), timeout=10)
                answers[task_type] = "ANSWERED"
            except grpc.RpcError as exc:
                answers[task_type] = exc.code().name
        host, _, port = address.rpartition(":")
        with socket.create_connection((host.strip("[]"), int(port)), timeout=10) as sock:   # not even HTTP/2
            sock.sendall(b"\x80\x04" + evil(f"raw-{task_type}") * 4)
    with socket.create_connection(strategy.cluster.chief_address, timeout=10) as sock:        # the store
        sock.sendall(evil("store") * 4)
    return answers


def scenario_train(out_dir: str) -> None:
    """Train; under registered functions also try what must be refused, then train on."""
    import pickle

    import torch

    from distrib.strategies.parameter_server import wire as ps_wire

    strategy = distrib.experimental.ParameterServerStrategy()
    out, coordinator, (model, optimizer, iterator, loss_mean) = _train(strategy, 24)
    evil = lambda name: pickle.dumps(_Evil(os.path.join(out_dir, name)))  # noqa: E731
    if os.environ.get("DISTRIB_PS_FUNCTIONS") != "registered":   # the control: this worker loads pickles
        out["control"] = _worker_reply(strategy, [], evil("control"))
        out["markers"] = sorted(os.listdir(out_dir))
    else:
        refused = out["refused"] = {}
        try:
            coordinator.schedule(lambda: 0)
        except Exception as exc:  # noqa: BLE001 - the test reads the line
            refused["lambda"] = f"{type(exc).__name__}: {exc}"
        with strategy.scope():
            stray = torch.nn.Linear(3, 1)
        try:
            coordinator.schedule(train_step, args=(stray, optimizer, iterator, loss_mean))
        except Exception as exc:  # noqa: BLE001
            refused["unbuilt_module"] = f"{type(exc).__name__}: {exc}"
        try:
            coordinator.schedule(train_step, args=(model, optimizer, iterator, loss_mean), kwargs={"scale": object()})
        except Exception as exc:  # noqa: BLE001
            refused["object_argument"] = f"{type(exc).__name__}: {exc}"
        sentinel = object()
        os_system = ps_wire.encode((sentinel, ("touch " + os.path.join(out_dir, "os-system"),), {}),
                                   reference=lambda o: ("fn", "os:system") if o is sentinel else None)
        refused["pickled_call"] = _worker_reply(strategy, [], evil("call"))
        refused["pickled_definition"] = _worker_reply(strategy, [(90, "module", evil("module"), ())], os_system)
        refused["pickled_optimizer"] = _worker_reply(strategy, [(91, "optimizer", evil("optimizer"), ())], os_system)
        refused["unregistered_name"] = _worker_reply(strategy, [], os_system)
        refused["every_port"] = _pickles_to_every_port(strategy, evil)
        out["worker_strategy"] = coordinator.schedule(which_strategy).fetch()
        more = [coordinator.schedule(train_step, args=(model, optimizer, iterator, loss_mean)) for _ in range(4)]
        out["after"] = [float(r.fetch()["loss"]) for r in more]
        out["markers"] = sorted(os.listdir(out_dir))
    print("RESULT " + json.dumps(out), flush=True)


# ------------------------------------------------------------------- tests
def _run(mode: str, out_dir: str, timeout=240):
    """This file's ``train`` scenario as chief + 1 worker + 1 ps, tasks forked from the test's server."""
    from distrib.testing import run_script

    result = run_script(HERE, 1, args=["train", out_dir], chief=True, ps=1, timeout=timeout,
                        env={"DISTRIB_PS_FUNCTIONS": mode})
    assert result.returncode == 0, result.output[-6000:]
    lines = [x for x in result.outputs["chief"].splitlines() if x.startswith("RESULT ")]
    assert lines, result.output[-6000:]
    return json.loads(lines[-1][len("RESULT "):])


@pytest.mark.timeout(400)
def test_registered_functions_train_exactly_as_pickled_ones_and_no_pickle_is_loaded(tmp_path):
    pickled_dir, registered_dir = tmp_path / "pickled", tmp_path / "registered"
    pickled_dir.mkdir()
    registered_dir.mkdir()
    pickled = _run("pickled", str(pickled_dir))
    registered = _run("registered", str(registered_dir))

    # The same program, one worker (so one order of updates): the same numbers, bit for bit.
    assert registered["losses"] == pickled["losses"]
    assert registered["weights"] == pickled["weights"]
    assert registered["mean"] == pickled["mean"]
    assert registered["losses"][-1] < 0.2 * registered["losses"][0]

    r = registered["refused"]
    assert r["lambda"].startswith("RegisteredOnlyError: DISTRIB_PS_FUNCTIONS=registered: the scheduled "
                                  "function scenario_train.<locals>.<lambda> is not registered"), r
    assert "a Linear module was not built by a registered function" in r["unbuilt_module"], r
    assert "cannot send an object" in r["object_argument"], r
    for case in ("pickled_call", "pickled_definition", "pickled_optimizer"):
        assert "RegisteredOnlyError" in r[case] and "refused a pickled one" in r[case], (case, r)
    assert "no function is registered as 'os:system'" in r["unregistered_name"], r
    assert set(r["every_port"].values()) == {"UNAUTHENTICATED"}, r   # this job has a secret: refused unread
    assert registered["markers"] == []                  # nothing was loaded, os.system never ran
    assert registered["worker_strategy"] == "ParameterServerStrategy"   # distrib.get_strategy() on a worker
    assert pickled["markers"] == ["control"], pickled   # the control: a pickling worker did load it
    assert len(registered["after"]) == 4 and registered["after"][-1] < registered["losses"][0]
    assert "\n" not in r["lambda"] and "\n" not in r["unbuilt_module"]


@pytest.mark.timeout(300)
def test_the_example_trains_on_two_workers_with_registered_functions():
    """examples/ps_registered.py, the program of docs/parameter-server.md, as its docstring runs it."""
    import re

    from distrib.testing import run_script

    example = os.path.join(os.path.dirname(HERE), "..", "..", "examples", "ps_registered.py")
    result = run_script(os.path.abspath(example), 2, args=["40"], chief=True, ps=1, timeout=240,
                        env={"DISTRIB_PS_FUNCTIONS": "registered"})
    assert result.returncode == 0, result.output[-6000:]
    found = re.search(r"loss ([\d.]+) before, ([\d.]+) after 40 steps", result.outputs["chief"])
    assert found, result.output[-3000:]
    assert float(found.group(2)) < 0.3 * float(found.group(1))


@pytest.mark.timeout(120)
def test_a_bad_mode_is_one_line_before_anything_starts(tmp_path):
    from distrib.testing import run_python

    env = dict(os.environ, DISTRIB_PS_FUNCTIONS="cloudpickle",
               TF_CONFIG=json.dumps({"cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"],
                                                 "ps": ["127.0.0.1:3"]}, "task": {"type": "chief", "index": 0}}))
    proc = run_python([HERE, "train", str(tmp_path)], env=env, timeout=100)
    assert proc.returncode != 0
    lines = [x for x in proc.stderr.strip().splitlines() if x.strip()]
    assert "DISTRIB_PS_FUNCTIONS='cloudpickle' is not one of pickled, registered" in lines[-1], proc.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_secretless_job_across_hosts_runs_with_one_line_and_loads_no_strangers_pickle(tmp_path):
    """The guide's way: every task started by hand with TF_CONFIG on its own host, no job secret.

    Three namespace hosts (chief, worker, ps). Without a secret nothing tells a
    task's call from a stranger's, so the chief's refused calls above are a
    stranger's calls here; a job that ships pickles would not start at all.
    """
    from distrib.testing.netns import NamespaceHosts, namespaces_available

    reason = namespaces_available()
    if reason is not None:
        pytest.skip(f"namespace hosts: {reason}")
    with NamespaceHosts(3) as hosts:
        cluster = {"chief": [f"{hosts.address(0)}:29500"], "worker": [f"{hosts.address(1)}:29500"],
                   "ps": [f"{hosts.address(2)}:29500"]}
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTRIB_JOB_SECRET", "TF_CONFIG"))}
        env.update(OMP_NUM_THREADS="1", DISTRIB_PS_FUNCTIONS="registered")
        procs = []
        for i, (task_type, out) in enumerate([("chief", tmp_path), ("worker", tmp_path), ("ps", tmp_path)]):
            task_env = dict(env, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": task_type, "index": 0}}))
            procs.append(hosts.popen(i, [sys.executable, HERE, "train", str(out)], env=task_env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        outputs = []
        for proc in procs:
            try:
                outputs.append(proc.communicate(timeout=300))
            except subprocess.TimeoutExpired:
                proc.kill()
                outputs.append(proc.communicate())
    codes = [p.returncode for p in procs]
    assert codes == [0, 0, 0], (codes, [o[1][-3000:] for o in outputs])
    lines = [x for x in outputs[0][0].splitlines() if x.startswith("RESULT ")]
    r = json.loads(lines[-1][len("RESULT "):])
    assert r["losses"][-1] < 0.2 * r["losses"][0]
    for case in ("pickled_call", "pickled_definition", "pickled_optimizer"):
        assert "refused a pickled one" in r["refused"][case], r
    assert "no function is registered as 'os:system'" in r["refused"]["unregistered_name"], r
    # No secret: the calls are read, and refused as what they are, not a message of the channel.
    assert set(r["refused"]["every_port"]) == {"chief", "worker", "ps"}, r
    assert "ANSWERED" not in r["refused"]["every_port"].values(), r
    assert r["markers"] == []
    for _, err in outputs:   # each task says once what is exposed, and that no other code runs
        warned = [x for x in err.splitlines() if "no job secret" in x]
        assert len(warned) == 1 and "call the functions it registered" in warned[0], err[-2000:]


if __name__ == "__main__":
    {"train": scenario_train}[sys.argv[1]](*sys.argv[2:])
