"""``distrib.optimizers.legacy``: Keras 2's optimizers, refused in one line (as Keras 3 refuses them).

TF 2.21's ``tf.keras`` is Keras 3, where ``tf.keras.optimizers.legacy.SGD``
raises ``ImportError``; distrib follows Keras 3, so a ported program gets one
line naming the optimizer to use instead (``distrib.optimizers.<name>``, which
computes Keras 3's update), never an optimizer whose numbers might differ.

Example:
    >>> distrib.optimizers.legacy.Adam(0.01)
    Traceback (most recent call last):
    ...
    ImportError: distrib.optimizers.legacy.Adam: Keras 2's optimizers are not in Keras 3 (TF 2.21's tf.keras) nor in distrib; use distrib.optimizers.Adam
"""
from __future__ import annotations

from typing import Any, List

__all__: List[str] = []


def __getattr__(name: str) -> Any:
    if name.startswith("_"):
        raise AttributeError(name)
    raise ImportError(f"distrib.optimizers.legacy.{name}: Keras 2's optimizers are not in Keras 3 "
                      f"(TF 2.21's tf.keras) nor in distrib; use distrib.optimizers.{name}")
