"""The job `bench_elastic.py` runs: `fit` with `BackupAndRestore`, optionally one task SIGKILLed at a step.

Arguments: OUT_DIR MODEL STEPS KILL_STEP VICTIM SAVE_FREQ.

* MODEL: ``cnn`` (the TF tutorials' MNIST CNN, 2.8M parameters, 64 images per worker and step)
  or ``tiny`` (Linear 32->64->10, a global batch of 32: a step that is almost all
  framework overhead);
* STEPS: training steps (one epoch);
* KILL_STEP (-1: no fault) and VICTIM (a task index): the victim SIGKILLs itself
  at the end of step KILL_STEP, in the first attempt and not as a replacement;
* SAVE_FREQ: `BackupAndRestore`'s ``save_freq`` (a restart resumes from its last backup).

Every process appends ``<global step> <wall time> <process CPU time> <attempt>``
to ``OUT_DIR/steps-<task>-<pid>.txt`` at each step end; the victim writes
``OUT_DIR/killed`` (its wall time) just before it dies.
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

out_dir, model_name, steps, kill_step, victim, save_freq = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
    int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
torch.set_num_threads(1)
strategy = distrib.MultiWorkerMirroredStrategy()
task = strategy.cluster_resolver.task_id
workers = strategy.cluster_resolver.cluster_spec().num_tasks("worker")
armed = (task == victim and os.environ.get("DISTRIB_ELASTIC_JOIN") != "1"
         and os.environ.get("DISTRIB_RESTART_COUNT", "0") == "0")
rs = np.random.RandomState(0)
with strategy.scope():
    torch.manual_seed(0)
    if model_name == "cnn":  # the TF tutorials' MNIST CNN (bench/workloads.py), on synthetic MNIST-shaped images
        module = torch.nn.Sequential(
            torch.nn.Unflatten(1, (1, 28)), torch.nn.Conv2d(1, 32, 3), torch.nn.ReLU(), torch.nn.Flatten(),
            torch.nn.Linear(26 * 26 * 32, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
        global_batch, x = 64 * workers, rs.rand(64 * workers * 20, 28, 28).astype("float32")
    else:
        module = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
        global_batch, x = 32, rs.randn(32 * 20, 32).astype("float32")
    model = distrib.Model(module)
    model.compile(optimizer="adam", loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True))
y = rs.randint(0, 10, size=(x.shape[0],)).astype("int64")
log = open(os.path.join(out_dir, f"steps-{task}-{os.getpid()}.txt"), "a", buffering=1)


class Clock(Callback):
    def on_train_batch_end(self, batch, logs=None):
        step = model.train_loop_state.global_step
        log.write(f"{step} {time.time()} {time.process_time()} {os.environ.get('DISTRIB_RESTART_COUNT', '0')}\n")
        if armed and step == kill_step:
            with open(os.path.join(out_dir, "killed"), "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)


per_epoch = x.shape[0] // global_batch  # 20
model.fit(x, y, batch_size=global_batch, epochs=-(-steps // per_epoch), verbose=0,
          callbacks=[BackupAndRestore(os.path.join(out_dir, "backup"), save_freq=save_freq), Clock()])
