"""Keras-named losses for PyTorch (``distrib.losses``).

Loss objects are called Keras-style, ``loss(y_true, y_pred, sample_weight=None)``,
and also offer ``per_example(y_true, y_pred)``, one loss per example, which
`distrib.Model` divides by the global batch size itself.

Example (TensorFlow's multi-worker custom-loop tutorial):
    >>> loss_object = distrib.losses.SparseCategoricalCrossentropy(
    ...     from_logits=True, reduction=distrib.losses.Reduction.NONE)
    >>> per_example_loss = loss_object(y, predictions)          # shape [batch]
    >>> loss = distrib.nn.compute_average_loss(per_example_loss)
"""
from distrib.losses.base import FunctionLoss, Loss, LossFunctionWrapper, TorchLossWrapper
from distrib.losses.crossentropy import (
    BinaryCrossentropy,
    CategoricalCrossentropy,
    SparseCategoricalCrossentropy,
    binary_crossentropy,
    categorical_crossentropy,
    sparse_categorical_crossentropy,
)
from distrib.losses.focal import (BinaryFocalCrossentropy, CategoricalFocalCrossentropy, binary_focal_crossentropy,
                                  categorical_focal_crossentropy)
from distrib.losses.overlap import Dice, Tversky, dice, tversky
from distrib.losses.probabilistic import (CategoricalHinge, Hinge, KLDivergence, Poisson, SquaredHinge,
                                          categorical_hinge, hinge, kl_divergence, poisson, squared_hinge)
from distrib.losses.reduction import Reduction
from distrib.losses.registry import deserialize, get, serialize
from distrib.losses.regression import (CosineSimilarity, Huber, LogCosh, MeanAbsoluteError,
                                       MeanAbsolutePercentageError, MeanSquaredError, MeanSquaredLogarithmicError,
                                       cosine_similarity, huber, log_cosh, mean_absolute_error,
                                       mean_absolute_percentage_error, mean_squared_error,
                                       mean_squared_logarithmic_error)

mse = MSE = mean_squared_error
mae = MAE = mean_absolute_error
mape = MAPE = mean_absolute_percentage_error
msle = MSLE = mean_squared_logarithmic_error
kld = KLD = kl_divergence
bce = BCE = binary_crossentropy

__all__ = [
    "Loss", "LossFunctionWrapper", "TorchLossWrapper", "FunctionLoss", "Reduction",
    "SparseCategoricalCrossentropy", "CategoricalCrossentropy", "BinaryCrossentropy", "BinaryFocalCrossentropy",
    "CategoricalFocalCrossentropy", "MeanSquaredError", "MeanAbsoluteError", "MeanAbsolutePercentageError",
    "MeanSquaredLogarithmicError", "Huber", "LogCosh", "CosineSimilarity", "KLDivergence", "Poisson", "Hinge",
    "SquaredHinge", "CategoricalHinge", "Dice", "Tversky",
    "sparse_categorical_crossentropy", "categorical_crossentropy", "binary_crossentropy",
    "binary_focal_crossentropy", "categorical_focal_crossentropy", "mean_squared_error", "mean_absolute_error",
    "mean_absolute_percentage_error", "mean_squared_logarithmic_error", "huber", "log_cosh", "cosine_similarity",
    "kl_divergence", "poisson", "hinge", "squared_hinge", "categorical_hinge", "dice", "tversky",
    "mse", "MSE", "mae", "MAE", "mape", "MAPE", "msle", "MSLE", "kld", "KLD", "bce", "BCE",
    "get", "serialize", "deserialize",
]
