"""The string dtype: what stands for ``tf.string`` where torch has no dtype for it.

It lives here, below `distrib.data`, so that `distrib.io` (Example parsing)
names it without importing the pipeline package; `distrib.data.STRING` is
this same constant.
"""
from __future__ import annotations

__all__ = ["STRING"]

STRING = "string"
"""The ``TensorSpec.dtype`` of a string component (there is no torch dtype for strings)."""
