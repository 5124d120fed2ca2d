"""Keras-style dtype policies: ``float32``, ``float16``, ``bfloat16``, ``float64``, ``mixed_bfloat16``, ``mixed_float16``.

A policy has a **variable dtype** (the parameters' dtype) and a **compute
dtype** (what the forward pass runs in), as Keras 3 defines them: a plain
dtype name is both; ``mixed_*`` computes in float16/bfloat16 with float32
variables (the "master weights"). Under a plain policy other than float32,
``compile`` casts the module's floating parameters to that dtype (Keras
creates the layers' variables in it) and inputs follow the parameters.
Under a mixed policy the forward runs in `torch.autocast`. ``Model.fit/evaluate/predict`` read the global policy at
each step: under a mixed policy the module's forward runs inside
``torch.autocast(device_type, dtype=compute_dtype)`` on the replica's device
type, its outputs are cast back to float32, and the loss is computed in
float32. ``mixed_float16`` also turns on dynamic loss scaling in ``fit`` (see
`LossScaleOptimizer`).

Example:
    >>> from distrib import mixed_precision
    >>> mixed_precision.set_global_policy("mixed_bfloat16")
    >>> p = mixed_precision.global_policy()
    >>> p.name, p.compute_dtype, p.variable_dtype
    ('mixed_bfloat16', 'bfloat16', 'float32')
    >>> mixed_precision.set_global_policy("float32")     # back to full precision
"""
from __future__ import annotations

import threading
from typing import Optional, Union

import torch

from distrib.errors import DistribError

__all__ = ["Policy", "PolicyError", "set_global_policy", "global_policy", "POLICY_NAMES"]

#: name -> (compute dtype, variable dtype)
_POLICIES = {
    "float32": ("float32", "float32"),
    "float16": ("float16", "float16"),
    "bfloat16": ("bfloat16", "bfloat16"),
    "float64": ("float64", "float64"),
    "mixed_bfloat16": ("bfloat16", "float32"),
    "mixed_float16": ("float16", "float32"),
}
POLICY_NAMES = tuple(_POLICIES)
"""The names `Policy` accepts: ``float32``, ``float16``, ``bfloat16``, ``float64``,
``mixed_bfloat16`` and ``mixed_float16``."""


class PolicyError(DistribError, ValueError):
    """An unknown policy name."""


class Policy:
    """A dtype policy (``tf.keras.mixed_precision.Policy``).

    Args:
        name: ``"float32"``, ``"float16"``, ``"bfloat16"``, ``"float64"``, ``"mixed_bfloat16"`` or
            ``"mixed_float16"``.

    Raises:
        PolicyError: any other name.
    """

    def __init__(self, name: str) -> None:
        if name not in _POLICIES:
            raise PolicyError(f"mixed_precision.Policy: unknown policy {name!r}; "
                              f"use one of {', '.join(repr(n) for n in POLICY_NAMES)}")
        self._name = name
        self._compute, self._variable = _POLICIES[name]

    @property
    def name(self) -> str:
        return self._name

    @property
    def compute_dtype(self) -> str:
        """The dtype the forward pass runs in (``"bfloat16"`` under ``mixed_bfloat16``)."""
        return self._compute

    @property
    def variable_dtype(self) -> str:
        """The parameters' dtype (``"float32"`` under the mixed policies)."""
        return self._variable

    @property
    def is_mixed(self) -> bool:
        return self._compute != self._variable

    @property
    def torch_compute_dtype(self) -> torch.dtype:
        return getattr(torch, self._compute)

    @property
    def torch_variable_dtype(self) -> torch.dtype:
        return getattr(torch, self._variable)

    @property
    def needs_loss_scaling(self) -> bool:
        """``mixed_float16`` only (Keras wraps the optimizer in a LossScaleOptimizer there and nowhere else)."""
        return self._name == "mixed_float16"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Policy) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self._name)

    def __repr__(self) -> str:
        return f'<Policy "{self._name}">'


_lock = threading.Lock()
_global: Optional[Policy] = None


def set_global_policy(policy: Union[str, Policy, None]) -> None:
    """Set the policy ``fit``/``evaluate``/``predict`` use (None resets to ``float32``)."""
    global _global
    value = Policy("float32") if policy is None else policy if isinstance(policy, Policy) else Policy(policy)
    with _lock:
        _global = value


def global_policy() -> Policy:
    """The current global policy (``float32`` unless set)."""
    with _lock:
        return _global if _global is not None else Policy("float32")
