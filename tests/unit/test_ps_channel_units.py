"""The parameter-server channel's pieces on their own: tokens, the wire format, TLS settings, a live server."""
from __future__ import annotations

import time

import pytest
import torch

from distrib.strategies.parameter_server import auth as ps_auth, wire as ps_wire
from distrib.strategies.parameter_server.auth import CallAuth
from distrib.strategies.parameter_server.errors import ChannelConfigError, ChannelError, PeerError
from distrib.strategies.parameter_server.transport import Channel, Server, tls_from_env


def test_token_binds_method_destination_body_and_secret_and_is_single_use():
    auth = CallAuth(b"secret")
    token = auth.sign("/m", "ps:0", b"body")
    assert "secret" not in token
    assert "job secret mismatch" in CallAuth(b"other").check_header("/m", "ps:0", token)
    assert "does not match" in auth.check_header("/other", "ps:0", token)
    assert "signed for ps:0, not ps:1" in auth.check_header("/m", "ps:1", token, signed_for="ps:0")
    assert "no job token" in auth.check_header("/m", "ps:0", None)
    assert "malformed" in auth.check_header("/m", "ps:0", "x.y")
    assert auth.check_header("/m", "ps:0", token) is None
    assert "changed on the way" in auth.check_body(token, b"b0dy")
    assert auth.check_body(token, b"body") is None
    assert "used before" in auth.check_header("/m", "ps:0", token)


def test_old_token_is_refused(monkeypatch):
    auth = CallAuth(b"secret")
    token = auth.sign("/m", "ps:0", b"body")
    later = time.time() + ps_auth.MAX_SKEW_SECONDS + 60
    monkeypatch.setattr(ps_auth.time, "time", lambda: later)
    assert "old" in auth.check_header("/m", "ps:0", token)


def test_replay_memory_is_bounded_and_still_refuses_every_replay():
    auth = CallAuth(b"secret", nonce_memory=8)
    tokens = [auth.sign("/m", "ps:0", b"x") for _ in range(40)]
    assert all(auth.check_header("/m", "ps:0", t) is None for t in tokens)
    assert auth.remembered <= 8
    assert all("used before" in auth.check_header("/m", "ps:0", t) for t in tokens)  # forgotten ones too


def test_reply_seal_is_bound_to_the_key_and_the_call():
    auth = CallAuth(b"secret")
    sealed = auth.seal_reply("n1", b"reply")
    assert auth.open_reply("n1", sealed) == b"reply"
    assert auth.open_reply("n2", sealed) is None
    assert CallAuth(b"other").open_reply("n1", sealed) is None
    assert auth.open_reply("n1", sealed[:-1] + b"X") is None


def test_wire_round_trip_keeps_tensors_exact():
    values = [torch.randn(3, 4).t(), torch.tensor(7), torch.zeros(0, 2), torch.ones(2, dtype=torch.bfloat16),
              torch.tensor([True, False]), torch.randn(2, requires_grad=True)]
    back = ps_wire.decode(ps_wire.encode({"v": values, "b": b"x"}))
    assert back["b"] == b"x"
    for a, b in zip(values, back["v"]):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.detach(), b.detach())
        assert a.requires_grad == b.requires_grad


def test_wire_carries_the_closed_types_and_refuses_others_by_name():
    import numpy as np

    value = {"n": None, 1: [True, 2, 3.5, "s", b"b", (1 << 70,)], ("k", 2): np.arange(6.0).reshape(2, 3)}
    back = ps_wire.decode(ps_wire.encode(value))
    assert back.keys() == value.keys() and back[1] == value[1] and np.array_equal(back[("k", 2)], value[("k", 2)])
    for bad, name in [(lambda: 0, "a function"), (object(), "an object"), ({1, 2}, "a set")]:
        with pytest.raises(ps_wire.WireFormatError, match=f"cannot send {name}"):
            ps_wire.encode(bad)


