"""`distrib.Model`'s state and persistence methods: state dicts, weights, summary, save, export.

`ModelPersistence` is a mixin of `distrib.training.model.Model`: what a model
saves, restores and reports about its weights, delegating to
`distrib.training.saving.model_state`, `distrib.training.saving.model_save`,
`distrib.training.saving.weights` and `distrib.saved_model`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional

import numpy as np
import torch

from distrib.training.saving import model_state
from distrib.training.saving.serialization import import_by_path

if TYPE_CHECKING:
    from distrib.checkpoint.chief_directory import PendingDirectory
    from distrib.strategies.interface import Strategy

__all__ = ["ModelPersistence"]


class ModelPersistence:
    """State, weights, summary, saving and export of a `distrib.Model` (its ``module`` and ``loop``)."""

    if TYPE_CHECKING:
        builder: Optional[str]
        module: torch.nn.Module
        name: str
        distribute_strategy: Strategy

    # --------------------------------------------------------------- state
    def state_dict(self, aggregate_metrics: bool = False) -> Dict[str, Any]:
        """Module, optimizer and metric states (tensors and plain values only).

        Metric states are this replica's own. With ``aggregate_metrics=True``
        they are summed over all replicas (a collective: every worker must
        call it), so that restoring the copy on every worker reproduces the
        same global metric values (see `distrib.training.saving.model_state`).
        """
        return model_state.model_state_dict(self, aggregate_metrics)

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restore what `state_dict` returned (compile first to restore the optimizer)."""
        model_state.load_model_state(self, state)

    def tensors_restored_verbatim(self) -> List[torch.Tensor]:
        """The module's and optimizer's tensors, which `load_state_dict` sets to the saved values unchanged.

        A `distrib.train.Checkpoint` restores these straight from the file
        (see `distrib.checkpoint.files.inplace_restore`); metric states are not
        among them, since a restore may zero them on all replicas but the first.
        """
        return model_state.verbatim_model_tensors(self)

    def get_weights(self) -> List[np.ndarray]:
        """The module's parameters and buffers as numpy arrays, in ``state_dict`` order."""
        return model_state.get_weights(self.module)

    def set_weights(self, weights: List[Any]) -> None:
        """Set parameters and buffers from `get_weights`'s list (same order and shapes)."""
        model_state.set_weights(self.module, weights)

    def count_params(self) -> int:
        return sum(p.numel() for p in self.module.parameters())

    def summary(self, print_fn: Any = print) -> None:
        """Print the module and its parameter counts (chief only under multi-worker strategies)."""
        if not self.distribute_strategy.is_chief:
            return
        trainable = sum(p.numel() for p in self.module.parameters() if p.requires_grad)
        print_fn(f'Model: "{self.name}"\n{self.module}\n'
                 f"Total params: {self.count_params():,}\nTrainable params: {trainable:,}\n"
                 f"Non-trainable params: {self.count_params() - trainable:,}")

    # --------------------------------------------------------------- saving
    def save(self, filepath: str, overwrite: bool = True, options: Any = None, include_optimizer: bool = True,
             save_format: Optional[str] = None, signatures: Any = None) -> "Optional[PendingDirectory]":
        """Save to directory ``filepath`` (every worker calls it; only the chief's copy lands there).

        A Keras model saved to a path ending in ``.keras`` is written by Keras itself.
        ``options`` (a `distrib.saved_model.SaveOptions`), ``save_format`` and
        ``signatures`` are accepted for TF compatibility (see `distrib.saved_model.options`).
        ``options=distrib.train.CheckpointOptions(enable_async=True)`` copies the
        state and writes it in the background: the call returns a
        `distrib.checkpoint.chief_directory.PendingDirectory` whose ``wait()``
        every worker must call (`ModelCheckpoint` does).
        """
        from distrib.training.saving.model_save import save_model

        background = _background(options, "model.save")
        return save_model(self, filepath, overwrite=overwrite, include_optimizer=include_optimizer,
                          background=background)

    def builder_callable(self) -> Any:
        """The function `load_model` would call to rebuild the module."""
        return import_by_path(self.builder, "builder") if self.builder else None

    # ------------------------------------------ weights and export (thin: see training/saving/weights.py, export)
    def save_weights(self, filepath: str, overwrite: bool = True, save_format: Optional[str] = None,
                     options: Any = None) -> "Optional[PendingDirectory]":
        """Save the module's weights as safetensors (every worker calls it; the chief writes).

        ``options`` may be a `distrib.saved_model.SaveOptions` or, as in
        ``tf.keras``, a `distrib.train.CheckpointOptions`: with
        ``enable_async=True`` the weights are copied and written in the
        background, and the call returns a
        `distrib.checkpoint.chief_directory.PendingDirectory` whose ``wait()``
        every worker must call.
        """
        from distrib.training.saving.weights import save_weights

        return save_weights(self, filepath, overwrite=overwrite, background=_background(options, "save_weights"))

    def load_weights(self, filepath: Optional[str], options: Any = None) -> None:
        """Load weights written by `save_weights` (or a ``.safetensors`` file); keys and shapes must match."""
        from distrib.saved_model.options import check_load_options
        from distrib.training.saving.weights import load_weights

        check_load_options(options, "load_weights")
        load_weights(self, filepath)

    def export(self, filepath: str, input_signature: Any = None) -> None:
        """Export for inference with ``torch.export`` (see `distrib.saved_model.save`)."""
        from distrib.saved_model import save

        save(self, filepath, input_signature=input_signature)


def _background(options: Any, where: str) -> bool:
    """Whether save ``options`` ask for a background write (a `CheckpointOptions` with ``enable_async``)."""
    from distrib.checkpoint.options import CheckpointOptions
    from distrib.saved_model.options import check_save_options

    if isinstance(options, CheckpointOptions):
        return options.background
    check_save_options(options, where)
    return False
