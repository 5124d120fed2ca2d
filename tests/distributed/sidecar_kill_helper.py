"""The sidecar example, with an evaluator that SIGKILLs itself in the middle of its 2nd evaluation.

Used by test_sidecar_evaluator.py: with ``SIDECAR_KILL=1`` the evaluator dies
(a real kill, no cleanup) half-way through evaluating the second checkpoint;
without it, this is the example unchanged.
"""
import os
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))

import distrib  # noqa: E402
import guide_sidecar_evaluator as guide  # noqa: E402


class KillInSecondEvaluation(distrib.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.evaluations = 0

    def on_test_begin(self, logs=None):
        self.evaluations += 1

    def on_test_batch_end(self, batch, logs=None):
        if self.evaluations == 2:
            os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    guide.main(eval_callbacks=[KillInSecondEvaluation()] if os.environ.get("SIDECAR_KILL") == "1" else None)
