"""The programs the elastic resize tests run (`test_elastic_resize.py`, `test_elastic_one_worker.py`).

Arguments: OUT_DIR LEAVER LEAVE_STEP WAIT_STEP. Task LEAVER calls
``request_leave()`` at global step LEAVE_STEP; the chief waits after step
WAIT_STEP until a worker asks to (re)join, so a join happens mid-run whatever
the joiner's start-up time. ``KILL_AT=<task>:<step>`` SIGKILLs that task after
that step (not its replacement). Every task that ends writes
``final-<task>.safetensors`` and ``extra-<task>.json`` (its replica count and
the history or losses). The models have BatchNorm (global-batch statistics)
and Dropout (global-batch dropout), whose results would otherwise depend on
the number of workers.
"""

COMMON = '''
import json, os, sys
import numpy as np
import torch
import distrib
from distrib.checkpoint import save_state
from distrib.comm.elastic import request_leave

out_dir, leaver, leave_step, wait_step = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(1)
if os.environ.get("START_AFTER") and json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 2:
    import time
    deadline = time.monotonic() + 300
    while not os.path.exists(os.environ["START_AFTER"]):  # poll: worker 2 comes up after the job trained
        assert time.monotonic() < deadline
        time.sleep(0.05)  # poll
strategy = distrib.MultiWorkerMirroredStrategy()
task = strategy.cluster_resolver.task_id  # the replica id changes when a worker before this one leaves
FULL = strategy.cluster_resolver.cluster_spec().num_tasks("worker")  # the most workers the job can have


def wait_for_joiner():
    import time
    deadline = time.monotonic() + 120
    # poll: the joiner's Python and torch start-up takes seconds (it may have been admitted already)
    while strategy.num_replicas_in_sync < FULL and not strategy.collective.joiners_waiting():
        assert time.monotonic() < deadline, "no worker asked to rejoin"
        time.sleep(0.05)  # poll


def maybe_die(step):
    """KILL_AT=<task>:<step>: that task is SIGKILLed after that step (not its replacement)."""
    kill = os.environ.get("KILL_AT")
    if kill and os.environ.get("DISTRIB_ELASTIC_JOIN") != "1":
        import signal
        kill_task, kill_step = map(int, kill.split(":"))
        if task == kill_task and step == kill_step:
            os.kill(os.getpid(), signal.SIGKILL)


def finish(module, extra=None):
    if os.environ.get("DISTRIB_LOCAL_REPLICA", "0/").split("/")[0] != "0":
        return  # one file per task: its first local replica writes it
    save_state(module.state_dict(), os.path.join(out_dir, f"final-{task}.safetensors"))
    with open(os.path.join(out_dir, f"extra-{task}.json"), "w") as f:
        json.dump({"replicas": strategy.num_replicas_in_sync, "extra": extra}, f)
'''

FIT_SCRIPT = COMMON + '''
from distrib.callbacks.backup_and_restore import BackupAndRestore
from distrib.callbacks.callback import Callback

with strategy.scope():
    torch.manual_seed(0)
    model = distrib.Model(torch.nn.Sequential(torch.nn.Linear(6, 16, bias=False), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                                              torch.nn.Dropout(0.25), torch.nn.Linear(16, 1)))
    model.compile(optimizer="adam", loss="mse", metrics=["mae"])


class Leave(Callback):
    def on_train_batch_begin(self, batch, logs=None):
        if task == leaver and model.train_loop_state.global_step == leave_step:
            request_leave()

    def on_train_batch_end(self, batch, logs=None):
        if task == 0 and model.train_loop_state.global_step == wait_step:  # the rejoin comes before training ends
            wait_for_joiner()
        maybe_die(model.train_loop_state.global_step)


rs = np.random.RandomState(0)
x = rs.randn(3 * 8 * 8, 6).astype("float32")
y = (x @ rs.randn(6, 1)).astype("float32")
history = model.fit(x, y, batch_size=24, epochs=3, shuffle=True, verbose=0, validation_data=(x[:48], y[:48]),
                    callbacks=[BackupAndRestore(os.path.join(out_dir, "backup"), save_freq=5), Leave()])
finish(model.module, history.history)
'''

CTL_SCRIPT = COMMON + '''
EPOCHS, STEPS, GB = 3, 6, 24
rs = np.random.RandomState(0)
x = rs.randn(GB * STEPS, 6).astype("float32")
y = (x @ rs.randn(6, 1)).astype("float32")
with strategy.scope():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16, bias=False), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                                torch.nn.Dropout(0.25), torch.nn.Linear(16, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    dataset = strategy.experimental_distribute_dataset(
        distrib.data.Dataset.from_tensor_slices((x, y)).shuffle(GB * STEPS, seed=1).batch(GB).repeat())
    iterator = iter(dataset)
    example_loss = distrib.metrics.Mean()  # over every example: a leaver's and a joiner's examples count once
step_var = distrib.train.Variable(0, dtype=torch.int64)
checkpoint = distrib.train.Checkpoint(model=model, optimizer=optimizer, iterator=iterator, step=step_var,
                                      rng=distrib.checkpoint.RNGState())  # dropout's generator, for a joiner
manager = distrib.train.CheckpointManager(checkpoint, os.path.join(out_dir, "ckpt"), max_to_keep=1)
manager.restore_or_initialize()  # a rejoining worker restores the chief's in-memory snapshot here


def step_fn(inputs):
    xb, yb = inputs
    per_example = ((model(xb) - yb) ** 2).mean(dim=1)
    example_loss.update_state(per_example.detach())
    loss = distrib.nn.compute_average_loss(per_example)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.detach()


losses = {}
while int(step_var) < EPOCHS * STEPS:
    step = int(step_var)
    if task == leaver and step == leave_step:
        request_leave()
    loss = strategy.reduce(distrib.ReduceOp.SUM, strategy.run(step_fn, args=(next(iterator),)), axis=None)
    losses[step] = float(loss)
    step_var.assign_add(1)
    if int(step_var) % 3 == 0:
        manager.save()  # a joiner is admitted at the first step after a save
    if task == 0 and step == wait_step:
        wait_for_joiner()
    maybe_die(step)
losses["mean"] = float(example_loss.result())
finish(model, losses)
'''