def test_wire_never_unpickles_and_checks_every_size(tmp_path):
    import pickle

    marker = tmp_path / "ran"
    with pytest.raises(ps_wire.WireFormatError):
        ps_wire.decode(b"DPW2" + pickle.dumps(_Marker(str(marker))))
    with pytest.raises(ps_wire.WireFormatError, match="bad magic"):
        ps_wire.decode(pickle.dumps(_Marker(str(marker))))
    assert not marker.exists()
    good = ps_wire.encode(torch.ones(4))
    lying = good.replace((16).to_bytes(8, "big"), (1 << 40).to_bytes(8, "big"))  # 1 TiB announced
    with pytest.raises(ps_wire.WireFormatError, match="announces"):
        ps_wire.decode(lying)
    with pytest.raises(ps_wire.WireFormatError, match="truncated"):
        ps_wire.decode(b"DPW2l" + (1 << 31).to_bytes(4, "big"))  # two billion items, none sent
    with pytest.raises(ps_wire.WireFormatError, match="deeper"):
        ps_wire.decode(b"DPW2" + b"l\x00\x00\x00\x01" * 100 + b"N")


def test_wire_rejects_foreign_and_truncated_bytes():
    with pytest.raises(ps_wire.WireFormatError, match="bad magic"):
        ps_wire.decode(b"\x80\x04not ours")
    data = ps_wire.encode([torch.ones(100)])
    with pytest.raises(ps_wire.WireFormatError, match="truncated"):
        ps_wire.decode(data[:-8])


def test_tls_settings_name_the_variable(tmp_path):
    assert tls_from_env({}) is None
    with pytest.raises(ChannelConfigError, match="DISTRIB_TLS_KEY is not set"):
        tls_from_env({"DISTRIB_TLS_CERT": "c.pem"})
    with pytest.raises(ChannelConfigError, match=r"DISTRIB_TLS_CERT=.*missing.pem: cannot read"):
        tls_from_env({"DISTRIB_TLS_CERT": str(tmp_path / "missing.pem"), "DISTRIB_TLS_KEY": "k"})
    (tmp_path / "c.pem").write_text("not pem")
    with pytest.raises(ChannelConfigError, match="not a PEM file"):
        tls_from_env({"DISTRIB_TLS_CERT": str(tmp_path / "c.pem"), "DISTRIB_TLS_KEY": str(tmp_path / "c.pem")})
    with pytest.raises(ChannelConfigError, match="DISTRIB_TLS_CA is set"):
        tls_from_env({"DISTRIB_TLS_CA": "ca.pem"})


def _boom():
    raise KeyError("no such shard")


def test_server_runs_named_handlers_for_signed_calls_only():
    auth = CallAuth(b"secret")
    server = Server("127.0.0.1", {"add": lambda a, b: a + b, "boom": _boom}, auth, None, threads=4, name="ps:0")
    good = Channel(f"127.0.0.1:{server.port}", auth, None, dest="ps:0")
    stranger = Channel(f"127.0.0.1:{server.port}", None, None, dest="ps:0")
    elsewhere = Channel(f"127.0.0.1:{server.port}", auth, None, dest="ps:1")
    try:
        assert torch.equal(good.call_async("add", (torch.ones(2), torch.ones(2)), 10).wait(), torch.full((2,), 2.0))
        with pytest.raises(PeerError, match="KeyError"):
            good.call_async("boom", (), 10).wait()
        with pytest.raises(ChannelError, match="bad call") as bad:
            good.call_async("os.system", ("true",), 10).wait()
        assert bad.value.code == "INVALID_ARGUMENT"
        with pytest.raises(ChannelError, match="call refused") as refused:
            stranger.call_async("add", (1, 2), 10).wait()
        assert refused.value.code == "UNAUTHENTICATED"
        with pytest.raises(ChannelError, match="signed for ps:1, not ps:0"):
            elsewhere.call_async("add", (1, 2), 10).wait()
    finally:
        elsewhere.close()
        good.close()
        stranger.close()
        server.stop(0)
    with pytest.raises(ChannelError) as gone:
        Channel(f"127.0.0.1:{server.port}", auth, None, dest="ps:0").call_async("add", (1, 2), 10).wait()
    assert gone.value.code == "UNAVAILABLE"


