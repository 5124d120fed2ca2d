"""The job `bench_elastic.py` kills: `fit` with `BackupAndRestore`, one worker SIGKILLed at a step.

Arguments: OUT_DIR KILL_STEP (-1: no fault). Every process appends
``<global step> <wall time> <attempt>`` to ``OUT_DIR/steps-<rank>-<pid>.txt`` at
each step end; the victim writes ``OUT_DIR/killed`` (its wall time) just before it
SIGKILLs itself at the end of step KILL_STEP in the first attempt.
"""
import os
import signal
import sys
import time

import numpy as np
import torch

import distrib
from distrib.callbacks.backup_and_restore import BackupAndRestore
from distrib.callbacks.callback import Callback

out_dir, kill_step = sys.argv[1], int(sys.argv[2])
torch.set_num_threads(1)
strategy = distrib.MultiWorkerMirroredStrategy()
rank = strategy.replica_id
victim = (rank == 1 and os.environ.get("DISTRIB_ELASTIC_JOIN") != "1"
          and os.environ.get("DISTRIB_RESTART_COUNT", "0") == "0")
with strategy.scope():
    torch.manual_seed(0)
    model = distrib.Model(torch.nn.Sequential(
        torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10)))
    model.compile(optimizer="adam", loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True))
log = open(os.path.join(out_dir, f"steps-{rank}-{os.getpid()}.txt"), "a", buffering=1)


class Clock(Callback):
    def on_train_batch_end(self, batch, logs=None):
        step = model.train_loop_state.global_step
        log.write(f"{step} {time.time()} {os.environ.get('DISTRIB_RESTART_COUNT', '0')}\n")
        if victim and step == kill_step:
            with open(os.path.join(out_dir, "killed"), "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)


rs = np.random.RandomState(0)
x = rs.randn(96 * 20, 256).astype("float32")
y = rs.randint(0, 10, size=(96 * 20,)).astype("int64")
model.fit(x, y, batch_size=96, epochs=3, verbose=0,
          callbacks=[BackupAndRestore(os.path.join(out_dir, "backup"), save_freq=10), Clock()])
