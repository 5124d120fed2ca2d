"""Moved to `distrib.process.ports` (an alias kept for old imports)."""
from distrib.process.ports import free_port, reserve_ports

__all__ = ["free_port", "reserve_ports"]
