"""distrib's authenticated store, in one process: its semantics, and strangers refused."""
from __future__ import annotations

import logging
import os
import socket
import time
from datetime import timedelta

import pytest
import torch.distributed as dist

from distrib.comm.auth_handshake import MAGIC, AuthenticationError, client_handshake
from distrib.comm.auth_store import AuthStore, AuthStoreServer, StoreTimeoutError

pytestmark = pytest.mark.timeout(60)
SECRET = b"unit-test-job-secret"


@pytest.fixture
def server():
    srv = AuthStoreServer("127.0.0.1", 0, SECRET)
    yield srv
    srv.close()


def _client(server, secret=SECRET, timeout=5.0):
    return AuthStore("127.0.0.1", server.port, secret, timeout)


def test_store_operations(server):
    a, b = _client(server), _client(server)
    a.set("k", "v")
    assert b.get("k") == b"v"
    assert a.add("n", 3) == 3 and b.add("n", -1) == 2
    assert a.compare_set("c", "", "first") == b"first"
    assert a.compare_set("c", "wrong", "second") == b"first"
    assert a.compare_set("c", "first", "second") == b"second"
    assert a.compare_set("absent", "x", "y") == b"x" and not a.check(["absent"])
    a.multi_set(["m1", "m2"], [b"1", b"2"])
    assert b.multi_get(["m1", "m2"]) == [b"1", b"2"]
    a.append("ap", "x"); a.append("ap", "y")
    assert b.get("ap") == b"xy"
    assert a.check(["k", "m1"]) and not a.check(["k", "nope"])
    assert a.num_keys() == 6
    assert a.delete_key("k") and not a.delete_key("k")
    b.wait(["m1"])
    with pytest.raises(StoreTimeoutError):
        b.wait(["never"], timedelta(milliseconds=50))
    b.set_timeout(timedelta(milliseconds=50))
    with pytest.raises(StoreTimeoutError):
        b.get("never")


def test_prefix_store_and_gloo_group_work_on_it(server):
    client = _client(server)  # the Python object must outlive the C++ users of the store
    store = dist.PrefixStore("pg", client)
    group = dist.ProcessGroupGloo(store, 0, 1, timedelta(seconds=10))
    assert group.size() == 1
    store.set("x", "1")
    assert _client(server).get("pg/x") == b"1"


def test_wrong_secret_fails_with_a_named_error(server, caplog):
    caplog.set_level(logging.WARNING, logger="distrib.comm")
    with pytest.raises(AuthenticationError, match="DISTRIB_JOB_SECRET"):
        _client(server, secret=b"another job's secret")
    # The server logs the refusal from its connection's thread after answering it; wait for that, so
    # the line lands in this test's log and not in whichever test runs next.
    deadline = time.monotonic() + 20
    while "job secret mismatch" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.01)  # poll: the refusal is logged by the server's connection thread
    assert caplog.text.count("job secret mismatch") == 1


def _closed_without_answer(sock: socket.socket) -> bool:
    sock.settimeout(20)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:  # closed with our unread bytes still queued
        return True


def test_strangers_get_no_key_and_write_none(server, caplog):
    owner = _client(server)
    owner.set("distrib/joined/0", "1")
    caplog.set_level(logging.WARNING, logger="distrib.comm")
    # torch's own client
    with pytest.raises(Exception):
        stranger = dist.TCPStore("127.0.0.1", server.port, is_master=False,
                                 timeout=timedelta(seconds=3))
        stranger.set("distrib/done/1", "1")
        stranger.get("distrib/joined/0")
    # random bytes
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(os.urandom(4096))
        assert _closed_without_answer(sock)
    # the right greeting, then a wrong proof
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(MAGIC + os.urandom(32))
        sock.settimeout(20)
        assert len(sock.recv(64, socket.MSG_WAITALL)) == 64
        sock.sendall(os.urandom(32))
        assert sock.recv(1) == b"\x00" and _closed_without_answer(sock)  # refused, said at once
    # replay a real client's handshake bytes on a fresh connection
    recorded = []
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        real_send = sock.sendall

        class Recorder:
            def sendall(self, data):
                recorded.append(bytes(data))
                real_send(data)

            def recv(self, *a):
                return sock.recv(*a)
        client_handshake(Recorder(), SECRET, "test")
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(recorded[0])
        sock.settimeout(20)
        assert len(sock.recv(64, socket.MSG_WAITALL)) == 64
        sock.sendall(recorded[1])
        assert sock.recv(1) == b"\x00" and _closed_without_answer(sock)
    # nothing was written, the owner still works, and the chief said so once
    assert owner.num_keys() == 1 and not owner.check(["distrib/done/1"])
    assert owner.get("distrib/joined/0") == b"1"
    refusals = [r for r in caplog.records if "refused a connection" in r.getMessage()]
    assert len(refusals) == 1 and "127.0.0.1" in refusals[0].getMessage()
    assert caplog.text.count("job secret mismatch") == 1  # two wrong proofs, one host: one line
    assert SECRET.decode() not in caplog.text


