"""Seeds derived from sequences of ints: numpy's ``SeedSequence`` mixing, in Python ints, resumable.

`mix_seed` returns exactly what
``np.random.SeedSequence(parts).generate_state(1, np.uint64)[0] >> 1`` returns
(every seed distrib derived before stays the same), without building a
``SeedSequence`` per call. The mixing consumes the parts' 32-bit words one by
one and its hash constants do not depend on the values, so the pool after a
prefix of parts can be kept and resumed: `mix_seed_after` does that for the
keyed draws of an image op, whose parts start with the same seed and lineage
for a whole pass (docs/input-pipelines.md, "Randomness").

Example:
    >>> import numpy as np
    >>> mix_seed(7, 1, 2) == int(np.random.SeedSequence([7, 1, 2]).generate_state(1, np.uint64)[0]) >> 1
    True
    >>> mix_seed_after((7, 1), 2) == mix_seed(7, 1, 2)
    True
"""
from __future__ import annotations

import os
import threading
from typing import Dict, List, Optional, Tuple

__all__ = ["mix_seed", "mix_seed_after"]

_M32 = 0xFFFFFFFF
_M64 = 0xFFFFFFFFFFFFFFFF
_POOL = 4
_INIT_A, _MULT_A = 0x43B0D7E5, 0x931E8875
_INIT_B, _MULT_B = 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R = 0xCA01F9DD, 0x4973F715


def _hash_constants(first: int, mult: int, n: int) -> List[int]:
    out = [first]
    for _ in range(n):
        out.append(out[-1] * mult & _M32)
    return out


_HASH_A = _hash_constants(_INIT_A, _MULT_A, 512)   # the constant before hashmix call t is _HASH_A[t]
# (the constants do not depend on the values mixed: a pool can be kept and resumed)
_HASH_B = _hash_constants(_INIT_B, _MULT_B, 2)


def _grow(last_call: int) -> None:
    """Hash constants up to hashmix call ``last_call`` + 1."""
    while last_call + 1 >= len(_HASH_A):
        _HASH_A.extend(_hash_constants(_HASH_A[-1], _MULT_A, len(_HASH_A))[1:])


def _words(parts: Tuple[int, ...]) -> List[int]:
    """Ints as SeedSequence splits them: 32-bit words, least significant first (0 is one word)."""
    out: List[int] = []
    for part in parts:
        n = int(part) & _M64
        out.append(n & _M32)
        n >>= 32
        while n:
            out.append(n & _M32)
            n >>= 32
    return out


def _pool_of(words: List[int]) -> List[int]:
    """The pool after the first four words (zeros where fewer) and their cross-mixing."""
    hash_a = _HASH_A
    pool = []
    for i in range(_POOL):
        h = (((words[i] if i < len(words) else 0) ^ hash_a[i]) * hash_a[i + 1]) & _M32
        pool.append(h ^ (h >> 16))
    call = _POOL
    for src in range(_POOL):
        for dst in range(_POOL):
            if src != dst:
                h = ((pool[src] ^ hash_a[call]) * hash_a[call + 1]) & _M32
                h ^= h >> 16
                value = (_MIX_L * pool[dst] - _MIX_R * h) & _M32
                pool[dst] = value ^ (value >> 16)
                call += 1
    return pool


_AFTER_POOL = _POOL + _POOL * (_POOL - 1)  # hashmix calls made when the pool is mixed


def _mix_in(pool: List[int], call: int, words: List[int]) -> List[int]:
    """The pool with each later word mixed into every entry (``call``: hashmix calls made before)."""
    pool = list(pool)
    _grow(call + 4 * len(words))
    hash_a = _HASH_A
    for word in words:
        for dst in range(_POOL):
            h = ((word ^ hash_a[call]) * hash_a[call + 1]) & _M32
            h ^= h >> 16
            value = (_MIX_L * pool[dst] - _MIX_R * h) & _M32
            pool[dst] = value ^ (value >> 16)
            call += 1
    return pool


def _draw(pool: List[int]) -> int:
    """The 64-bit state the pool generates, shifted to 63 bits."""
    low = ((pool[0] ^ _HASH_B[0]) * _HASH_B[1]) & _M32
    high = ((pool[1] ^ _HASH_B[1]) * _HASH_B[2]) & _M32
    low, high = low ^ (low >> 16), high ^ (high >> 16)
    return (low | (high << 32)) >> 1


def _mix_words(words: List[int]) -> int:
    return _draw(_mix_in(_pool_of(words), _AFTER_POOL, words[_POOL:]))


# prefix -> its words, and the pool after them where they are four or more
_PREFIXES: Dict[Tuple[int, ...], Tuple[List[int], Optional[List[int]]]] = {}
_PREFIX_LOCK = threading.Lock()
_MAX_PREFIXES = 256


def _new_lock_after_fork() -> None:
    global _PREFIX_LOCK
    _PREFIX_LOCK = threading.Lock()  # a thread of the parent may have held it at the fork


os.register_at_fork(after_in_child=_new_lock_after_fork)


def mix_seed(*parts: int) -> int:
    """A 63-bit seed derived from a sequence of non-negative ints (numpy's ``SeedSequence`` mixing)."""
    return _mix_words(_words(parts))


def mix_seed_after(prefix: Tuple[int, ...], *rest: int) -> int:
    """``mix_seed(*prefix, *rest)``, with what ``prefix`` contributes kept for the next call."""
    known = _PREFIXES.get(prefix)
    if known is None:
        words = _words(prefix)
        known = (words, _mix_in(_pool_of(words), _AFTER_POOL, words[_POOL:]) if len(words) >= _POOL else None)
        with _PREFIX_LOCK:
            if len(_PREFIXES) >= _MAX_PREFIXES:
                _PREFIXES.clear()
            _PREFIXES[prefix] = known
    words, pool = known
    if pool is None:
        return _mix_words(words + _words(rest))
    return _draw(_mix_in(pool, _AFTER_POOL + 4 * (len(words) - _POOL), _words(rest)))
