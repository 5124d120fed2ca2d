"""Keras-style callbacks for `distrib.Model.fit`, `evaluate` and `predict` (``distrib.callbacks``).

Every worker runs every callback; the ones that print or write files
(`ProgbarLogger`, `CSVLogger`, `TensorBoard`, verbose messages) do so on the
chief only, and all of them see the same global logs, so decisions such as
`EarlyStopping`'s are identical on every worker.

Example:
    >>> model.fit(dataset, epochs=10, validation_data=val, callbacks=[
    ...     distrib.callbacks.EarlyStopping(patience=2, restore_best_weights=True),
    ...     distrib.callbacks.ReduceLROnPlateau(factor=0.5, patience=1),
    ...     distrib.callbacks.CSVLogger("training.csv"),
    ... ])
"""
from distrib.callbacks.backup_and_restore import BackupAndRestore
from distrib.callbacks.callback import Callback, CallbackList
from distrib.callbacks.csv_logger import CSVLogger
from distrib.callbacks.early_stopping import EarlyStopping
from distrib.callbacks.history import History
from distrib.callbacks.lambda_callback import LambdaCallback
from distrib.callbacks.lr_scheduler import LearningRateScheduler
from distrib.callbacks.model_checkpoint import ModelCheckpoint
from distrib.callbacks.monitor import MonitorCallback
from distrib.callbacks.progbar import ProgbarLogger
from distrib.callbacks.reduce_lr import ReduceLROnPlateau
from distrib.callbacks.tensorboard import TensorBoard
from distrib.callbacks.terminate_on_nan import TerminateOnNaN

__all__ = [
    "Callback",
    "CallbackList",
    "History",
    "ProgbarLogger",
    "EarlyStopping",
    "LearningRateScheduler",
    "ReduceLROnPlateau",
    "TerminateOnNaN",
    "CSVLogger",
    "TensorBoard",
    "MonitorCallback",
    "LambdaCallback",
    "BackupAndRestore",
    "ModelCheckpoint",
]
