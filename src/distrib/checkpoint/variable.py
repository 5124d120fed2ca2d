"""`Variable`: a mutable tensor value a `Checkpoint` can save and restore in place.

Python ints cannot be restored in place, so loop counters that must survive a
restart live in a `Variable` (the ``tf.Variable(0, dtype=tf.int64)`` of
TensorFlow's multi-worker custom-loop tutorial).

Example:
    >>> epoch = Variable(0, name="epoch")          # int64 scalar
    >>> epoch.assign_add(1)
    Variable(name='epoch', value=1, dtype=torch.int64)
    >>> epoch.numpy() < 3, int(epoch)
    (True, 1)
"""
from __future__ import annotations

import functools
from typing import Any, Dict, List, Optional

import numpy as np
import torch

__all__ = ["Variable"]


def _as_tensor(value: Any, dtype: Optional[torch.dtype]) -> torch.Tensor:
    if isinstance(value, Variable):
        value = value.value()
    if isinstance(value, torch.Tensor):
        t = value.detach().clone()
        return t.to(dtype) if dtype is not None else t
    if dtype is None and isinstance(value, bool):
        dtype = torch.bool
    elif dtype is None and isinstance(value, (int, np.integer)):
        dtype = torch.int64
    return torch.as_tensor(value, dtype=dtype).clone()


@functools.total_ordering
class Variable:
    """A named tensor (often a 0-d counter) with TF's ``assign`` family.

    Args:
        initial_value: a number, array or tensor; Python ints become int64.
        dtype: optional torch dtype to cast to.
        name: used in ``repr`` only.
    """

    def __init__(self, initial_value: Any = 0, dtype: Optional[torch.dtype] = None,
                 name: Optional[str] = None) -> None:
        self._value = _as_tensor(initial_value, dtype)
        self.name = name

    # ----------------------------------------------------------- reading
    def value(self) -> torch.Tensor:
        """The current value (the tensor itself; do not modify it in place)."""
        return self._value

    read_value = value

    def numpy(self) -> Any:
        """A numpy scalar for 0-d variables, else a numpy array copy."""
        arr = self._value.cpu().numpy()
        return arr[()] if arr.ndim == 0 else arr.copy()

    @property
    def dtype(self) -> torch.dtype:
        return self._value.dtype

    @property
    def shape(self) -> torch.Size:
        return self._value.shape

    # ----------------------------------------------------------- writing
    def assign(self, value: Any) -> "Variable":
        new = _as_tensor(value, self._value.dtype)
        if new.shape != self._value.shape:
            raise ValueError(f"Variable {self.name!r}: cannot assign shape {tuple(new.shape)} "
                             f"to shape {tuple(self._value.shape)}")
        self._value.copy_(new)
        return self

    def assign_add(self, delta: Any) -> "Variable":
        self._value.add_(_as_tensor(delta, self._value.dtype))
        return self

    def assign_sub(self, delta: Any) -> "Variable":
        self._value.sub_(_as_tensor(delta, self._value.dtype))
        return self

    # ------------------------------------------------------- checkpoints
    def state_dict(self) -> Dict[str, Any]:
        return {"value": self._value}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.assign(state["value"])

    def tensors_restored_verbatim(self) -> List[torch.Tensor]:
        """The value tensor: a restore reads the saved value straight into it (same dtype and shape)."""
        return [self._value]

    # ------------------------------------------------------- conversions
    def __int__(self) -> int:
        return int(self._value.item())

    def __index__(self) -> int:
        if self._value.is_floating_point():
            raise TypeError(f"Variable {self.name!r} of dtype {self.dtype} cannot be used as an index")
        return int(self._value.item())

    def __float__(self) -> float:
        return float(self._value.item())

    def __bool__(self) -> bool:
        return bool(self._value.item())

    def __eq__(self, other: Any) -> bool:  # type: ignore[override]
        other = other.value() if isinstance(other, Variable) else other
        return bool(torch.equal(self._value, torch.as_tensor(other, dtype=self._value.dtype)))

    def __lt__(self, other: Any) -> bool:
        other = other.value() if isinstance(other, Variable) else other
        return bool((self._value < other).all())

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shown = self._value.item() if self._value.dim() == 0 else self._value.tolist()
        return f"Variable(name={self.name!r}, value={shown}, dtype={self.dtype})"