def test_without_a_secret_loopback_shares_a_user_secret_and_beyond_warns_once(monkeypatch, caplog, tmp_path):
    from distrib.comm import auth_store, secret

    monkeypatch.delenv("DISTRIB_JOB_SECRET", raising=False)
    monkeypatch.delenv("DISTRIB_JOB_SECRET_FILE", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setattr(secret, "_WARNED", [])
    caplog.set_level(logging.WARNING, logger="distrib.comm")
    chief = auth_store.host_store("127.0.0.1", 0, 2, 5.0)
    assert isinstance(chief, AuthStore)  # loopback: authenticated with this user's secret
    path = tmp_path / "distrib" / "job-secret"
    assert path.stat().st_mode & 0o777 == 0o600
    other = auth_store.connect_client("127.0.0.1", chief._server.port, 2, 5.0)
    other.set("k", "v")
    assert chief.get("k") == b"v"
    chief.close()
    assert "no job secret" not in caplog.text
    assert secret.cluster_secret("10.1.2.3") is None and secret.cluster_secret("10.1.2.4") is None
    lines = [r.getMessage() for r in caplog.records if "no job secret" in r.getMessage()]
    assert len(lines) == 1 and "10.1.2.3" in lines[0] and "DISTRIB_JOB_SECRET_FILE" in lines[0]
    assert "Kubernetes Secret" in lines[0] and "SLURM" in lines[0]


def test_a_foreign_user_secret_file_is_refused(monkeypatch, tmp_path):
    from distrib.comm import secret

    monkeypatch.delenv("DISTRIB_JOB_SECRET", raising=False)
    monkeypatch.delenv("DISTRIB_JOB_SECRET_FILE", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    path = tmp_path / "distrib" / "job-secret"
    path.parent.mkdir()
    path.write_text("readable-by-all")
    path.chmod(0o644)
    with pytest.raises(secret.JobSecretError, match="mode 0600"):
        secret.cluster_secret("127.0.0.1")


def test_with_a_secret_the_chief_hosts_the_authenticated_store(monkeypatch):
    from distrib.comm import auth_store

    monkeypatch.setenv("DISTRIB_JOB_SECRET", SECRET.decode())
    chief = auth_store.host_store("127.0.0.1", 0, 2, 5.0)
    assert isinstance(chief, AuthStore)
    other = auth_store.connect_client("127.0.0.1", chief._server.port, 2, 5.0)
    other.set("k", "v")
    assert chief.get("k") == b"v"
    chief.close()


def test_an_unwritable_secret_directory_is_one_line_naming_the_fix(monkeypatch, tmp_path):
    from distrib.comm import secret

    monkeypatch.delenv("DISTRIB_JOB_SECRET", raising=False)
    monkeypatch.delenv("DISTRIB_JOB_SECRET_FILE", raising=False)
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("x")
    monkeypatch.setattr(secret, "local_secret_path", lambda environ=None: str(blocked / "distrib" / "job-secret"))
    with pytest.raises(secret.JobSecretError, match="cannot create this user's job secret.*DISTRIB_JOB_SECRET"):
        secret.cluster_secret("127.0.0.1")
