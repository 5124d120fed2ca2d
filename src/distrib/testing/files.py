"""File readers for tests that run several simulated workers as threads in one process.

CPython before 3.11.8 / 3.12.1 keeps the AST builder's recursion counter per interpreter, not
per thread (python/cpython#106905), and ``np.load`` parses each ``.npy`` header with
``ast.literal_eval``: two worker threads loading files at the same moment can fail with
``SystemError: AST constructor recursion depth mismatch``. Real workers are processes and never
meet this; thread-simulated ones read through :func:`load_npy`.

Example::

    Dataset.from_files(paths, load_npy)      # instead of Dataset.from_files(paths, np.load)
"""
from __future__ import annotations

import threading

import numpy as np

_HEADER_PARSE = threading.Lock()


def load_npy(path) -> np.ndarray:
    """``np.load(path)``, one thread at a time."""
    with _HEADER_PARSE:
        return np.load(path)
