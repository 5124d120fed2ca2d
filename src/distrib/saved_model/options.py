"""``SaveOptions`` and ``LoadOptions``: tf.saved_model's option objects, accepted where TF takes them.

``distrib.Model.save(path, options=SaveOptions(...))``,
``distrib.models.load_model(path, options=LoadOptions(...))`` and
``distrib.saved_model.save/load(..., options=...)`` accept them so TF programs
port unchanged. What each option does in distrib:

=====================================  ============================================================
option                                 effect
=====================================  ============================================================
``experimental_io_device``             accepted (a device string such as ``"/job:localhost"``);
                                       no effect: files are always read and written by the
                                       calling process on the host
``LoadOptions.experimental_skip_checkpoint``  honoured by ``load_model``: the architecture and
                                       compile config are restored, the saved weights and
                                       optimizer state are not (fresh initial values)
every other option                     accepted and stored, no effect (they steer TF graph
                                       details that have no counterpart here)
=====================================  ============================================================

Example:
    >>> opts = SaveOptions(experimental_io_device="/job:localhost")
    >>> opts.experimental_io_device
    '/job:localhost'
"""
from __future__ import annotations

from typing import Any, Optional

__all__ = ["SaveOptions", "LoadOptions", "check_save_options", "check_load_options"]


def _device(value: Any, where: str) -> Optional[str]:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{where}: experimental_io_device must be a device string such as '/job:localhost' or "
                        f"None, got {type(value).__name__}")
    return value


class SaveOptions:
    """``tf.saved_model.SaveOptions`` (see the module docstring for what has an effect)."""

    def __init__(self, namespace_whitelist: Any = None, save_debug_info: bool = False,
                 function_aliases: Any = None, experimental_debug_stripper: bool = False,
                 experimental_io_device: Optional[str] = None, experimental_variable_policy: Any = None,
                 experimental_custom_gradients: bool = True, experimental_image_format: bool = False,
                 experimental_skip_saver: bool = False, experimental_sharding_callback: Any = None,
                 extra_tags: Any = None) -> None:
        self.namespace_whitelist = list(namespace_whitelist or [])
        self.save_debug_info = bool(save_debug_info)
        self.function_aliases = dict(function_aliases or {})
        self.experimental_debug_stripper = bool(experimental_debug_stripper)
        self.experimental_io_device = _device(experimental_io_device, "SaveOptions")
        self.experimental_variable_policy = experimental_variable_policy
        self.experimental_custom_gradients = bool(experimental_custom_gradients)
        self.experimental_image_format = bool(experimental_image_format)
        self.experimental_skip_saver = bool(experimental_skip_saver)
        self.experimental_sharding_callback = experimental_sharding_callback
        self.extra_tags = extra_tags

    def __repr__(self) -> str:
        return f"SaveOptions(experimental_io_device={self.experimental_io_device!r})"


class LoadOptions:
    """``tf.saved_model.LoadOptions`` (see the module docstring for what has an effect)."""

    def __init__(self, allow_partial_checkpoint: bool = False, experimental_io_device: Optional[str] = None,
                 experimental_skip_checkpoint: bool = False, experimental_variable_policy: Any = None,
                 experimental_load_function_aliases: bool = False) -> None:
        self.allow_partial_checkpoint = bool(allow_partial_checkpoint)
        self.experimental_io_device = _device(experimental_io_device, "LoadOptions")
        self.experimental_skip_checkpoint = bool(experimental_skip_checkpoint)
        self.experimental_variable_policy = experimental_variable_policy
        self.experimental_load_function_aliases = bool(experimental_load_function_aliases)

    def __repr__(self) -> str:
        return (f"LoadOptions(experimental_io_device={self.experimental_io_device!r}, "
                f"experimental_skip_checkpoint={self.experimental_skip_checkpoint})")


def check_save_options(options: Any, where: str = "save") -> Optional[SaveOptions]:
    """``options`` if it is None or a `SaveOptions`; one error line otherwise."""
    if options is not None and not isinstance(options, SaveOptions):
        raise TypeError(f"{where}: options must be a distrib.saved_model.SaveOptions, got {type(options).__name__}")
    return options


def check_load_options(options: Any, where: str = "load_model") -> Optional[LoadOptions]:
    """``options`` if it is None or a `LoadOptions`; one error line otherwise."""
    if options is not None and not isinstance(options, LoadOptions):
        raise TypeError(f"{where}: options must be a distrib.saved_model.LoadOptions, got {type(options).__name__}")
    return options
