"""``distrib.experimental``: the names tf.distribute keeps under ``experimental``."""
from __future__ import annotations

from typing import Any

from distrib.comm.options import CommunicationImplementation, CommunicationOptions
from distrib.utils.public_names import public_dir

__all__ = ["CommunicationImplementation", "CommunicationOptions", "CentralStorageStrategy",
           "ParameterServerStrategy", "ValueContext", "coordinator", "partitioners"]


def __dir__() -> "list[str]":
    return public_dir(globals(), __all__)


_SUBMODULES = {"coordinator": "distrib.coordinator", "partitioners": "distrib.strategies.parameter_server.partitioners"}


def __getattr__(name: str) -> Any:
    if name == "CentralStorageStrategy":
        from distrib.strategies.central_storage import CentralStorageStrategy
        return CentralStorageStrategy
    if name == "ParameterServerStrategy":
        from distrib.strategies.parameter_server import ParameterServerStrategy
        return ParameterServerStrategy
    if name == "ValueContext":
        from distrib.strategies.values import ValueContext
        return ValueContext
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(_SUBMODULES[name])
    raise AttributeError(f"module 'distrib.experimental' has no attribute {name!r}")
