"""Initial weights that a PyTorch port and its TensorFlow original can both start from.

A number-by-number comparison of a ported tutorial with TensorFlow's run
needs both to start from the same weights. `seeded_arrays` draws them from a
seed with NumPy only, in PyTorch's layout (``Linear``: ``(out, in)``,
``Conv2d``: ``(out, in, kh, kw)``, one array per ``module.parameters()``
entry, in that order); the TensorFlow side (``tests/tf_reference/``) loads
this file by path, draws the same arrays from the same shapes and transposes
them into Keras's layout. `seeded_weights` copies them into a module.

Each tensor with 2 or more dimensions is uniform in ``±sqrt(3 / fan_in)``
(``fan_in`` = the product of all but the first dimension), each 1-D tensor
(a bias) uniform in ``±0.05``.

Example:
    >>> import torch
    >>> layer = seeded_weights(torch.nn.Linear(4, 2), seed=1)
    >>> [tuple(a.shape) for a in seeded_arrays([(2, 4), (2,)], seed=1)]
    [(2, 4), (2,)]
    >>> bool((layer.weight.detach().numpy() == seeded_arrays([(2, 4), (2,)], seed=1)[0]).all())
    True
"""
from __future__ import annotations

import math
from typing import Any, List, Sequence

import numpy as np

__all__ = ["seeded_arrays", "seeded_weights", "seeded_weights_from_env"]

BIAS_LIMIT = 0.05


def seeded_arrays(shapes: Sequence[Sequence[int]], seed: int) -> List[np.ndarray]:
    """One float32 array per shape (PyTorch layout), drawn in order from ``seed``."""
    rng = np.random.default_rng(seed)
    arrays = []
    for shape in shapes:
        shape = tuple(int(d) for d in shape)
        limit = math.sqrt(3.0 / math.prod(shape[1:])) if len(shape) >= 2 else BIAS_LIMIT
        arrays.append(rng.uniform(-limit, limit, size=shape).astype(np.float32))
    return arrays


def seeded_weights(module: Any, seed: int) -> Any:
    """Overwrite every parameter of the torch ``module`` with `seeded_arrays`; returns ``module``."""
    import torch

    params = list(module.parameters())
    with torch.no_grad():
        for p, value in zip(params, seeded_arrays([p.shape for p in params], seed)):
            p.copy_(torch.from_numpy(value))
    return module


def seeded_weights_from_env(module: Any, variable: str = "TUTORIAL_WEIGHTS_SEED") -> Any:
    """`seeded_weights` with the seed in the environment ``variable``; ``module`` unchanged when it is unset.

    The hook the tutorial ports give their tests (one line after a model is built).
    """
    import os

    seed = os.environ.get(variable)
    return seeded_weights(module, int(seed)) if seed else module
