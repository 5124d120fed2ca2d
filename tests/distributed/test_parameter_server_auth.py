"""A stranger on the network cannot use a parameter-server job's channel.

Each test launches this file as chief + 1 worker + 1 ps on 127.0.0.1 with a
job secret. The chief trains a few steps, then plays the stranger: it reads
the worker's and the ps's channel ports from the (unauthenticated) store, as
anyone could, and calls them without a token, with a token made from a wrong
secret, with a garbage token, with a replayed token, and with raw bytes. Every
forged call carries a pickle whose loading would create a marker file. Then
it trains on and reports. ``python test_parameter_server_auth.py SCENARIO``
runs one scenario.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from distrib.testing import run_script

HERE = os.path.abspath(__file__)


class _Evil:
    """Unpickling this creates the marker file named by ``path``: proof the bytes were deserialized."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _run(args, env, timeout=240):
    """This file as chief + 1 worker + 1 ps, its tasks forked from the test process's server."""
    result = run_script(HERE, 1, args=list(args), chief=True, ps=1, timeout=timeout, env=env)
    assert result.returncode == 0, result.output[-6000:]
    lines = [x for x in result.outputs["chief"].splitlines() if x.startswith("RESULT ")]
    assert lines, result.output[-6000:]
    return json.loads(lines[-1][len("RESULT "):]), result