class _Marker:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_pickle_runs_nowhere_even_on_an_unauthenticated_server(tmp_path):
    """The marker payload of the stranger test: no server unpickles it, secret or not."""
    import grpc
    import pickle

    from distrib.strategies.parameter_server.transport import METHOD

    secured = Server("127.0.0.1", {"echo": lambda v: None}, CallAuth(b"secret"), None, threads=2, name="ps:0")
    open_server = Server("127.0.0.1", {"echo": lambda v: None}, None, None, threads=2, name="ps:0")
    try:
        for name, server in [("secured", secured), ("open", open_server)]:
            with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
                call = channel.unary_unary(METHOD)
                for payload in (pickle.dumps(("echo", (_Marker(str(tmp_path / name)),))),
                                b"DPW1" + (40).to_bytes(8, "big") + pickle.dumps(_Marker(str(tmp_path / name)))):
                    with pytest.raises(grpc.RpcError):
                        call(payload, timeout=10)
    finally:
        secured.stop(0)
        open_server.stop(0)
    assert list(tmp_path.iterdir()) == []


def test_stalled_unauthenticated_calls_hold_no_server_thread():
    """16 calls that send headers and never their message, beside a server of 2 threads."""
    import threading

    import grpc

    from distrib.strategies.parameter_server.transport import METHOD

    auth = CallAuth(b"secret")
    server = Server("127.0.0.1", {"add": lambda a, b: a + b}, auth, None, threads=2, name="ps:0")
    release = threading.Event()

    def stalled_requests():
        release.wait(60)  # announces a call, then sends nothing
        yield b""

    stranger = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    futures = [stranger.stream_unary(METHOD).future(stalled_requests(), timeout=60,
                                                    metadata=(("x-distrib-auth", "1.2.3.4.5"),))
               for _ in range(16)]
    good = Channel(f"127.0.0.1:{server.port}", auth, None, dest="ps:0")
    try:
        assert [good.call_async("add", (i, 1), 20).wait() for i in range(4)] == [1, 2, 3, 4]
        assert all(f.exception(timeout=20).code() == grpc.StatusCode.UNAUTHENTICATED for f in futures)
    finally:
        release.set()
        good.close()
        stranger.close()
        server.stop(0)


def test_a_pinned_message_limit_refuses_larger_messages(monkeypatch):
    monkeypatch.setenv("DISTRIB_PS_MAX_MESSAGE_BYTES", str(1 << 20))
    auth = CallAuth(b"secret")
    server = Server("127.0.0.1", {"size": lambda t: t.numel()}, auth, None, threads=2, name="ps:0")
    good = Channel(f"127.0.0.1:{server.port}", auth, None, dest="ps:0")
    try:
        assert good.call_async("size", (torch.ones(1000),), 10).wait() == 1000
        with pytest.raises(ChannelError) as big:
            good.call_async("size", (torch.ones(1 << 19),), 10).wait()  # 2 MiB
        assert big.value.code == "RESOURCE_EXHAUSTED"
    finally:
        good.close()
        server.stop(0)
    monkeypatch.setenv("DISTRIB_PS_MAX_MESSAGE_BYTES", "lots")
    with pytest.raises(ChannelConfigError, match="DISTRIB_PS_MAX_MESSAGE_BYTES='lots'"):
        Channel("127.0.0.1:1", auth, None, dest="ps:0")


def test_a_job_beyond_loopback_without_a_secret_does_not_start(monkeypatch):
    import json

    from distrib.cluster import TFConfigClusterResolver
    from distrib.strategies.parameter_server import runtime as ps_runtime
    from distrib.strategies.parameter_server.cluster import PSCluster

    monkeypatch.delenv("DISTRIB_JOB_SECRET", raising=False)
    monkeypatch.delenv("DISTRIB_JOB_SECRET_FILE", raising=False)
    monkeypatch.setattr(ps_runtime, "_JOINED", [])
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"chief": ["10.255.1.1:2222"], "worker": ["10.255.1.2:2222"], "ps": ["10.255.1.3:2222"]},
        "task": {"type": "worker", "index": 0}}))
    runtime = ps_runtime.Runtime(PSCluster.from_resolver(TFConfigClusterResolver()), timeout=5.0, handlers={})
    with pytest.raises(ChannelConfigError) as refused:
        runtime.start()
    line = str(refused.value)
    assert "\n" not in line and "10.255.1.1" in line and "run code" in line
    assert "DISTRIB_PS_FUNCTIONS=registered on every task sends no code" in line
    assert "DISTRIB_JOB_SECRET_FILE" in line and "Kubernetes Secret" in line and "SLURM" in line


