"""``distrib.data.experimental``: tf.data.experimental's names that ported code uses.

Example:
    >>> from distrib.data import Options, experimental
    >>> options = Options()
    >>> options.experimental_distribute.auto_shard_policy = experimental.AutoShardPolicy.DATA
"""
from __future__ import annotations

from typing import Any

from distrib.data.dataset_creator import DatasetCreator
from distrib.data.options import (AUTOTUNE, INFINITE_CARDINALITY, UNKNOWN_CARDINALITY,
                                  AutoShardPolicy, DistributeOptions)
from distrib.utils.public_names import public_dir

__all__ = ["DatasetCreator", "AutoShardPolicy", "DistributeOptions", "AUTOTUNE", "INFINITE_CARDINALITY",
           "UNKNOWN_CARDINALITY", "cardinality"]


def __dir__() -> "list[str]":
    return public_dir(globals(), __all__)


def cardinality(dataset: Any) -> int:
    """``dataset.cardinality()`` (tf.data.experimental.cardinality)."""
    return dataset.cardinality()
