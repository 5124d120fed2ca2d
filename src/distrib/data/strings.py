"""String leaves: how tf.string tensors travel through a `Dataset`.

torch tensors hold numbers only, so a string component of an element is a
numpy array of ``str`` (dtype ``<U``) instead of a tensor:

* ``from_tensor_slices(["a", "bb"])`` (a list of str, or a numpy str/bytes/
  object array) slices into elements that are Python ``str`` (``np.str_``);
* ``batch`` stacks them into a numpy array of str; ``unbatch``, ``shuffle``,
  ``shard``, ``padded_batch`` and ``experimental_distribute_dataset`` (each
  replica gets its rows of the array) carry them like any other component;
* a ``map`` function receives them as they are and may return str / arrays of
  str (use `distrib.layers.StringLookup` to turn them into integer ids).

Numpy ``bytes`` arrays and lists of bytes are decoded as UTF-8. A Python
``bytes`` scalar (a `TFRecordDataset` record, a JPEG) and numpy object arrays
of ``bytes`` stay binary, as TF's ``tf.string``: ``batch`` stacks them into an
object array of ``bytes``. The element spec of a string component has
``dtype == STRING``.

Example:
    >>> ds = Dataset.from_tensor_slices((["a", "b", "c"], [1, 2, 3])).batch(2)
    >>> next(iter(ds))
    (array(['a', 'b'], dtype='<U1'), tensor([1, 2]))
"""
from __future__ import annotations

from typing import Any, List

import numpy as np

from distrib.io.dtypes import STRING

__all__ = ["STRING", "is_string_leaf", "to_string_leaf", "stack_strings", "cat_strings", "is_binary"]


def is_string_leaf(value: Any) -> bool:
    """True for ``str``/``bytes``, numpy str/bytes arrays, and lists of str."""
    if isinstance(value, (str, bytes, np.str_, np.bytes_)):
        return True
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "US":
            return True
        return value.dtype.kind == "O" and value.size > 0 and all(
            isinstance(v, (str, bytes)) for v in value.reshape(-1).tolist())
    if isinstance(value, list) and value:
        return all(isinstance(v, (str, bytes, np.str_, np.bytes_)) or
                   (isinstance(v, list) and is_string_leaf(v)) for v in value)
    return False


def _decode(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, (bytes, np.bytes_)) else str(value)


def is_binary(value: Any) -> bool:
    """True for a ``bytes`` scalar and a numpy object array of ``bytes`` (kept binary, not decoded)."""
    if isinstance(value, bytes):
        return not isinstance(value, np.bytes_)
    return (isinstance(value, np.ndarray) and value.dtype.kind == "O" and value.size > 0
            and all(isinstance(v, bytes) for v in value.reshape(-1).tolist()))


def _binary_array(parts: List[Any]) -> np.ndarray:
    out = np.empty(len(parts), dtype=object)
    out[:] = parts
    return out


def to_string_leaf(value: Any) -> Any:
    """``str`` for a scalar, a numpy ``<U`` array otherwise (bytes decoded as UTF-8); binary stays binary."""
    if is_binary(value):
        return value
    if isinstance(value, (str, bytes, np.str_, np.bytes_)):
        return np.str_(_decode(value))
    arr = np.asarray(value, dtype=object)
    out = np.vectorize(_decode, otypes=[object])(arr) if arr.size else arr
    result = np.asarray(out.tolist() if out.ndim else out.item(), dtype=str)
    if result.ndim == 0:
        return np.str_(result.item())
    return result


def stack_strings(parts: List[Any]) -> np.ndarray:
    """Stack string leaves (str or arrays) along a new leading axis."""
    if is_binary(parts[0]):
        if isinstance(parts[0], bytes):
            return _binary_array(parts)
        return np.stack(parts)
    return np.stack([np.asarray(p, dtype=str) for p in parts])


def cat_strings(parts: List[Any]) -> np.ndarray:
    """Concatenate string arrays along their leading axis."""
    if is_binary(parts[0]):
        return np.concatenate(parts)
    return np.concatenate([np.asarray(p, dtype=str) for p in parts])
