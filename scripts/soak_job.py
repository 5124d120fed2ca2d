"""The job `scripts/soak.sh` keeps killing: `fit` with `BackupAndRestore` on a tiny model, paced.

Arguments: OUT_DIR STEPS STEP_SECONDS SAVE_FREQ.

Every attempt of every task writes its pid to ``OUT_DIR/pid-<task>`` (the soak
kills the pid it finds there) and appends ``<global step> <wall time>`` to
``OUT_DIR/steps-<task>.txt``; each step lasts at least STEP_SECONDS (a sleep
after it, so that a run of a given length uses little CPU; 0: no pacing). At the
end each task writes its weights to ``OUT_DIR/final-<task>.safetensors``.
"""
import os
import sys
import time

import numpy as np
import torch

import distrib
from distrib.callbacks.backup_and_restore import BackupAndRestore
from distrib.callbacks.callback import Callback
from distrib.checkpoint import save_state

out_dir, steps, step_seconds, save_freq = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(1)
strategy = distrib.MultiWorkerMirroredStrategy()
task = strategy.cluster_resolver.task_id
with open(os.path.join(out_dir, f"pid-{task}.tmp"), "w") as f:
    f.write(str(os.getpid()))
os.replace(os.path.join(out_dir, f"pid-{task}.tmp"), os.path.join(out_dir, f"pid-{task}"))
rs = np.random.RandomState(0)
with strategy.scope():
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Dropout(0.2), torch.nn.ReLU(),
                                 torch.nn.Linear(64, 10))
    model = distrib.Model(module)
    model.compile(optimizer="adam", loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True))
global_batch = 32
x = rs.randn(global_batch * 20, 32).astype("float32")
y = rs.randint(0, 10, size=(x.shape[0],)).astype("int64")
log = open(os.path.join(out_dir, f"steps-{task}.txt"), "a", buffering=1)


class Pace(Callback):
    """Log each step and stretch it to STEP_SECONDS."""

    def __init__(self):
        super().__init__()
        self.last = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        log.write(f"{model.train_loop_state.global_step} {time.time()}\n")
        wait = step_seconds - (time.monotonic() - self.last)
        if wait > 0:
            time.sleep(wait)
        self.last = time.monotonic()


per_epoch = x.shape[0] // global_batch  # 20
model.fit(x, y, batch_size=global_batch, epochs=-(-steps // per_epoch), verbose=0,
          callbacks=[BackupAndRestore(os.path.join(out_dir, "backup"), save_freq=save_freq), Pace()])
save_state(module.state_dict(), os.path.join(out_dir, f"final-{task}.safetensors"))
