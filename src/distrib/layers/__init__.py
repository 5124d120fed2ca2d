"""Keras-named preprocessing layers that work on `distrib.data` elements (``distrib.layers``).

Example:
    >>> lookup = distrib.layers.StringLookup(vocabulary=["a", "b"])
    >>> ds = Dataset.from_tensor_slices(["b", "z"]).map(lookup)     # tensor(2), tensor(0)
"""
from distrib.layers.string_lookup import StringLookup

__all__ = ["StringLookup"]
