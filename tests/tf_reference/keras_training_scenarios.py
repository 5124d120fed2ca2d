"""The inputs both `generate_keras_training.py` (TensorFlow) and distrib's tests replay.

Plain Python and numpy only: it is imported by the TensorFlow virtual
environment's generator and by distrib's test suite.

* ``OPTIMIZER_CASES``: (id, Keras class name, constructor kwargs). Every case
  applies `GRAD_STEPS` steps of `gradients()` to `initial_weights()`; after
  step `LR_CHANGE_AT` the learning rate becomes `LR_CHANGE_FACTOR` times
  itself (skipped for schedules). Gradients span 1e-5 to 2 in magnitude.
* ``SCHEDULE_CASES``: (id, class name, kwargs), evaluated at `SCHEDULE_STEPS`.
* ``LOSS_SCALE_GRADS``: the loss-scale trajectory's gradients (inf/NaN steps included).
* ``CALLBACK_CASES``: (id, callback, kwargs, logged values per epoch) replayed
  through the callbacks' ``on_epoch_end``.
"""
import math

import numpy as np

GRAD_STEPS = 10
LR_CHANGE_AT = 5
LR_CHANGE_FACTOR = 0.1


def initial_weights():
    """Two variables: a (2, 3) kernel and a (3,) bias."""
    return [np.array([[0.5, -1.0, 0.25], [2.0, -0.125, 1.5]], dtype=np.float32),
            np.array([0.1, -0.2, 0.3], dtype=np.float32)]


def gradients():
    """``GRAD_STEPS`` lists of gradients whose entries range over 1e-5 .. 2 in magnitude (and a zero)."""
    rng = np.random.RandomState(23)
    steps = []
    for _ in range(GRAD_STEPS):
        step = []
        for w in initial_weights():
            magnitude = 10.0 ** rng.uniform(-5.0, math.log10(2.0), size=w.shape)
            sign = np.where(rng.uniform(size=w.shape) < 0.5, -1.0, 1.0)
            step.append((sign * magnitude).astype(np.float32))
        steps.append(step)
    steps[3][1][0] = 0.0
    return steps


