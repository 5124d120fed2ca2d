"""A pytest plugin that writes each failure's traceback to a file as it happens.

For runs that may be cut off by a time limit (``timeout`` kills pytest before
its summary): ``pytest -p failure_log`` with this folder on ``sys.path``
appends to ``$FAILURE_LOG`` (default ``failures.log``) one block per failed
test, the moment its report arrives (under xdist, in the controller).
"""
from __future__ import annotations

import os


def pytest_runtest_logreport(report) -> None:
    if not report.failed:
        return
    with open(os.environ.get("FAILURE_LOG", "failures.log"), "a", encoding="utf-8") as log:
        log.write(f"##### {report.nodeid} ({report.when})\n{report.longreprtext[-4000:]}\n\n")
