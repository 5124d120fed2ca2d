"""Inputs shared by `generate_round_four.py` (TensorFlow) and the distrib tests of issue 49.

``batch_rule``: Keras 3's array adapter batches arrays given without
``batch_size`` but with ``steps`` / ``steps_per_epoch`` / ``validation_steps``
by ``ceil(rows / steps)`` (not 32). A linear model (4 inputs, 1 output,
mean squared error, plain SGD) trained on ``ROWS`` rows without shuffling
shows it in its losses.
"""
import numpy as np

__all__ = ["ROWS", "VAL_ROWS", "STEPS", "VAL_STEPS", "EPOCHS", "LR", "data", "initial_weights"]

ROWS, VAL_ROWS = 100, 30
STEPS, VAL_STEPS = 3, 2          # batches of 34 (training) and 15 (validation) in Keras 3
EPOCHS = 2
LR = 0.05


def data():
    """``(x, y, val_x, val_y)`` as float32 arrays."""
    rng = np.random.default_rng(49)
    x = rng.normal(size=(ROWS + VAL_ROWS, 4)).astype(np.float32)
    true_w = np.array([[1.5], [-2.0], [0.5], [3.0]], dtype=np.float32)
    y = (x @ true_w + 0.25 + 0.1 * rng.normal(size=(ROWS + VAL_ROWS, 1))).astype(np.float32)
    return x[:ROWS], y[:ROWS], x[ROWS:], y[ROWS:]


def initial_weights():
    """``(kernel (4, 1), bias (1,))`` the model starts from."""
    return (np.array([[0.1], [0.2], [-0.3], [0.05]], dtype=np.float32), np.array([0.0], dtype=np.float32))
