"""`DataLossError`: a file's bytes are damaged (tf.errors.DataLossError's role)."""
from __future__ import annotations

from distrib.errors import DistribError

__all__ = ["DataLossError"]


class DataLossError(DistribError, IOError):
    """A record file is damaged: a CRC mismatch, a truncated record or an impossible length.

    The message is one line naming the file and the byte offset of the damaged
    record (in the uncompressed stream for GZIP/ZLIB files).

    Example:
        >>> raise DataLossError("corrupted record at byte offset 16 of data.tfrecord: ...")
    """