# --------------------------------------------------------------- scenario
def linear_job():
    """``(strategy, coordinator, step_fn)`` of a parameter-server job fitting a line (workers serve here)."""
    import torch

    from distrib.coordinator import ClusterCoordinator
    from distrib.strategies.parameter_server import ParameterServerStrategy

    strategy = ParameterServerStrategy()
    torch.manual_seed(0)
    x = torch.randn(256, 3)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.3
    with strategy.scope():
        model = torch.nn.Linear(3, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step_fn():
        loss = ((model(x) - y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    return strategy, ClusterCoordinator(strategy), step_fn


def scenario_stranger(marker_dir: str = "") -> None:
    marker_dir = marker_dir or os.environ["PS_TEST_DIR"]
    import pickle

    import grpc
    import torch

    from distrib.cluster.task import TaskInfo
    from distrib.comm.secret import cluster_secret, job_secret
    from distrib.strategies.parameter_server import server as ps_server, wire as ps_wire
    from distrib.strategies.parameter_server.auth import TOKEN_HEADER, CallAuth
    from distrib.strategies.parameter_server.errors import ChannelError
    from distrib.strategies.parameter_server.runtime import handler_name
    from distrib.strategies.parameter_server.transport import METHOD, Channel, tls_from_env

    strategy, coordinator, step_fn = linear_job()
    first = float(coordinator.fetch(coordinator.schedule(step_fn)))
    tls = tls_from_env()
    out = {"refused": {}, "first": first}
    evil = lambda name: pickle.dumps(_Evil(os.path.join(marker_dir, name)))  # noqa: E731
    secret = job_secret() or cluster_secret("127.0.0.1")
    chief_host, store_port = strategy.cluster.chief_address
    with socket.create_connection((chief_host, store_port), timeout=10) as sock:   # the store's port
        sock.sendall(evil("store-raw") * 4)

    tasks = {"chief": (0, TaskInfo("chief", 0)), "worker": (1, TaskInfo("worker", 0)), "ps": (2, TaskInfo("ps", 0))}
    for job, (rank, task) in tasks.items():
        address = strategy.channel_address(task.task_type, task.task_id)
        port = int(address.rpartition(":")[2])
        calls = {
            "chief": ("distrib.strategies.parameter_server.runtime:ping", ()),
            "worker": ("distrib.strategies.parameter_server.worker:run_closure", ([], evil(f"{job}-closure"), {})),
            "ps": (handler_name(ps_server.apply_gradients), (0, [(0, 0)], [torch.ones(3)], {})),
        }
        name, args = calls[job]
        attempts = {"no_token": Channel(address, None, tls, dest=str(task)),
                    "wrong_secret": Channel(address, CallAuth(b"not the job secret"), tls, dest=str(task))}
        for how, channel in attempts.items():
            for handler, handler_args in ((name, args), (handler_name(ps_server.read_variables), ([(0, 0)],))):
                try:
                    value = channel.call_async(handler, handler_args, 10).wait()
                    out["refused"][f"{job}/{how}/{handler}"] = f"ANSWERED {value!r}"
                except ChannelError as exc:
                    out["refused"][f"{job}/{how}/{handler}"] = exc.code
            channel.close()
        if tls is not None:   # the job's own secret, but plain TCP: the TLS server does not answer
            plain = Channel(address, CallAuth(secret), None, dest=str(task))
            try:
                plain.call_async("distrib.strategies.parameter_server.runtime:ping", (), 10).wait()
                out[f"{job}/plaintext"] = "ANSWERED"
            except ChannelError as exc:
                out[f"{job}/plaintext"] = exc.code
            plain.close()
        raw = grpc.insecure_channel(address) if tls is None else None
        if raw is not None:
            stub = raw.unary_unary(METHOD)
            for how, token in (("garbage_token", "1.5.abcd.00ff.11"), ("empty_token", "")):
                for form, request in (("pickle", evil(f"{job}-{how}")), ("encoded", ps_wire.encode((name, args)))):
                    try:
                        stub(request, timeout=10, metadata=((TOKEN_HEADER, token),))
                        out["refused"][f"{job}/{how}/{form}"] = "ANSWERED"
                    except grpc.RpcError as exc:
                        out["refused"][f"{job}/{how}/{form}"] = exc.code().name
            # A call signed with the real secret works once; the same bytes and token again do not,
            # nor does it work sent to another task.
            auth = CallAuth(secret)
            ping = ps_wire.encode(("distrib.strategies.parameter_server.runtime:ping", ()))
            token = auth.sign(METHOD, str(task), ping)
            stub(ping, timeout=10, metadata=((TOKEN_HEADER, token),))
            try:
                stub(ping, timeout=10, metadata=((TOKEN_HEADER, token),))
                out["refused"][f"{job}/replayed"] = "ANSWERED"
            except grpc.RpcError as exc:
                out["refused"][f"{job}/replayed"] = exc.code().name
            other_task = list(tasks.values())[(rank + 1) % 3][1]
            other = grpc.insecure_channel(strategy.channel_address(other_task.task_type, other_task.task_id))
            try:
                other.unary_unary(METHOD)(ping, timeout=10, metadata=((TOKEN_HEADER, auth.sign(METHOD, str(task), ping)),))
                out["refused"][f"{job}/sent_elsewhere"] = "ANSWERED"
            except grpc.RpcError as exc:
                out["refused"][f"{job}/sent_elsewhere"] = exc.code().name
            other.close()
            raw.close()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:   # not even HTTP/2
            sock.sendall(b"\x80\x04" + evil(f"{job}-raw") * 4)
    updates_before = strategy.ps_inventory(0)["updates"]
    losses = [coordinator.schedule(step_fn) for _ in range(40)]
    coordinator.join()
    out["last"] = float(losses[-1].fetch())
    out["updates"] = [updates_before, strategy.ps_inventory(0)["updates"]]
    print("RESULT " + json.dumps(out), flush=True)


# ------------------------------------------------------------------- tests
def _assert_refused(r: dict, expect_codes) -> None:
    assert r["refused"], r
    for what, code in r["refused"].items():
        assert code in expect_codes, (what, code)
    assert r["updates"][0] == 1, r                       # only the chief's own first step reached the ps
    assert r["updates"][1] == 41, r                      # ... and then the 40 steps after the attacks
    assert r["last"] < 0.1 * r["first"], r               # and the job trained on


@pytest.mark.timeout(300)
def test_a_stranger_cannot_run_functions_or_read_variables(tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    r, _ = _run(["stranger", str(markers)], {"DISTRIB_JOB_SECRET": "the-job-secret-for-this-test"})
    _assert_refused(r, {"UNAUTHENTICATED"})
    assert set(r["refused"]) >= {"worker/no_token/distrib.strategies.parameter_server.worker:run_closure",
                                 "ps/wrong_secret/distrib.strategies.parameter_server.server:read_variables",
                                 "ps/garbage_token/pickle", "worker/replayed", "ps/replayed",
                                 "worker/sent_elsewhere", "chief/sent_elsewhere"}
    assert sorted(os.listdir(markers)) == []             # nothing a stranger sent was ever unpickled


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_strangers_pickle_to_every_port_of_a_secretless_job_runs_nothing(tmp_path, monkeypatch):
    """Started by hand with TF_CONFIG and no secret: the tasks share this user's per-host secret."""
    from ps_task_harness import cluster_starter

    monkeypatch.delenv("DISTRIB_JOB_SECRET", raising=False)
    monkeypatch.delenv("DISTRIB_JOB_SECRET_FILE", raising=False)
    with cluster_starter(tmp_path, __file__, wait=240.0) as start:
        cluster = start("stranger", workers=1, ps=1)
        assert cluster.wait("chief") == 0, cluster.dump()
        r = cluster.result()
    _assert_refused(r, {"UNAUTHENTICATED"})
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(("store-", "chief-", "worker-", "ps-"))]


def _self_signed(tmp_path):
    cert, key = tmp_path / "job.crt", tmp_path / "job.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=distrib-test", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=60)
    return cert, key


@pytest.mark.timeout(300)
def test_tls_job_trains_and_refuses_strangers(tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    cert, key = _self_signed(tmp_path)
    r, _ = _run(["stranger", str(markers)], {"DISTRIB_JOB_SECRET": "another-secret",
                                                  "DISTRIB_TLS_CERT": str(cert), "DISTRIB_TLS_KEY": str(key)})
    # With TLS the stranger's channels share the job's certificate, so only the token stops them.
    _assert_refused(r, {"UNAUTHENTICATED"})
    assert r["worker/plaintext"] == r["ps/plaintext"] == "UNAVAILABLE", r
    assert sorted(os.listdir(markers)) == []


if __name__ == "__main__":
    {"stranger": scenario_stranger}[sys.argv[1]](*sys.argv[2:])
