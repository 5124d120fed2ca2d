"""Addresses are checked before any wait: unresolvable hosts, a task on the wrong machine."""
import os
import json
import socket

import pytest

import distrib
from distrib.cluster.errors import ClusterConfigError
from distrib.cluster.hostcheck import own_interface, resolve_cluster_hosts
from distrib.cluster.spec import ClusterSpec

pytestmark = pytest.mark.timeout(60)

BAD_HOST = "no-such-host.invalid"  # RFC 2606: never resolves


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def test_an_unresolvable_host_is_named_with_its_task():
    spec = ClusterSpec({"worker": ["127.0.0.1:2222", f"{BAD_HOST}:2223"]})
    with pytest.raises(ClusterConfigError) as info:
        resolve_cluster_hosts(spec, "TF_CONFIG['cluster']")
    message = str(info.value)
    assert message.startswith("TF_CONFIG['cluster']: worker 1's host 'no-such-host.invalid' "
                              "(address no-such-host.invalid:2223) does not resolve")
    assert "use an IP address" in message and "\n" not in message


def test_resolved_hosts_are_returned_once_each():
    spec = ClusterSpec({"chief": ["localhost:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"]})
    resolved = resolve_cluster_hosts(spec, "TF_CONFIG")
    assert sorted(resolved) == ["127.0.0.1", "localhost"]
    assert resolved["127.0.0.1"] == ["127.0.0.1"]


def test_own_address_on_loopback_is_the_loopback_interface():
    assert own_interface("127.0.0.1", "worker 0") == "lo"


def test_an_address_of_another_machine_names_the_task():
    with pytest.raises(ClusterConfigError, match=r"^worker 3: its address 192\.0\.2\.7:5000 "
                       r"\(192\.0\.2\.7\) is not an address of this machine"):
        own_interface("192.0.2.7", "worker 3", "192.0.2.7:5000")


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="this machine has no IPv6 loopback ::1")
def test_ipv6_loopback_is_local():
    assert own_interface("::1", "worker 0", "[::1]:5000") == "lo"


def test_a_strategy_with_an_unresolvable_peer_fails_at_once(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"worker": ["127.0.0.1:2222", f"{BAD_HOST}:2223"]},
        "task": {"type": "worker", "index": 0}}))
    options = distrib.CommunicationOptions(timeout_seconds=600)  # a wait would hit pytest's timeout
    with pytest.raises(ClusterConfigError, match="worker 1's host 'no-such-host.invalid'"):
        distrib.MultiWorkerMirroredStrategy(communication_options=options)


def test_a_chief_whose_own_address_is_elsewhere_names_itself(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"worker": ["192.0.2.7:2222", "127.0.0.1:2223"]},
        "task": {"type": "worker", "index": 0}}))
    options = distrib.CommunicationOptions(timeout_seconds=600)
    with pytest.raises(ClusterConfigError, match=r"^worker 0: its address 192.0.2.7:2222 .*"
                       r"not an address of this machine.*\(the chief hosts the rendezvous there\)$"):
        distrib.MultiWorkerMirroredStrategy(communication_options=options)


def test_another_task_whose_own_address_is_elsewhere_is_warned_about(monkeypatch, caplog):
    from distrib.cluster.hostcheck import check_task_addresses
    from distrib.cluster.tf_config import TFConfigClusterResolver

    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"worker": ["127.0.0.1:2222", "192.0.2.7:2223"]},
        "task": {"type": "worker", "index": 1}}))
    with caplog.at_level("WARNING", logger="distrib.cluster"):
        assert check_task_addresses(TFConfigClusterResolver()) is None
    assert "worker 1: its address 192.0.2.7:2223 (192.0.2.7) is not an address of this machine" \
        in caplog.text


def test_a_parameter_server_job_with_an_unresolvable_host_fails_at_once(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"chief": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223"],
                    "ps": [f"{BAD_HOST}:2224"]},
        "task": {"type": "chief", "index": 0}}))
    options = distrib.CommunicationOptions(timeout_seconds=600)
    with pytest.raises(ClusterConfigError, match="ps 0's host 'no-such-host.invalid'"):
        distrib.experimental.ParameterServerStrategy(communication_options=options)


def test_gloo_is_pointed_at_each_jobs_interface_unless_the_user_named_one():
    """A loopback job's ``lo`` must not stick: a task started later on another host's address (it
    inherits the environment) was handed ``lo`` and its peers dialled 127.0.0.1 (a shuffled CI run)."""
    from unittest import mock

    from distrib.comm.torch_collective import use_interface_for_gloo

    with mock.patch.dict(os.environ):  # the whole environment comes back as it was, whatever is set inside
        os.environ.pop("GLOO_SOCKET_IFNAME", None)
        os.environ.pop("DISTRIB_GLOO_SOCKET_IFNAME_CHOSEN", None)
        use_interface_for_gloo("lo")
        assert os.environ["GLOO_SOCKET_IFNAME"] == "lo"
        use_interface_for_gloo("veth1")
        assert os.environ["GLOO_SOCKET_IFNAME"] == "veth1"
        os.environ["GLOO_SOCKET_IFNAME"] = "ib0"  # the user's choice
        use_interface_for_gloo("veth2")
        assert os.environ["GLOO_SOCKET_IFNAME"] == "ib0"
    assert os.environ.get("GLOO_SOCKET_IFNAME") != "veth1"
