"""What a ``worker`` or ``ps`` task does when its program creates the strategy: serve, then exit.

Every task of a parameter-server job runs the same script. TensorFlow's
workers and ps tasks call ``server.join()`` and never return; distrib does
the same, in one place: `serve_forever_and_exit` serves until the chief's
program ends and then ends the process with status 0 (``SystemExit``, so
``finally`` blocks and ``atexit`` handlers run), so nothing after the
strategy's construction runs on those tasks.

Example (the same script on every task):
    >>> strategy = distrib.experimental.ParameterServerStrategy()
    >>> # a worker or ps task serves inside that call, then exits 0
    >>> print("only the chief (and an evaluator) gets here")
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

from distrib.strategies.parameter_server.runtime import Runtime

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

__all__ = ["serve_forever_and_exit"]


def serve_forever_and_exit(runtime: Runtime, strategy: "Strategy") -> NoReturn:
    """Serve as this task's role until the chief's program ends, then exit the process with status 0.

    A ps task holds variables and applies updates; a worker runs the
    functions the chief schedules, with ``strategy`` as the strategy those
    functions see (one local replica). If the chief stops answering, the
    runtime exits with status 1 and one line naming it instead.

    Args:
        runtime: this task's started channel (`Runtime.start` has run).
        strategy: the worker's strategy object (unused on a ps task).

    Raises:
        SystemExit: always, with status 0, once the chief said stop.
    """
    task = runtime.cluster.task
    if task.task_type == "worker":
        from distrib.strategies.parameter_server.worker import serve_worker

        serve_worker(runtime, strategy, runtime.cluster.worker_ids.index(task.task_id))
    else:
        runtime.serve()
    raise SystemExit(0)
