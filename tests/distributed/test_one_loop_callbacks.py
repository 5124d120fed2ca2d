"""The one training loop: the same callback scenario observes the same hooks under every strategy.

`one_loop_scenario.record_scenario` (recording callback, History,
BackupAndRestore interrupted and resumed, validation, steps_per_execution)
runs in one process under the default strategy (steps run here) and under a
strategy whose steps are *scheduled* (a `StepScheduler` that runs each
scheduled function at once, on a copy of what it carries, as a worker
would); the slow test runs it under MultiWorkerMirroredStrategy on 2 workers
and under ParameterServerStrategy on chief + 2 workers + 2 ps.
"""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence

import cloudpickle
import pytest
import torch

import distrib
from distrib.strategies.default import DefaultStrategy
from distrib.strategies.interface import Strategy, StrategyBoundState
from distrib.strategies.step_scheduler import StepScheduler
from one_loop_scenario import expected_calls, global_batches, mwms_task, per_worker_batches, record_scenario

HERE = os.path.abspath(__file__)


class _Done:
    def __init__(self, value: Any) -> None:
        self.value = value

    def done(self) -> bool:
        return True

    def get(self) -> Any:
        return self.value


class _Pickler(cloudpickle.Pickler):
    def __init__(self, file: io.BytesIO, shared: Callable[[Any], Optional[int]]) -> None:
        super().__init__(file)
        self._shared = shared

    def persistent_id(self, obj: Any) -> Optional[int]:  # noqa: D401 - pickle hook
        return self._shared(obj)


class InlineScheduler:
    """Runs each scheduled function at once on a copy of its arguments; modules, optimizers, metrics,
    the strategy and per-worker iterators are shared, as a parameter-server worker shares them."""

    def __init__(self) -> None:
        self.iterators: List[Any] = []
        self.scheduled = 0

    def _shared(self, obj: Any) -> bool:
        return (isinstance(obj, (torch.nn.Module, torch.optim.Optimizer, Strategy, StrategyBoundState))
                or any(obj is it for it in self.iterators))

    def schedule(self, fn: Callable, args: Optional[Sequence] = None, kwargs: Optional[Dict] = None) -> _Done:
        objects: Dict[int, Any] = {}

        def pid(obj: Any) -> Optional[int]:
            if self._shared(obj):
                objects[id(obj)] = obj
                return id(obj)
            return None

        buffer = io.BytesIO()
        _Pickler(buffer, pid).dump((fn, tuple(args or ()), dict(kwargs or {})))
        unpickler = cloudpickle.pickle.Unpickler(io.BytesIO(buffer.getvalue()))
        unpickler.persistent_load = objects.__getitem__
        fn, args, kwargs = unpickler.load()
        self.scheduled += 1
        return _Done(fn(*args, **kwargs))

    def join(self) -> None:
        """Every function already ran."""

    def create_per_worker_dataset(self, dataset_fn: Callable[[], Any]) -> Any:
        scheduler = self

        class PerWorker:
            def __iter__(self) -> Any:
                scheduler.iterators.append(iter(dataset_fn()))
                return scheduler.iterators[-1]
        return PerWorker()

    def share(self, *objects: Any) -> None:
        """Nothing to create elsewhere."""

    def pull(self, module: torch.nn.Module, optimizer: Optional[torch.optim.Optimizer]) -> None:
        """The module and optimizer trained here are the variables themselves."""

    @staticmethod
    def between_steps(tensors: Sequence[torch.Tensor]) -> None:
        """The variables are this process's own."""


class InlineScheduledStrategy(DefaultStrategy):
    """One process whose fit schedules its steps (through `InlineScheduler`)."""

    def __init__(self) -> None:
        super().__init__()
        self.scheduler = InlineScheduler()

    def step_scheduler(self) -> InlineScheduler:
        return self.scheduler


def test_the_inline_scheduler_is_a_step_scheduler():
    assert isinstance(InlineScheduler(), StepScheduler)
    assert distrib.get_strategy().step_scheduler() is None     # replicated strategies run steps here


def _check(record: Dict[str, Any]) -> None:
    first, second = record["interrupted"], record["resumed"]
    assert first["calls"] == expected_calls(0, 1) and first["history"] is None
    assert second["restored"] and second["calls"] == expected_calls(2, 3) + [["train_end", None,
                                                                                ["loss", "mae", "val_loss",
                                                                                 "val_mae"]]]
    assert second["history"] == {"epoch": [2, 3], "keys": ["loss", "mae", "val_loss", "val_mae"]}
    assert second["global_step"] == 4 * 6


def test_local_and_scheduled_steps_show_callbacks_the_same_run(tmp_path):
    local = record_scenario(distrib.get_strategy(), global_batches, str(tmp_path / "local"))
    strategy = InlineScheduledStrategy()
    scheduled = record_scenario(strategy, lambda: per_worker_batches, str(tmp_path / "scheduled"))
    _check(local)
    assert scheduled == local
    assert strategy.scheduler.scheduled == 2 * (2 * 3 + 2)     # 2 runs x 2 epochs x (3 train + 1 test) executions


