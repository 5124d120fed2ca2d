"""The parameter-server channel's pieces on their own: tokens, the wire format, TLS settings, a live server."""
from __future__ import annotations

import time

import pytest
import torch

from distrib.strategies.parameter_server import auth as ps_auth, wire as ps_wire
from distrib.strategies.parameter_server.auth import CallAuth
from distrib.strategies.parameter_server.errors import ChannelConfigError, ChannelError, PeerError
from distrib.strategies.parameter_server.transport import Channel, Server, tls_from_env


def test_token_binds_method_body_and_secret_and_is_single_use():
    auth = CallAuth(b"secret")
    token = auth.sign("/m", b"body")
    assert "secret" not in token
    assert "does not match" in CallAuth(b"other").check("/m", b"body", token)
    assert "does not match" in auth.check("/m", b"b0dy", token)
    assert "does not match" in auth.check("/other", b"body", token)
    assert "no job token" in auth.check("/m", b"body", None)
    assert "malformed" in auth.check("/m", b"body", "x.y")
    assert auth.check("/m", b"body", token) is None
    assert "used before" in auth.check("/m", b"body", token)


def test_old_token_is_refused(monkeypatch):
    auth = CallAuth(b"secret")
    token = auth.sign("/m", b"body")
    later = time.time() + ps_auth.MAX_SKEW_SECONDS + 60
    monkeypatch.setattr(ps_auth.time, "time", lambda: later)
    assert "old" in auth.check("/m", b"body", token)


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
    server = Server("127.0.0.1", {"add": lambda a, b: a + b, "boom": _boom}, auth, None, threads=4)
    good = Channel(f"127.0.0.1:{server.port}", auth, None)
    stranger = Channel(f"127.0.0.1:{server.port}", None, None)
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
    finally:
        good.close()
        stranger.close()
        server.stop(0)
    with pytest.raises(ChannelError) as gone:
        Channel(f"127.0.0.1:{server.port}", auth, None).call_async("add", (1, 2), 10).wait()
    assert gone.value.code == "UNAVAILABLE"


class _Marker:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_forged_payload_is_only_unpickled_by_an_unauthenticated_server(tmp_path):
    """The marker payload of the stranger test does act when nothing checks the caller."""
    secured = Server("127.0.0.1", {"echo": lambda v: None}, CallAuth(b"secret"), None, threads=2)
    open_server = Server("127.0.0.1", {"echo": lambda v: None}, None, None, threads=2)
    try:
        with pytest.raises(ChannelError):
            Channel(f"127.0.0.1:{secured.port}", None, None).call_async(
                "echo", (_Marker(str(tmp_path / "secured")),), 10).wait()
        Channel(f"127.0.0.1:{open_server.port}", None, None).call_async(
            "echo", (_Marker(str(tmp_path / "open")),), 10).wait()
    finally:
        secured.stop(0)
        open_server.stop(0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["open"]


def test_no_secret_warns_once_naming_the_fix(monkeypatch):
    from distrib.strategies.parameter_server import runtime as ps_runtime

    monkeypatch.setattr(ps_runtime, "_WARNED", [])
    with pytest.warns(UserWarning, match="DISTRIB_JOB_SECRET is not set.*unauthenticated") as seen:
        ps_runtime._warn_unauthenticated()
        ps_runtime._warn_unauthenticated()
    assert len(seen) == 1
