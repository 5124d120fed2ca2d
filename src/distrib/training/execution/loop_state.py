"""`TrainLoopState`: where `Model.fit` is, in a form a backup can save and restore.

`fit` keeps one `TrainLoopState` on the model (``model.train_loop_state``) and
updates it as it goes; `BackupAndRestore` saves ``state_dict()`` and, on a
restarted run, calls ``load_state_dict`` from ``on_train_begin``. `fit` reads
the state only *after* ``on_train_begin``, so it starts from what was restored.

The counters:

* ``epoch``: the epoch in progress (0-based).
* ``step_in_epoch``: steps completed in that epoch.
* ``global_step``: steps completed since the first ``fit`` of this model.
* ``epoch_done``: True from the moment the epoch's last step completed until
  the next epoch begins (during ``on_epoch_end`` hooks, for example).

Example — a backup taken after step 30 of epoch 1 (0-based) resumes at step 31::

    >>> s = TrainLoopState()
    >>> s.epoch, s.step_in_epoch, s.global_step = 1, 30, 100
    >>> restored = TrainLoopState(); restored.load_state_dict(s.state_dict())
    >>> restored.resume_point()
    (1, 30)

A state saved while ``epoch_done`` is True resumes at the start of the next
epoch: ``(epoch + 1, 0)``.

The data position travels with it: while `fit` runs, ``state_dict()["iterator"]``
holds the input's position (the distributed dataset's pass count and its
iterator's position, JSON-able); after ``load_state_dict`` that position
waits in ``data_position`` (a `PendingRestore`) until `fit` creates the
iterator it belongs to and takes it. A state loaded before `fit` starts (by a
callback's ``on_train_begin`` or by restoring a checkpoint that tracks
``model.train_loop_state``) makes that `fit` resume from it.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from distrib.utils.pending_restore import PendingRestore

__all__ = ["TrainLoopState"]


class TrainLoopState:
    """Epoch, step and data position of a `fit` run."""

    def __init__(self) -> None:
        self.epoch: int = 0
        self.step_in_epoch: int = 0
        self.global_step: int = 0
        self.epoch_done: bool = False
        #: Shuffle seed of the fit run, so a resumed run shuffles identically.
        self.shuffle_seed: Optional[int] = None
        self._iterator: Any = None
        #: A restored data position waiting for `fit` to create the iterator it belongs to.
        self.data_position: PendingRestore[Dict[str, Any]] = PendingRestore()
        self._restored: bool = False

    # ---------------------------------------------------------- iterator
    def attach_iterator(self, iterator: Any) -> None:
        """Make ``iterator`` (anything with ``state_dict()``) the source of the recorded position."""
        self._iterator = iterator

    @property
    def restored(self) -> bool:
        """True once `load_state_dict` ran and `fit` has not yet consumed it."""
        return self._restored

    def consume_restored(self) -> bool:
        """Return `restored` and clear it (fit calls this once, after ``on_train_begin``)."""
        was, self._restored = self._restored, False
        return was

    # ------------------------------------------------------------ resume
    def resume_point(self) -> Tuple[int, int]:
        """``(epoch, step_in_epoch)`` at which training continues."""
        if self.epoch_done:
            return self.epoch + 1, 0
        return self.epoch, self.step_in_epoch

    # -------------------------------------------------------- state dict
    def state_dict(self) -> Dict[str, Any]:
        """Counters and the data position (the live iterator's, else a waiting one)."""
        if self._iterator is not None and hasattr(self._iterator, "state_dict"):
            iterator_state = self._iterator.state_dict()
        else:
            iterator_state = self.data_position.peek()
        return {
            "epoch": int(self.epoch),
            "step_in_epoch": int(self.step_in_epoch),
            "global_step": int(self.global_step),
            "epoch_done": bool(self.epoch_done),
            "shuffle_seed": self.shuffle_seed,
            "iterator": iterator_state,
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restore counters; the iterator position waits for `fit` to apply it."""
        missing = {"epoch", "step_in_epoch", "global_step"} - set(state)
        if missing:
            raise ValueError(f"TrainLoopState.load_state_dict: state lacks {sorted(missing)}; "
                             "pass a dict produced by TrainLoopState.state_dict()")
        self.epoch = int(state["epoch"])
        self.step_in_epoch = int(state["step_in_epoch"])
        self.global_step = int(state["global_step"])
        self.epoch_done = bool(state.get("epoch_done", False))
        seed = state.get("shuffle_seed")
        self.shuffle_seed = None if seed is None else int(seed)
        self.data_position.hold(state.get("iterator"))
        self._iterator = None
        self._restored = True

    def __repr__(self) -> str:
        return (f"TrainLoopState(epoch={self.epoch}, step_in_epoch={self.step_in_epoch}, "
                f"global_step={self.global_step}, epoch_done={self.epoch_done})")
