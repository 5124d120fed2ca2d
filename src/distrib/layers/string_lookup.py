"""`StringLookup`: strings to integer ids (and back), Keras's index layout.

With the defaults (``num_oov_indices=1``, ``mask_token=None``) index 0 is the
out-of-vocabulary id and ``vocabulary[i]`` is ``i + 1``. A ``mask_token``
takes index 0 and shifts everything by one; ``num_oov_indices=0`` maps unknown
strings to -1. ``invert=True`` maps ids back to strings (unknown ids give
``oov_token``). Inputs are what `distrib.data` elements hold: ``str``, numpy
str arrays or lists of str; outputs are int64 tensors of the same shape (or
numpy str arrays when inverting), so the layer works inside ``Dataset.map``.

Example:
    >>> lookup = StringLookup(vocabulary=["a", "b", "c"])
    >>> lookup(np.array(["a", "c", "z"]))
    tensor([1, 3, 0])
    >>> lookup.get_vocabulary()
    ['[UNK]', 'a', 'b', 'c']
    >>> StringLookup(vocabulary=["a", "b", "c"], invert=True)(torch.tensor([3, 0]))
    array(['c', '[UNK]'], dtype='<U5')
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np
import torch

__all__ = ["StringLookup"]


def _read_vocabulary(vocabulary: Union[str, Sequence[Any], np.ndarray]) -> List[str]:
    if isinstance(vocabulary, (str, os.PathLike)):
        try:
            with open(vocabulary, encoding="utf-8") as handle:
                return [line.rstrip("\r\n") for line in handle]
        except OSError as exc:
            raise FileNotFoundError(f"StringLookup: cannot read the vocabulary file {vocabulary}: "
                                    f"{exc.strerror or exc}") from None
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in np.asarray(vocabulary).reshape(-1)]


class StringLookup:
    """Keras's ``StringLookup`` with a fixed vocabulary (``output_mode="int"``).

    Args:
        vocabulary: the tokens (a list, a numpy array) or a text file, one token a line.
        num_oov_indices: 1 (default) or 0 (unknown strings then map to -1).
        mask_token: a token mapped to index 0, or None.
        oov_token: what `invert` gives for unknown ids.
        invert: map ids to strings instead.
    """

    def __init__(self, vocabulary: Union[str, Sequence[Any], np.ndarray], num_oov_indices: int = 1,
                 mask_token: Optional[str] = None, oov_token: str = "[UNK]", invert: bool = False,
                 output_mode: str = "int", name: Optional[str] = None) -> None:
        if output_mode != "int":
            raise ValueError(f"StringLookup: output_mode {output_mode!r} is not supported; use 'int'")
        if int(num_oov_indices) not in (0, 1):
            raise ValueError(f"StringLookup: num_oov_indices={num_oov_indices} is not supported (Keras hashes "
                             f"unknown strings over several OOV ids); use 0 or 1")
        tokens = _read_vocabulary(vocabulary)
        seen = set()
        for token in tokens:
            if token in seen:
                raise ValueError(f"StringLookup: the vocabulary has {token!r} twice; every token must be unique")
            seen.add(token)
        if mask_token is not None and mask_token in seen:
            raise ValueError(f"StringLookup: the vocabulary contains the mask token {mask_token!r}; leave it out")
        self.name = name or "string_lookup"
        self.num_oov_indices, self.mask_token, self.oov_token = int(num_oov_indices), mask_token, oov_token
        self.invert = bool(invert)
        self._vocab = tokens
        offset = (mask_token is not None) + self.num_oov_indices
        self._index: Dict[str, int] = {t: offset + i for i, t in enumerate(tokens)}
        if mask_token is not None:
            self._index[mask_token] = 0
        self._oov = (1 if mask_token is not None else 0) if self.num_oov_indices else -1
        self._table = np.asarray(self.get_vocabulary(), dtype=str)

    def get_vocabulary(self, include_special_tokens: bool = True) -> List[str]:
        """The token of every index: mask token, OOV token, then the vocabulary (Keras's order)."""
        if not include_special_tokens:
            return list(self._vocab)
        head = ([] if self.mask_token is None else [self.mask_token]) + [self.oov_token] * self.num_oov_indices
        return head + list(self._vocab)

    def vocabulary_size(self) -> int:
        """The number of indices (special tokens included)."""
        return len(self.get_vocabulary())

    def __call__(self, inputs: Any) -> Any:
        if self.invert:
            ids = torch.as_tensor(inputs).to(torch.int64).cpu().numpy()
            valid = (ids >= 0) & (ids < len(self._table))
            out = np.where(valid, self._table[np.clip(ids, 0, len(self._table) - 1)], self.oov_token)
            return np.str_(out.item()) if out.ndim == 0 else out
        strings = np.asarray(inputs)
        if strings.dtype.kind == "S":
            strings = np.char.decode(strings, "utf-8")
        if strings.dtype.kind not in "UO":
            raise TypeError(f"StringLookup: expected strings (str, a list or numpy array of str), got "
                            f"{strings.dtype} values; use invert=True to map ids back to strings")
        flat = [self._index.get(str(s), self._oov) for s in strings.reshape(-1).tolist()]
        return torch.tensor(flat, dtype=torch.int64).reshape(strings.shape)

    def get_config(self) -> Dict[str, Any]:
        return {"vocabulary": list(self._vocab), "num_oov_indices": self.num_oov_indices,
                "mask_token": self.mask_token, "oov_token": self.oov_token, "invert": self.invert,
                "name": self.name}

    def __repr__(self) -> str:
        return f"StringLookup(vocabulary_size={self.vocabulary_size()}, invert={self.invert})"
