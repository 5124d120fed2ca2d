"""A seeded Model.fit with BackupAndRestore: killed and resumed, it ends with the uninterrupted run's numbers.

The walk-through in docs/checkpoints.md ("Check it yourself: a killed run ends
with the same numbers") runs it twice, once uninterrupted and once with a
worker killed at a step, and compares the last line:

    distrib launch --workers 2 examples/seeded_backup.py /tmp/backup-a
    distrib launch --workers 2 --max-restarts 1 examples/seeded_backup.py /tmp/backup-b --kill-worker 1 --at-step 13

Everything that decides the numbers is seeded: the weights (``torch.manual_seed``),
the data (a NumPy ``RandomState``), the shuffle and the dropout (from torch's
seed, saved in the backup with every replica's RNG state).
"""
import argparse
import hashlib
import os
import signal

import numpy as np
import torch

import distrib
from distrib.callbacks import BackupAndRestore, Callback

parser = argparse.ArgumentParser()
parser.add_argument("backup_dir")
parser.add_argument("--kill-worker", type=int, default=-1, help="the worker that kills itself (first attempt only)")
parser.add_argument("--at-step", type=int, default=13, help="the global step after which it does")
parser.add_argument("--progress", action="store_true", help="show fit's progress bar (verbose=1)")
args = parser.parse_args()
torch.set_num_threads(1)

strategy = distrib.MultiWorkerMirroredStrategy()
first_attempt = os.environ.get("DISTRIB_RESTART_COUNT", "0") == "0"
with strategy.scope():
  torch.manual_seed(0)
  model = distrib.Model(torch.nn.Sequential(
      torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(32, 1)))
  model.compile(optimizer="adam", loss="mse")

rs = np.random.RandomState(0)
x = rs.randn(512, 8).astype("float32")
y = (x @ rs.randn(8, 1) + 0.1 * rs.randn(512, 1)).astype("float32")


class KillAtStep(Callback):
  """SIGKILLs this worker after ``--at-step`` on the first attempt: a crash, not a clean exit."""

  def on_train_batch_end(self, batch, logs=None):
    if (first_attempt and strategy.replica_id == args.kill_worker
        and model.train_loop_state.global_step == args.at_step):
      os.kill(os.getpid(), signal.SIGKILL)


history = model.fit(x, y, batch_size=32, epochs=3, shuffle=True, verbose=1 if args.progress else 0,
                    callbacks=[BackupAndRestore(args.backup_dir, save_freq=5), KillAtStep()])
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.module.parameters())).hexdigest()
if strategy.replica_id == 0:
  print(f"final loss {history.history['loss'][-1]:.9f}, weights sha256 {digest[:16]}", flush=True)
