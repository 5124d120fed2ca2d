"""An elastic collective's call site names the program's frames only, however the task was started."""
import os

from distrib.comm.elastic.collective import _call_site


def _collective_op():
    return _call_site()


def _program():
    return _collective_op()


def test_the_call_site_ends_where_a_forked_task_s_program_begins():
    """A task forked by `distrib launch` runs its script below the fork server's frames; a new process does not.

    A replacement (forked) and the survivors (new processes) must name the same collective alike.
    """
    namespace = {}
    fake = os.path.join("site-packages", "distrib", "process", "fork_server.py")
    exec(compile("def run_main(program):\n    return program()\n", fake, "exec"), namespace)
    forked = namespace["run_main"](_program)
    fresh = _program()
    assert forked.split("<")[0] == fresh.split("<")[0] == f"{os.path.basename(__file__)}:_program:12"
    assert "fork_server" not in forked
    assert forked == "test_elastic_call_site.py:_program:12"
