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
from typing import Dict, List, Tuple

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
_HASH_B = _hash_constants(_INIT_B, _MULT_B, 2)


class _Pool:
    """The mixing pool after some words: ``(pool, words consumed, hashmix calls made)``."""

    __slots__ = ("pool", "words", "calls")

    def __init__(self, pool: List[int], words: int, calls: int) -> None:
        self.pool, self.words, self.calls = pool, words, calls

    def copy(self) -> "_Pool":
        return _Pool(list(self.pool), self.words, self.calls)


def _grow(last_call: int) -> None:
    """Hash constants up to hashmix call ``last_call`` + 1."""
    while last_call + 1 >= len(_HASH_A):
        _HASH_A.extend(_hash_constants(_HASH_A[-1], _MULT_A, len(_HASH_A))[1:])


def _hashmix(value: int, call: int) -> int:
    _grow(call)
    value = ((value ^ _HASH_A[call]) * _HASH_A[call + 1]) & _M32
    return value ^ (value >> 16)


def _mix(x: int, y: int) -> int:
    value = (_MIX_L * x - _MIX_R * y) & _M32
    return value ^ (value >> 16)


def _words(part: int) -> List[int]:
    """One non-negative int as SeedSequence splits it: 32-bit words, least significant first."""
    n = int(part) & _M64
    if n == 0:
        return [0]
    out = []
    while n:
        out.append(n & _M32)
        n >>= 32
    return out


def _consume(state: _Pool, parts: Tuple[int, ...]) -> None:
    pool = state.pool
    for part in parts:
        for word in _words(part):
            if state.words < _POOL:      # the first four words fill the pool
                pool.append(_hashmix(word, state.calls))
                state.calls += 1
                state.words += 1
                if state.words == _POOL:
                    _cross_mix(state)
                continue
            for dst in range(_POOL):     # each later word is mixed into every entry
                pool[dst] = _mix(pool[dst], _hashmix(word, state.calls))
                state.calls += 1
            state.words += 1


def _cross_mix(state: _Pool) -> None:
    pool, call, hash_a = state.pool, state.calls, _HASH_A
    _grow(call + 12)
    for src in range(_POOL):
        for dst in range(_POOL):
            if src != dst:
                h = ((pool[src] ^ hash_a[call]) * hash_a[call + 1]) & _M32
                h ^= h >> 16
                value = (_MIX_L * pool[dst] - _MIX_R * h) & _M32
                pool[dst] = value ^ (value >> 16)
                call += 1
    state.calls = call


def _finish(state: _Pool) -> int:
    if state.words < _POOL:              # fewer than four words: the pool is filled with hashed zeros
        state = state.copy()
        while state.words < _POOL:
            state.pool.append(_hashmix(0, state.calls))
            state.calls += 1
            state.words += 1
        _cross_mix(state)
    low, high = (((state.pool[i] ^ _HASH_B[i]) * _HASH_B[i + 1]) & _M32 for i in range(2))
    low, high = low ^ (low >> 16), high ^ (high >> 16)
    return (low | (high << 32)) >> 1


_PREFIXES: Dict[Tuple[int, ...], _Pool] = {}
_PREFIX_LOCK = threading.Lock()
_MAX_PREFIXES = 256


def _new_lock_after_fork() -> None:
    global _PREFIX_LOCK
    _PREFIX_LOCK = threading.Lock()  # a thread of the parent may have held it at the fork


os.register_at_fork(after_in_child=_new_lock_after_fork)


def mix_seed(*parts: int) -> int:
    """A 63-bit seed derived from a sequence of non-negative ints (numpy's ``SeedSequence`` mixing)."""
    state = _Pool([], 0, 0)
    for k, part in enumerate(parts):
        if state.words >= _POOL:
            return _finish_fast(state, parts[k:])
        _consume(state, (part,))
    return _finish(state)


def mix_seed_after(prefix: Tuple[int, ...], *rest: int) -> int:
    """``mix_seed(*prefix, *rest)``, with the pool after ``prefix`` kept for the next call."""
    start = _PREFIXES.get(prefix)
    if start is None:
        start = _Pool([], 0, 0)
        _consume(start, prefix)
        with _PREFIX_LOCK:
            if len(_PREFIXES) >= _MAX_PREFIXES:
                _PREFIXES.clear()
            _PREFIXES[prefix] = start
    if start.words < _POOL:
        state = start.copy()
        _consume(state, rest)
        return _finish(state)
    return _finish_fast(start, rest)


def _finish_fast(start: _Pool, rest: Tuple[int, ...]) -> int:
    """`_consume` then `_finish` from a full pool, inlined (the hot path of a keyed draw)."""
    p0, p1, p2, p3 = start.pool
    call = start.calls
    _grow(call + 8 * len(rest))  # two words a part at most, four calls a word
    hash_a = _HASH_A
    for part in rest:
        n = int(part) & _M64
        while True:
            word = n & _M32
            h = ((word ^ hash_a[call]) * hash_a[call + 1]) & _M32
            h ^= h >> 16
            p0 = (_MIX_L * p0 - _MIX_R * h) & _M32
            p0 ^= p0 >> 16
            h = ((word ^ hash_a[call + 1]) * hash_a[call + 2]) & _M32
            h ^= h >> 16
            p1 = (_MIX_L * p1 - _MIX_R * h) & _M32
            p1 ^= p1 >> 16
            h = ((word ^ hash_a[call + 2]) * hash_a[call + 3]) & _M32
            h ^= h >> 16
            p2 = (_MIX_L * p2 - _MIX_R * h) & _M32
            p2 ^= p2 >> 16
            h = ((word ^ hash_a[call + 3]) * hash_a[call + 4]) & _M32
            h ^= h >> 16
            p3 = (_MIX_L * p3 - _MIX_R * h) & _M32
            p3 ^= p3 >> 16
            call += 4
            n >>= 32
            if not n:
                break
    low = ((p0 ^ _INIT_B) * _HASH_B[1]) & _M32
    high = ((p1 ^ _HASH_B[1]) * _HASH_B[2]) & _M32
    low, high = low ^ (low >> 16), high ^ (high >> 16)
    return (low | (high << 32)) >> 1
