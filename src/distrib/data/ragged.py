"""`RaggedList`: a ragged component of a ``ragged_batch`` (tf.data's ``RaggedTensor``, as a list of rows).

``ragged_batch`` gives each component whose rows' shapes differ as the list
of its rows' tensors; `RaggedList.to_tensor` pads them into one dense tensor
as ``tf.RaggedTensor.to_tensor`` does.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import torch

__all__ = ["RaggedList"]


class RaggedList(list):
    """A ragged component of a ``ragged_batch``: the list of its rows' tensors (shapes may differ).

    Example:
        >>> RaggedList([torch.tensor([1, 2]), torch.tensor([3])]).to_tensor()
        tensor([[1, 2],
                [3, 0]])
    """

    def to_tensor(self, default_value: Any = None, shape: Optional[Sequence[Optional[int]]] = None) -> torch.Tensor:
        """The rows padded into one dense tensor, as ``tf.RaggedTensor.to_tensor`` does.

        Args:
            default_value: the scalar that fills the padding (0, or False, by default).
            shape: the result's shape, one entry per dimension (the rows' count
                first); None entries (or no ``shape``) take the longest row's
                size. Rows longer than a given size are cut, as in TF.

        Raises:
            ValueError: rows of different ranks, a non-scalar ``default_value``,
                or a ``shape`` of another rank.
        """
        rows = [torch.as_tensor(r) for r in self]
        ranks = {r.dim() for r in rows}
        if len(ranks) > 1:
            raise ValueError(f"RaggedList.to_tensor(): rows have different ranks {sorted(ranks)}")
        rank = ranks.pop() if ranks else 0
        bounding = [len(rows)] + [max((int(r.shape[d]) for r in rows), default=0) for d in range(rank)]
        if shape is not None:
            if len(shape) != rank + 1:
                raise ValueError(f"RaggedList.to_tensor(shape={list(shape)}): the tensor has rank {rank + 1}, "
                                 f"so shape needs {rank + 1} entries")
            bounding = [b if s is None else int(s) for b, s in zip(bounding, shape)]
        fill = torch.as_tensor(0 if default_value is None else default_value)
        if fill.dim():
            raise ValueError(f"RaggedList.to_tensor(default_value=...) takes a scalar, got shape {tuple(fill.shape)}")
        dtype = rows[0].dtype if rows else fill.dtype
        out = torch.full(bounding, fill.item(), dtype=dtype)
        for i, row in enumerate(rows[:bounding[0]]):
            part = row[tuple(slice(0, n) for n in bounding[1:])]
            out[(i,) + tuple(slice(0, n) for n in part.shape)] = part
        return out
