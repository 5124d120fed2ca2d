"""Checkpoints on slow and flaky storage (issue 52, item 5).

``flaky://`` is an in-memory fsspec filesystem that fails a seeded fraction
of its calls (open, read, write, list, info, remove) with ``EIO``, and can
hold every write until the test lets it go (a slow store, without timing).
Saves are tried again from the start (`distrib.checkpoint.retry`) or fail
with one named error after a bounded number of tries; a background save's
writes never run on the training thread between the save and its sync; and
a restore either restores one whole checkpoint exactly or fails by name,
never leaving a mix of two.
"""
import errno
import random
import threading
import warnings

import fsspec
import pytest
import torch
from fsspec.implementations.memory import MemoryFileSystem

import distrib
from distrib.checkpoint import CheckpointRestoreError, CheckpointWarning, CorruptCheckpointError, retry
from distrib.checkpoint.checkpoint import CheckpointSaveError

pytestmark = pytest.mark.timeout(180)


class FlakyFS(MemoryFileSystem):
    """Memory storage that fails a seeded fraction of calls and can hold writes until `gate` is set."""

    protocol = "flaky"
    store: dict = {}
    pseudo_dirs = [""]
    rate = 0.0
    rng = random.Random(0)
    calls: list = []
    gate = None  # a threading.Event that every write waits for, when set up

    @classmethod
    def _strip_protocol(cls, path):
        return super()._strip_protocol(path[len("flaky://"):] if path.startswith("flaky://") else path)

    def _hit(self, op):
        FlakyFS.calls.append((op, threading.current_thread().name))
        if op == "write" and FlakyFS.gate is not None:
            assert FlakyFS.gate.wait(60), "the test never let the writes go"
        if FlakyFS.rng.random() < FlakyFS.rate:
            raise OSError(errno.EIO, f"injected failure of {op} (flaky://)")

    def _open(self, path, mode="rb", **kwargs):
        self._hit(f"open {mode}")
        f = super()._open(path, mode, **kwargs)
        for name in ("write",) if "w" in mode else ("read", "readinto"):
            real = getattr(f, name)

            def wrapped(*args, _real=real, _op="write" if "w" in mode else "read"):
                self._hit(_op)
                return _real(*args)
            setattr(f, name, wrapped)
        return f

    def pipe_file(self, path, value, **kwargs):
        self._hit("write")
        return super().pipe_file(path, value, **kwargs)

    def ls(self, path, detail=True, **kwargs):
        self._hit("ls")
        return super().ls(path, detail=detail, **kwargs)

    def info(self, path, **kwargs):
        self._hit("info")
        return super().info(path, **kwargs)

    def rm_file(self, path):
        self._hit("rm")
        return super().rm_file(path)


fsspec.register_implementation("flaky", FlakyFS, clobber=True)


@pytest.fixture
def flaky(monkeypatch):
    FlakyFS.store.clear()
    FlakyFS.pseudo_dirs[:] = [""]
    FlakyFS.calls.clear()
    FlakyFS.rate, FlakyFS.rng, FlakyFS.gate = 0.0, random.Random(52), None
    monkeypatch.setattr(retry, "DELAYS", (0.0,))  # the waits between tries: not what is tested here
    yield FlakyFS
    FlakyFS.rate, FlakyFS.gate = 0.0, None


def _objects(seed):
    torch.manual_seed(seed)
    model = torch.nn.Linear(8, 4)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    return model, opt


def _step(model, opt):
    model(torch.randn(3, 8)).pow(2).sum().backward()
    opt.step()
    opt.zero_grad()


def _values(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_saves_on_flaky_storage_are_retried_or_fail_by_name_and_restore_exactly(flaky):
    model, opt = _objects(0)
    manager = distrib.train.CheckpointManager(distrib.train.Checkpoint(model=model, optimizer=opt),
                                              "flaky://run/ckpts", max_to_keep=None)
    saved, failed, retried = {}, [], 0
    flaky.rate = 0.08
    for _ in range(12):
        _step(model, opt)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                path = manager.save()
                saved[path] = _values(model)
            except CheckpointSaveError as exc:
                failed.append(str(exc))
        retried += sum("trying again" in str(w.message) for w in caught if issubclass(w.category, CheckpointWarning))
    flaky.rate = 0.0
    assert saved and retried, (len(saved), failed, retried)
    for message in failed:  # one line naming the checkpoint and the storage error, after the bounded tries
        assert "\n" not in message and "could not write checkpoint flaky://run/ckpts/ckpt-" in message, message
        assert "injected failure" in message and f"(after {retry.TRIES} tries)" in message, message
    latest = distrib.train.latest_checkpoint("flaky://run/ckpts")
    assert latest == manager.latest_checkpoint and latest in saved
    for path, values in saved.items():
        fresh, fresh_opt = _objects(9)
        distrib.train.Checkpoint(model=fresh, optimizer=fresh_opt).read(path)
        assert _same(_values(fresh), values), path


def test_a_background_save_to_slow_storage_leaves_the_training_steps_alone(flaky):
    """The store holds every write until the steps are done: the save returns, the steps run without one
    storage call on the training thread, and the write lands at the sync (the documented wait)."""
    model, opt = _objects(0)
    manager = distrib.train.CheckpointManager(distrib.train.Checkpoint(model=model, optimizer=opt),
                                              "flaky://run/bg", max_to_keep=2)
    manager.save()
    flaky.gate = threading.Event()
    main = threading.current_thread().name
    _step(model, opt)
    expected = _values(model)
    path = manager.save(options=distrib.train.CheckpointOptions(enable_async=True))  # returns: writes are held
    during = len(flaky.calls)
    for _ in range(5):
        _step(model, opt)
    on_training_thread = [op for op, thread in flaky.calls[during:] if thread == main]
    assert on_training_thread == []
    assert manager.latest_checkpoint != path  # not published yet
    flaky.gate.set()
    manager.sync()
    assert manager.latest_checkpoint == path
    fresh, fresh_opt = _objects(9)
    distrib.train.Checkpoint(model=fresh, optimizer=fresh_opt).read(path)
    assert _same(_values(fresh), expected)


def test_restores_from_flaky_storage_are_whole_or_fail_by_name(flaky):
    model, opt = _objects(0)
    manager = distrib.train.CheckpointManager(distrib.train.Checkpoint(model=model, optimizer=opt),
                                              "flaky://run/restore", max_to_keep=None)
    states = []
    for _ in range(2):
        _step(model, opt)
        manager.save()
        states.append(_values(model))
    flaky.rate = 0.05
    outcomes = {"newest": 0, "older": 0, "named error": 0}
    for attempt in range(12):
        fresh, fresh_opt = _objects(100 + attempt)
        before = _values(fresh)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", CheckpointWarning)
                status = distrib.train.Checkpoint(model=fresh, optimizer=fresh_opt).restore(
                    "flaky://run/restore/ckpt-2")
        except (CheckpointRestoreError, CorruptCheckpointError) as exc:
            assert "\n" not in str(exc) and "flaky://run/restore/ckpt-" in str(exc), str(exc)
            outcomes["named error"] += 1
            continue
        got = _values(fresh)
        assert not _same(got, before)
        if status.path.endswith("ckpt-2"):
            assert _same(got, states[1]), "a restore mixed two checkpoints"
            outcomes["newest"] += 1
        else:
            assert _same(got, states[0]), "a restore mixed two checkpoints"
            outcomes["older"] += 1
    assert outcomes["newest"] > 0, outcomes
