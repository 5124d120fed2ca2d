"""Inputs shared by `generate_round_four.py` (TensorFlow) and the distrib tests of issue 49.

``batch_rule``: Keras 3's array adapter batches arrays given without
``batch_size`` but with ``steps`` / ``steps_per_epoch`` / ``validation_steps``
by ``ceil(rows / steps)`` (not 32). A linear model (4 inputs, 1 output,
mean squared error, plain SGD) trained on ``ROWS`` rows without shuffling
shows it in its losses.

``array_passes``: Keras 3's epoch iterator over arrays (or a finite dataset,
``dataset_batch``: batched ``from_tensor_slices``) with ``steps_per_epoch``:
one pass runs across epochs, an epoch also ends where the pass does (a
warning when that cuts it short), and the next epoch starts a new pass.
`PASS_CASES` (the first ``rows`` rows of `data`; ``val`` validation rows):
more steps than batches, fewer (not dividing them), the batch rule,
validation (with its own ``validation_batch_size``), ``steps_per_execution``.
"""
import numpy as np

__all__ = ["ROWS", "VAL_ROWS", "STEPS", "VAL_STEPS", "EPOCHS", "LR", "PASS_CASES", "data", "initial_weights"]

ROWS, VAL_ROWS = 100, 30
STEPS, VAL_STEPS = 3, 2          # batches of 34 (training) and 15 (validation) in Keras 3
EPOCHS = 2
LR = 0.05

PASS_CASES = {
    "more_steps_than_batches": {"rows": 10, "fit": {"batch_size": 4, "steps_per_epoch": 5, "epochs": 3}},
    "steps_not_dividing_batches": {"rows": 10, "fit": {"batch_size": 1, "steps_per_epoch": 3, "epochs": 5}},
    "batch_rule": {"rows": 10, "fit": {"steps_per_epoch": 6, "epochs": 2}},          # ceil(10 / 6) = 2: 5 batches
    "validation": {"rows": 10, "val": 5, "fit": {"batch_size": 4, "steps_per_epoch": 2, "epochs": 3,
                                                 "validation_steps": 4}},
    "validation_batch_size": {"rows": 10, "val": 5, "fit": {"batch_size": 4, "steps_per_epoch": 2, "epochs": 2,
                                                            "validation_steps": 4, "validation_batch_size": 2}},
    "dataset_more_steps_than_batches": {"rows": 10, "dataset_batch": 4, "fit": {"steps_per_epoch": 5, "epochs": 3}},
    "dataset_steps_not_dividing_batches": {"rows": 10, "dataset_batch": 4, "fit": {"steps_per_epoch": 2, "epochs": 4}},
    "steps_per_execution": {"rows": 10, "steps_per_execution": 3,
                            "fit": {"batch_size": 5, "steps_per_epoch": 4, "epochs": 2}},
}


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