def test_the_ps_names_optimizer_classes_and_says_how_to_fix_one_it_cannot():
    from distrib.strategies.parameter_server import server as ps_server

    assert ps_server.named_class(ps_server.class_name(torch.optim.Adam), torch.optim.Optimizer) is torch.optim.Adam

    def make():
        class Local(torch.optim.SGD):
            pass
        return Local

    with pytest.raises(TypeError, match="defined inside a function.*top level of a module"):
        ps_server.class_name(make())
    with pytest.raises(TypeError, match="no Optimizer class 'builtins:print'"):
        ps_server.named_class("builtins:print", torch.optim.Optimizer)
    with pytest.raises(TypeError, match="no Optimizer class 'os:system'.*every task has it"):
        ps_server.named_class("os:system", torch.optim.Optimizer)


class _ProgramError(Exception):
    """An exception class of the user's program (the chief has it)."""


def test_a_workers_exception_comes_back_by_class_name_without_pickle():
    from distrib.strategies.parameter_server import dispatch, worker

    for raised, expected_type, text in [(_ProgramError("bad batch", 3), _ProgramError, "('bad batch', 3)"),
                                        (KeyError("k"), KeyError, "'k'"),
                                        (ValueError(object()), RuntimeError, "ValueError: <object")]:
        try:
            raise raised
        except Exception as exc:  # noqa: BLE001
            kind, spec, text_back = worker.error_reply(exc)
        assert kind == "error" and "Traceback" in text_back
        rebuilt = dispatch.rebuild_error(ps_wire.decode(ps_wire.encode(spec)), text_back, "worker 0")
        assert type(rebuilt) is expected_type and str(rebuilt).startswith(text), (rebuilt, text)
        assert "Traceback on worker 0" in str(rebuilt.__cause__)


def test_a_scheduled_function_that_arrives_before_the_worker_is_ready_waits_for_it(monkeypatch):
    # The channel serves as soon as it starts; under load the chief's first call can come before
    # `serve_worker` made the worker's state. It must wait for the main thread, not fail: it failed
    # with "IndexError: list index out of range" beside two CPU burners (scripts/stress.sh, run 8).
    from distrib.strategies.parameter_server import runtime, worker

    class ReadyWorker:
        def execute(self, defs, payload, hyper):
            return ("ok", payload, {})

    monkeypatch.setattr(worker, "_STATE", [])
    future = worker.run_closure([], b"step", {})  # the handler thread, before the state exists
    assert not future.done()
    worker._STATE.append(ReadyWorker())            # serve_worker makes it, then the main thread serves
    work, queued = runtime._MAIN_WORK.get(timeout=5)
    queued.set_result(work())
    assert future.wait() == ("ok", b"step", {})


def test_a_secretless_job_beyond_loopback_is_refused_in_one_line(monkeypatch, caplog):
    """Issue 41: the 'no job secret' warning came first, then the refusal: two lines per task."""
    import json
    import logging

    from distrib.cluster import TFConfigClusterResolver
    from distrib.comm import secret
    from distrib.strategies.parameter_server import runtime
    from distrib.strategies.parameter_server.cluster import PSCluster

    for name in ("DISTRIB_JOB_SECRET", "DISTRIB_JOB_SECRET_FILE", "DISTRIB_TLS_CERT", "DISTRIB_PS_FUNCTIONS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(secret, "_WARNED", [])  # as in a fresh task process
    monkeypatch.setattr(runtime, "_JOINED", [])
    config = {"cluster": {"chief": ["10.255.0.1:2222"], "worker": ["10.255.0.2:2222"], "ps": ["10.255.0.3:2222"]},
              "task": {"type": "worker", "index": 0}}
    cluster = PSCluster.from_resolver(TFConfigClusterResolver(json.dumps(config)))
    caplog.set_level(logging.WARNING)
    with pytest.raises(ChannelConfigError, match="without a job secret and its chief 10.255.0.1 is beyond "
                                                 "loopback") as refused:
        runtime.Runtime(cluster, 5.0, {}).start()
    assert "\n" not in str(refused.value)
    assert [r.getMessage() for r in caplog.records] == []
    assert runtime._JOINED == []  # refused before it counted as joined: a corrected retry may start
