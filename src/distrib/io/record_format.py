"""TFRecord framing: each record is ``length | crc(length) | data | crc(data)``.

``length`` is a little-endian uint64; each crc is a *masked* CRC-32C
(Castagnoli), ``((crc >> 15) | (crc << 17)) + 0xa282ead8`` modulo 2**32, as a
little-endian uint32. The CRC comes from `google-crc32c` (C, hardware CRC
instructions where the CPU has them).

Example:
    >>> frame(b"ab")[:8]
    b'\\x02\\x00\\x00\\x00\\x00\\x00\\x00\\x00'
"""
from __future__ import annotations

import struct

import google_crc32c

__all__ = ["HEADER_SIZE", "FOOTER_SIZE", "masked_crc", "frame", "header_length", "footer_matches"]

HEADER_SIZE = 12  #: length (8 bytes) and its masked CRC (4 bytes)
FOOTER_SIZE = 4   #: the data's masked CRC

_MASK_DELTA = 0xA282EAD8
_LENGTH = struct.Struct("<Q")
_HEADER = struct.Struct("<QI")
_CRC = struct.Struct("<I")
_crc32c = google_crc32c.value


def masked_crc(data: bytes) -> int:
    """The masked CRC-32C of ``data`` (what TFRecord files store)."""
    crc = _crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """``data`` framed as one TFRecord record."""
    length = _LENGTH.pack(len(data))
    return b"".join((length, _CRC.pack(masked_crc(length)), data, _CRC.pack(masked_crc(data))))


def header_length(header: bytes) -> int:
    """The data length a 12-byte header claims, or -1 when its CRC does not match."""
    length, crc = _HEADER.unpack(header)
    return length if masked_crc(header[:8]) == crc else -1


def footer_matches(data: bytes, footer: bytes) -> bool:
    """True when ``footer`` holds ``data``'s masked CRC."""
    return _CRC.unpack(footer)[0] == masked_crc(data)