_BASE = [
    ("SGD", {}),
    ("SGD", {"learning_rate": 0.1, "momentum": 0.9}),
    ("SGD", {"learning_rate": 0.1, "momentum": 0.9, "nesterov": True}),
    ("SGD", {"learning_rate": 0.05, "momentum": 0.5, "weight_decay": 0.01}),
    ("SGD", {"learning_rate": 0.1, "clipnorm": 0.5}),
    ("SGD", {"learning_rate": 0.1, "clipvalue": 0.3}),
    ("SGD", {"learning_rate": 0.1, "global_clipnorm": 1.0}),
    ("Adam", {}),
    ("Adam", {"learning_rate": 0.01, "amsgrad": True}),
    ("Adam", {"learning_rate": 0.01, "beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-4}),
    ("Adam", {"learning_rate": 0.01, "weight_decay": 0.1}),
    ("Adam", {"learning_rate": 0.01, "use_ema": True, "ema_momentum": 0.9}),
    ("Adam", {"learning_rate": 0.01, "use_ema": True, "ema_momentum": 0.5, "ema_overwrite_frequency": 3}),
    ("AdamW", {}),
    ("AdamW", {"learning_rate": 0.01, "weight_decay": 0.05, "amsgrad": True}),
    ("RMSprop", {}),
    ("RMSprop", {"learning_rate": 0.01, "rho": 0.8, "momentum": 0.9}),
    ("RMSprop", {"learning_rate": 0.01, "centered": True}),
    ("RMSprop", {"learning_rate": 0.01, "centered": True, "momentum": 0.5, "epsilon": 1e-5}),
    ("Adagrad", {}),
    ("Adagrad", {"learning_rate": 0.1, "initial_accumulator_value": 0.0, "epsilon": 1e-6}),
    ("Nadam", {}),
    ("Nadam", {"learning_rate": 0.01, "beta_1": 0.8, "weight_decay": 0.02}),
    ("Adamax", {}),
    ("Adamax", {"learning_rate": 0.02, "beta_2": 0.9, "clipnorm": 1.0}),
    ("Lion", {}),
    ("Lion", {"learning_rate": 0.01, "beta_1": 0.5, "beta_2": 0.9, "weight_decay": 0.1}),
    ("Adadelta", {}),
    ("Adadelta", {"learning_rate": 1.0, "rho": 0.9}),
    ("Ftrl", {}),
    ("Ftrl", {"learning_rate": 0.1, "l1_regularization_strength": 0.001, "l2_regularization_strength": 0.01,
              "l2_shrinkage_regularization_strength": 0.01, "beta": 0.1}),
    ("SGD", {"learning_rate": 0.01, "loss_scale_factor": 4.0}),
]
OPTIMIZER_CASES = [(f"{name}-{i}", name, kwargs) for i, (name, kwargs) in enumerate(_BASE)]

SCHEDULE_CASES = [
    ("exp", "ExponentialDecay", {"initial_learning_rate": 0.1, "decay_steps": 7, "decay_rate": 0.5}),
    ("exp-stair", "ExponentialDecay", {"initial_learning_rate": 0.1, "decay_steps": 7, "decay_rate": 0.5,
                                       "staircase": True}),
    ("piecewise", "PiecewiseConstantDecay", {"boundaries": [5, 12, 30], "values": [1.0, 0.5, 0.1, 0.01]}),
    ("poly", "PolynomialDecay", {"initial_learning_rate": 0.1, "decay_steps": 20}),
    ("poly-pow", "PolynomialDecay", {"initial_learning_rate": 0.1, "decay_steps": 20, "end_learning_rate": 0.01,
                                     "power": 2.0}),
    ("poly-cycle", "PolynomialDecay", {"initial_learning_rate": 0.1, "decay_steps": 15, "end_learning_rate": 0.01,
                                       "power": 0.5, "cycle": True}),
    ("inverse", "InverseTimeDecay", {"initial_learning_rate": 0.1, "decay_steps": 5, "decay_rate": 0.5}),
    ("inverse-stair", "InverseTimeDecay", {"initial_learning_rate": 0.1, "decay_steps": 5, "decay_rate": 0.5,
                                           "staircase": True}),
    ("cosine", "CosineDecay", {"initial_learning_rate": 0.1, "decay_steps": 25}),
    ("cosine-alpha", "CosineDecay", {"initial_learning_rate": 0.1, "decay_steps": 25, "alpha": 0.1}),
    ("cosine-warmup", "CosineDecay", {"initial_learning_rate": 0.0, "decay_steps": 30, "warmup_target": 0.2,
                                      "warmup_steps": 10}),
    ("cosine-warmup-alpha", "CosineDecay", {"initial_learning_rate": 0.01, "decay_steps": 20, "alpha": 0.2,
                                            "warmup_target": 0.1, "warmup_steps": 7}),
    ("restarts", "CosineDecayRestarts", {"initial_learning_rate": 0.1, "first_decay_steps": 5}),
    ("restarts-t1", "CosineDecayRestarts", {"initial_learning_rate": 0.1, "first_decay_steps": 6, "t_mul": 1.0,
                                            "m_mul": 0.5, "alpha": 0.1}),
    ("restarts-mul", "CosineDecayRestarts", {"initial_learning_rate": 0.1, "first_decay_steps": 4, "t_mul": 1.5,
                                             "m_mul": 0.8, "alpha": 0.05}),
]
SCHEDULE_STEPS = list(range(0, 61)) + [75, 100, 137, 500]

#: An optimizer driven by a schedule (its trajectory is recorded like OPTIMIZER_CASES, with no rate change).
SCHEDULED_OPTIMIZER = ("SGD", {"momentum": 0.9}, "ExponentialDecay",
                       {"initial_learning_rate": 0.1, "decay_steps": 3, "decay_rate": 0.5})

LOSS_SCALE_INITIAL = 4.0
LOSS_SCALE_GROWTH_STEPS = 2
#: Per step: "finite", "inf" or "nan" (which entry of the gradient is poisoned).
LOSS_SCALE_PATTERN = ["finite", "inf", "finite", "finite", "finite", "nan", "inf", "inf", "inf", "inf",
                      "finite", "finite", "finite", "nan", "finite"]


def loss_scale_grads():
    """One (2, 3) gradient per step of ``LOSS_SCALE_PATTERN`` (as the scaled loss's backward gives it)."""
    rng = np.random.RandomState(5)
    out = []
    for kind in LOSS_SCALE_PATTERN:
        g = rng.uniform(-2.0, 2.0, size=(2, 3)).astype(np.float32)
        if kind == "inf":
            g[0, 1] = np.inf
        elif kind == "nan":
            g[1, 2] = np.nan
        out.append(g)
    return out


_DOWN = [1.0, 0.9, 0.95, 0.9, 0.89995, 0.91, 0.8, 0.8, 0.85, 0.79, 0.9, 0.9, 0.9, 0.7, 0.75, 0.76]
_UP = [0.5, 0.6, 0.6, 0.65, 0.64, 0.7, 0.7, 0.69, 0.71, 0.71, 0.70, 0.72]

CALLBACK_CASES = [
    ("es-patience", "EarlyStopping", {"monitor": "val_loss", "patience": 2}, {"val_loss": _DOWN}),
    ("es-min-delta", "EarlyStopping", {"monitor": "val_loss", "patience": 1, "min_delta": 0.02},
     {"val_loss": _DOWN}),
    ("es-baseline", "EarlyStopping", {"monitor": "val_loss", "patience": 3, "baseline": 0.85},
     {"val_loss": _DOWN}),
    ("es-restore", "EarlyStopping", {"monitor": "val_loss", "patience": 3, "restore_best_weights": True},
     {"val_loss": _DOWN}),
    ("es-start", "EarlyStopping", {"monitor": "val_loss", "patience": 1, "start_from_epoch": 4,
                                   "restore_best_weights": True}, {"val_loss": _DOWN}),
    ("es-max", "EarlyStopping", {"monitor": "val_accuracy", "patience": 2, "mode": "max", "min_delta": 0.005},
     {"val_accuracy": _UP}),
    ("rlr-basic", "ReduceLROnPlateau", {"monitor": "val_loss", "factor": 0.5, "patience": 1},
     {"val_loss": _DOWN}),
    ("rlr-cooldown", "ReduceLROnPlateau", {"monitor": "val_loss", "factor": 0.2, "patience": 1, "cooldown": 2,
                                           "min_lr": 0.002}, {"val_loss": _DOWN}),
    ("rlr-min-delta", "ReduceLROnPlateau", {"monitor": "val_loss", "factor": 0.5, "patience": 2,
                                            "min_delta": 0.05}, {"val_loss": _DOWN}),
    ("rlr-max", "ReduceLROnPlateau", {"monitor": "val_accuracy", "factor": 0.3, "patience": 1, "mode": "max"},
     {"val_accuracy": _UP}),
    ("ckpt-best", "ModelCheckpoint", {"monitor": "val_loss", "save_best_only": True}, {"val_loss": _DOWN}),
    ("ckpt-best-max", "ModelCheckpoint", {"monitor": "val_accuracy", "save_best_only": True, "mode": "max"},
     {"val_accuracy": _UP}),
    ("ckpt-threshold", "ModelCheckpoint", {"monitor": "val_loss", "save_best_only": True,
                                           "initial_value_threshold": 0.85}, {"val_loss": _DOWN}),
    ("ckpt-missing", "ModelCheckpoint", {"monitor": "val_loss", "save_best_only": True}, {"loss": _DOWN[:4]}),
    ("ckpt-all", "ModelCheckpoint", {"monitor": "val_loss"}, {"val_loss": _DOWN[:5]}),
]
#: The learning rate the ReduceLROnPlateau cases start from.
CALLBACK_LR = 0.1


def epoch_weights(epoch):
    """The weights the replayed model holds at the end of ``epoch`` (so restore_best_weights is visible)."""
    return [np.full((2, 3), float(epoch), dtype=np.float32), np.full((3,), -float(epoch), dtype=np.float32)]


#: A tiny real fit: Dense(3) on 2 inputs, SGD with momentum, ReduceLROnPlateau and EarlyStopping.
FIT_EPOCHS = 12
FIT_BATCH = 8
FIT_OPTIMIZER = {"learning_rate": 0.1, "momentum": 0.9}
FIT_REDUCE_LR = {"monitor": "loss", "factor": 0.5, "patience": 1, "min_delta": 0.01}
FIT_EARLY_STOP = {"monitor": "loss", "patience": 3, "min_delta": 0.001, "restore_best_weights": True}


def fit_data():
    """``(x, y, kernel, bias)``: 32 examples and the initial weights of the tiny fit."""
    rng = np.random.RandomState(7)
    x = rng.normal(size=(32, 2)).astype(np.float32)
    y = (x @ np.array([[1.0, -2.0, 0.5], [0.3, 0.8, -1.5]], dtype=np.float32)
         + rng.normal(scale=0.5, size=(32, 3))).astype(np.float32)
    kernel = rng.normal(size=(2, 3)).astype(np.float32)
    bias = np.zeros(3, dtype=np.float32)
    return x, y, kernel, bias
