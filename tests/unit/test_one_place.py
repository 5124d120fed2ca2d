"""Small facts in one place (outside ``distrib.data``, whose own cut is another issue's).

The first line of an error comes from `distrib.errors.first_line`; a
namedtuple is recognised by `distrib.utils.nest.is_namedtuple`; the layer
patches place a draw in the global batch by one rule,
`distrib.strategies.layer_patches.global_dropout.global_place`.
"""
from __future__ import annotations

import collections
import pathlib
import re

import pytest

import distrib
from distrib.data.distribution import batch_position
from distrib.strategies.layer_patches import keras_random
from distrib.strategies.layer_patches.global_dropout import _place, global_place
from distrib.utils.nest import is_namedtuple, map_structure

SRC = pathlib.Path(distrib.__file__).resolve().parent
_INLINE_FIRST_LINE = re.compile(r"str\((e|exc|err|error)\)[^\n]*\.splitlines\(\)")


def _sources(*allowed: str):
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("data/") or rel in allowed:
            continue
        yield rel, path.read_text()


def test_the_first_line_of_an_error_has_one_helper():
    copies = [rel for rel, text in _sources("errors.py") if _INLINE_FIRST_LINE.search(text)]
    assert not copies, f"use distrib.errors.first_line in {copies}"


def test_a_namedtuple_is_recognised_by_one_helper():
    copies = [rel for rel, text in _sources("utils/nest.py") if '"_fields")' in text]
    assert not copies, f"use distrib.utils.nest.is_namedtuple in {copies}"
    point = collections.namedtuple("Point", "x y")
    assert is_namedtuple(point(1, 2)) and not is_namedtuple((1, 2)) and not is_namedtuple([1, 2])
    assert map_structure(lambda v: v * 10, point(1, (2, 3))) == point(10, (20, 30))


@pytest.fixture
def placed():
    """Replica 1 of 3 holds global rows 2 and 3 of a 6-row batch."""
    before = batch_position.current()
    batch_position.set_current(batch_position.RowPosition(first_row=2, rows=2))
    yield
    batch_position.set_current(before)


@pytest.mark.parametrize("rows,expected", [(2, (2, 0)), (4, (4, 0)), (3, (0, 2)), (0, (0, 2))])
def test_every_layer_patch_places_a_draw_by_the_one_rule(placed, rows, expected):
    assert global_place(rows, 1) == expected
    assert _place(91, 92 + rows, rows, 1) == expected  # torch's dropout: the same place, remembered by key
    if rows > 0 and rows % 2 == 0:
        assert keras_random._noise_place(rows, 1) == expected  # Keras's noise, where its rows are the batch's


def test_keras_noise_keeps_its_own_two_cases(placed):
    assert keras_random._noise_place(1, 1) == (0, 0)  # a noise shape (1, ...): one draw for the global batch
    assert keras_random._noise_place(3, 1) is None  # not the batch: Keras's own draw
    batch_position.set_current(None)
    assert keras_random._noise_place(3, 1) == global_place(3, 1) == (0, 2)  # place unknown: salted
