"""DISTRIB_PORT_RANGE: ports for tasks from a range, each checked free, never one given out recently."""
import socket

import pytest

from distrib.process import ports
from distrib.process.ports import free_port, port_range, reserve_ports


def _free_span(size=40):
    """A span of ports that bind now (found by binding; other programs may take one later)."""
    for low in range(21000, 32000 - size, size):
        try:
            socks = []
            for p in range(low, low + size):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return low, low + size - 1
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    pytest.skip("no span of free ports below 32000")


@pytest.mark.parametrize("text, span", [("20000-20999", (20000, 20999)), (" 1024-1024 ", (1024, 1024)), ("", None)])
def test_the_range_is_read(text, span):
    assert port_range({"DISTRIB_PORT_RANGE": text}) == span
    assert port_range({}) is None


@pytest.mark.parametrize("text", ["x", "20000", "20000-", "-3", "3000-2000", "0-10", "60000-70000", "1-2-3"])
def test_a_bad_range_is_one_line_naming_the_variable(text):
    with pytest.raises(ValueError, match=r"^DISTRIB_PORT_RANGE=.* is not a port range: write LOW-HIGH"):
        port_range({"DISTRIB_PORT_RANGE": text})


def test_ports_come_from_the_range_distinct_and_free_and_not_again(monkeypatch):
    low, high = _free_span()
    monkeypatch.setenv("DISTRIB_PORT_RANGE", f"{low}-{high}")
    monkeypatch.setattr(ports, "_recent", type(ports._recent)(maxlen=ports._RECENT_LIMIT))
    first = reserve_ports(5)
    assert len(set(first)) == 5 and all(low <= p <= high for p in first)
    taken = socket.socket()
    try:
        busy = next(p for p in range(low, high + 1) if p not in first)
        taken.bind(("127.0.0.1", busy))
        taken.listen()
        rest = reserve_ports(high - low - 5)  # every other port of the span but the busy one
        assert busy not in rest and not set(rest) & set(first)
        assert sorted(first + rest + [busy]) == list(range(low, high + 1))
        with pytest.raises(OSError, match=rf"cannot find 1 free ports on host '127.0.0.1' in "
                                          rf"DISTRIB_PORT_RANGE={low}-{high} \(found 0\)"):
            free_port()  # the rest were given out recently, the busy one is taken
    finally:
        taken.close()