def test_scheduled_fit_refuses_what_belongs_in_the_dataset_with_one_line():
    strategy = InlineScheduledStrategy()
    with strategy.scope():
        model = distrib.Model(torch.nn.Linear(4, 1))
        model.compile(optimizer="sgd", loss="mse")
    cases = [(dict(x=per_worker_batches, epochs=1), ValueError, r"^fit under ParameterServerStrategy needs "
                                                                r"steps_per_epoch=N"),
             (dict(x=per_worker_batches, steps_per_epoch=2, class_weight={0: 1.0}), ValueError,
              r"^fit\(class_weight=...\) is not supported under ParameterServerStrategy"),
             (dict(x=per_worker_batches, steps_per_epoch=2, validation_split=0.5), ValueError,
              r"^fit\(validation_split=...\) is not supported"),
             (dict(x=per_worker_batches, steps_per_epoch=2, validation_data=per_worker_batches, validation_steps=1,
                   validation_batch_size=4), ValueError, r"^fit\(validation_batch_size=...\) is not supported"),
             (dict(x=torch.ones(4, 4), y=torch.ones(4, 1), steps_per_epoch=2), ValueError,
              r"not arrays \(x, y\): wrap them"),
             (dict(x=per_worker_batches, steps_per_epoch=2, validation_data=per_worker_batches), ValueError,
              r"^fit under ParameterServerStrategy needs validation_steps=N")]
    for kwargs, error, pattern in cases:
        with pytest.raises(error, match=pattern) as info:
            model.fit(verbose=0, **kwargs)
        assert "\n" not in str(info.value)
    with pytest.raises(TypeError, match=r"a distrib.data.Dataset; got int"):
        model.evaluate(3, steps=1, verbose=0)
    with pytest.raises(ValueError, match=r"^evaluate under ParameterServerStrategy needs steps=N"):
        model.evaluate(per_worker_batches, verbose=0)


def test_scheduled_fit_takes_a_dataset_creator_or_a_dataset_copied_to_every_worker():
    strategy = InlineScheduledStrategy()
    with strategy.scope():
        model = distrib.Model(torch.nn.Sequential(torch.nn.LazyLinear(1)))   # built from one batch first
        model.compile(optimizer="sgd", loss="mse")
    creator = distrib.data.experimental.DatasetCreator(per_worker_batches)
    assert model.fit(creator, epochs=1, steps_per_epoch=3, verbose=0).history["loss"][0] > 0
    copied = global_batches()
    evaluated = model.evaluate(copied, steps=2, verbose=0)
    assert evaluated == pytest.approx(model.evaluate(copied, steps=2, verbose=0))   # the same first batches


def test_scheduled_fit_warns_and_stops_when_a_worker_runs_out_of_data():
    strategy = InlineScheduledStrategy()
    with strategy.scope():
        model = distrib.Model(torch.nn.Linear(4, 1))
        model.compile(optimizer="sgd", loss="mse", steps_per_execution=4)
    finite = lambda ctx: per_worker_batches(ctx).take(5)  # noqa: E731 - 5 batches, no repeat
    with pytest.warns(UserWarning, match=r"ran out of data during epoch 1 \(2 of 3 steps ran\)"):
        history = model.fit(finite, epochs=3, steps_per_epoch=3, verbose=0)
    assert history.epoch == [0, 1] and model.train_loop_state.global_step == 5


class CountingModel(distrib.Model):
    """A subclass's train_step: scheduled steps run it too (the model travels with each function)."""

    def train_step(self, data, global_batch_size):
        self.module.seen += 1          # a buffer: the module is shared, its buffers come back
        return super().train_step(data, global_batch_size)


def test_scheduled_steps_run_a_model_subclass_train_step():
    strategy = InlineScheduledStrategy()
    with strategy.scope():
        module = torch.nn.Linear(4, 1)
        module.register_buffer("seen", torch.zeros(()))
        model = CountingModel(module)
        model.compile(optimizer="sgd", loss="mse", steps_per_execution=2)
    model.fit(per_worker_batches, epochs=2, steps_per_epoch=3, verbose=0)
    assert int(module.seen) == 6 and strategy.scheduler.scheduled == 4


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_multi_worker_mirrored_and_parameter_server_show_callbacks_the_same_run(tmp_path):
    workers = distrib.testing.run_cluster(mwms_task, num_workers=2, args=(str(tmp_path),), timeout=200)
    path = os.pathsep.join(p for p in (os.path.dirname(HERE), os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, HERE, str(tmp_path)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path})  # the scenario's module
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    ps = json.loads([line for line in proc.stdout.splitlines() if line.startswith("RESULT ")][-1][7:])
    _check(workers[0])
    assert workers[0] == workers[1] == ps


def _parameter_server_chief(tmp: str) -> None:
    resolver = distrib.testing.create_in_process_cluster(num_workers=2, num_ps=2)
    strategy = distrib.experimental.ParameterServerStrategy(resolver)
    record = record_scenario(strategy, lambda: per_worker_batches, os.path.join(tmp, "ps"))
    print("RESULT " + json.dumps(record), flush=True)


if __name__ == "__main__":
    _parameter_server_chief(sys.argv[1])
