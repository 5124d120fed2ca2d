"""The parameter-server channel keeps serving while the interpreter exits, until its own shutdown.

Python's exit first flags every ``ThreadPoolExecutor`` as shut down
(``concurrent.futures.thread._python_exit``, run before any ``atexit``
function); a peer's call arriving then, before the chief's ``atexit``
shutdown stops its server, killed gRPC's serving thread with ``RuntimeError:
cannot schedule new futures after shutdown``. The test calls that exit step
itself, then calls the server.
"""
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(120)

PROGRAM = textwrap.dedent("""
    import concurrent.futures.thread as futures_thread
    from distrib.strategies.parameter_server.transport import Channel, Server

    server = Server("127.0.0.1", {"echo": lambda x: x}, auth=None, tls=None, threads=2, name="ps:0")
    channel = Channel(f"127.0.0.1:{server.port}", auth=None, tls=None, dest="ps:0")
    assert channel.call_async("echo", (1,), timeout=20).wait() == 1
    futures_thread._python_exit()           # the interpreter's first exit step
    print("answer", channel.call_async("echo", (5,), timeout=20).wait(), flush=True)
    server.stop(grace=1.0)
    channel.close()
""")


def test_a_call_during_interpreter_exit_is_answered_without_a_traceback():
    proc = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=100)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 0 and "answer 5" in proc.stdout, proc.stderr[-3000:]


def test_the_pool_runs_work_and_refuses_it_after_shutdown():
    from distrib.strategies.parameter_server.serving_pool import ServingPool

    pool = ServingPool(max_workers=2, name="t")
    assert [f.result(timeout=20) for f in [pool.submit(pow, 2, n) for n in range(6)]] == [1, 2, 4, 8, 16, 32]
    failing = pool.submit(int, "x")
    with pytest.raises(ValueError):
        failing.result(timeout=20)
    pool.shutdown()
    with pytest.raises(RuntimeError, match="t: the server has stopped"):
        pool.submit(int, "1")
