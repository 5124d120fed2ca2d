"""Check a cluster's addresses before anyone waits on them.

Before the rendezvous, every task:

* resolves every host of the cluster (`resolve_cluster_hosts`), so a name
  that does not resolve fails at once with the task and host named, instead
  of a long wait ending in "could not listen ... timed out";
* checks that its own address is one of this machine's (`own_interface`):
  a task started on the wrong machine, or given another machine's address,
  is named (an error for the chief, a warning for the others);
* finds the network interface that carries its own address, so the
  collective backend (gloo) talks on that interface rather than on whatever
  the machine's host name happens to resolve to (often loopback, which peers
  on other machines cannot reach).

Example:
    >>> spec = ClusterSpec({"worker": ["127.0.0.1:2222", "no-such-host.invalid:2222"]})
    >>> resolve_cluster_hosts(spec, "TF_CONFIG")            # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    distrib.cluster.errors.ClusterConfigError: TF_CONFIG: worker 1's host 'no-such-host.invalid' does not resolve (...)...
    >>> own_interface("127.0.0.1", "worker 0")
    'lo'
"""
from __future__ import annotations

import errno
import fcntl
import ipaddress
import logging
import socket
import struct
from typing import Dict, List, Optional, Protocol

from distrib.cluster.address import parse_address
from distrib.cluster.errors import ClusterConfigError
from distrib.cluster.spec import ClusterSpec
from distrib.cluster.task import TaskInfo

__all__ = ["resolve_cluster_hosts", "host_ips", "own_interface", "interface_of",
           "check_task_addresses"]

log = logging.getLogger("distrib.cluster")
_SIOCGIFADDR = 0x8915
_WILDCARDS = ("0.0.0.0", "::")


def host_ips(host: str) -> List[str]:
    """The IP addresses ``host`` resolves to (TCP), in resolver order; raises `socket.gaierror`."""
    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    ips: List[str] = []
    for family, _, _, _, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6) and sockaddr[0] not in ips:
            ips.append(str(sockaddr[0]).split("%", 1)[0])
    return ips


def resolve_cluster_hosts(spec: ClusterSpec, field: str) -> Dict[str, List[str]]:
    """Resolve every host of ``spec`` once; return host -> IPs.

    Raises:
        ClusterConfigError: ``"<field>: worker 1's host 'h' does not resolve (<reason>); ..."``
            for the first task whose host does not resolve.
    """
    resolved: Dict[str, List[str]] = {}
    for task in spec.tasks():
        address = spec.task_address(task.task_type, task.task_id)
        if address is None:  # torchrun and SLURM name only the rendezvous host
            continue
        host, _ = parse_address(address, f"{field} {task}")
        if host in resolved:
            continue
        try:
            resolved[host] = host_ips(host)
        except (socket.gaierror, UnicodeError) as exc:
            reason = exc.strerror if isinstance(exc, socket.gaierror) and exc.strerror else str(exc)
            raise ClusterConfigError(
                f"{field}: {task}'s host {host!r} (address {address}) does not resolve "
                f"({reason}); fix the name in the cluster, add it to DNS or /etc/hosts, "
                f"or use an IP address") from None
    return resolved


def _ipv4_of(name: str) -> Optional[str]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def _ipv6_by_interface() -> Dict[str, str]:
    found: Dict[str, str] = {}
    try:
        with open("/proc/net/if_inet6", encoding="ascii") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6:
                    ip = str(ipaddress.IPv6Address(int(parts[0], 16)))
                    found.setdefault(ip, parts[5])
    except (OSError, ValueError):
        pass
    return found


def interface_of(ip: str) -> Optional[str]:
    """The name of this machine's interface that carries ``ip``; ``None`` if none is known."""
    if ":" in ip:
        return _ipv6_by_interface().get(str(ipaddress.IPv6Address(ip)))
    for _, name in socket.if_nameindex():
        if _ipv4_of(name) == ip:
            return name
    return None


def _is_local(ip: str) -> bool:
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((ip, 0))
        except OSError as exc:
            if exc.errno == errno.EADDRNOTAVAIL:
                return False
            raise
    return True


def own_interface(host: str, task: str, address: Optional[str] = None) -> Optional[str]:
    """Check that ``host`` (this task's address) is on this machine; return its interface.

    Args:
        host: this task's host from the cluster (name or IP literal).
        task: how errors name this task (``"worker 1"``).
        address: the full ``host:port`` for messages (default: ``host``).

    Returns:
        The interface name, or ``None`` when the address is local but its
        interface cannot be told (e.g. a secondary IPv4 address) or ``host``
        is a wildcard.

    Raises:
        ClusterConfigError: no address ``host`` resolves to belongs to this machine.
    """
    if host in _WILDCARDS:
        return None
    where = address or host
    try:
        ips = host_ips(host)
    except socket.gaierror as exc:
        raise ClusterConfigError(
            f"{task}: its own host {host!r} ({where}) does not resolve ({exc.strerror}); "
            f"fix the cluster or use an IP address") from None
    local = [ip for ip in ips if _is_local(ip)]
    if not local:
        raise ClusterConfigError(
            f"{task}: its address {where} ({', '.join(ips)}) is not an address of this machine "
            f"({socket.gethostname()}); start the task on the machine that has it, or give this "
            f"task this machine's address in the cluster")
    for ip in local:
        name = interface_of(ip)
        if name is not None:
            return name
    return None


class _Resolver(Protocol):
    """What `check_task_addresses` needs of a cluster resolver."""

    cluster_field: str

    @property
    def task_type(self) -> Optional[str]: ...

    @property
    def task_id(self) -> Optional[int]: ...

    @property
    def is_chief(self) -> bool: ...

    def cluster_spec(self) -> ClusterSpec: ...


def check_task_addresses(resolver: _Resolver) -> Optional[str]:
    """Resolve the whole cluster, check this task's own address; return its interface.

    The chief must own its address (its store listens there); another task
    whose address is not on this machine only gets a warning naming it: it
    never listens on that address, and behind NAT or a service proxy the
    published address legitimately differs from the machine's own.

    Raises:
        ClusterConfigError: a host does not resolve, or the chief's address
            is not on this machine (see `resolve_cluster_hosts`, `own_interface`).
    """
    spec = resolver.cluster_spec()
    resolve_cluster_hosts(spec, resolver.cluster_field)
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type is None or task_id is None or not spec.has_task(task_type, task_id):
        return None
    address = spec.task_address(task_type, task_id)
    if address is None:
        return None
    name = TaskInfo(task_type, task_id)
    host, _ = parse_address(address, f"{resolver.cluster_field} {name}")
    try:
        return own_interface(host, str(name), address)
    except ClusterConfigError as exc:
        if resolver.is_chief:
            raise ClusterConfigError(f"{exc} (the chief hosts the rendezvous there)") from None
        log.warning("distrib: %s", exc)
        return None
