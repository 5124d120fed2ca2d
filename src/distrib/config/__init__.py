"""``tf.config`` counterparts: `distrib.config.threading` (how many CPU threads torch uses)."""
from distrib.config import threading

__all__ = ["threading"]
