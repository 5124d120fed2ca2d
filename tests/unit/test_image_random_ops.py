"""``distrib.image``'s random ops in a tf.data-style pipeline (issue 39, item 5): keyed draws that survive
a resume, agree however many replicas read the pipeline, and follow TF's rules for what is drawn."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import distrib
from distrib.data import Dataset
from distrib.data.transforms import random_draws
from distrib.testing.simulated import run_workers

I = distrib.image
IMAGES = torch.arange(12 * 4 * 5 * 3, dtype=torch.float32).reshape(12, 4, 5, 3)


def augment(image):
    image = I.resize_with_crop_or_pad(image, 6, 7)
    image = I.random_crop(image, [4, 5, 3])
    image = I.random_flip_left_right(image)
    return I.random_brightness(image, 0.5, seed=3)


def pipeline(seed=0):
    torch.manual_seed(seed)
    return Dataset.from_tensor_slices(IMAGES).shuffle(12).map(augment).batch(4)


def _list(ds):
    return [b.tolist() for b in ds]


def test_the_augmentation_is_random_but_reproducible_with_torch_manual_seed():
    first, again, other = _list(pipeline(0)), _list(pipeline(0)), _list(pipeline(1))
    assert first == again and first != other
    flat = torch.tensor(first).reshape(-1, 4, 5, 3)
    assert not any(torch.equal(flat[i], IMAGES[j]) for i in range(12) for j in range(12))  # all changed


def test_each_pass_draws_anew_as_tf_does():
    ds = pipeline(0)
    assert _list(ds) != _list(ds)


@pytest.mark.parametrize("k", [0, 1, 2])
def test_a_resumed_iterator_gives_the_remaining_elements_the_same_draws(k):
    full = _list(pipeline(0))
    it = iter(pipeline(0))
    head = [next(it).tolist() for _ in range(k)]
    saved = json.loads(json.dumps(it.state_dict()))
    torch.manual_seed(123)                       # a fresh process seeds differently: the state carries the seeds
    fresh = iter(Dataset.from_tensor_slices(IMAGES).shuffle(12).map(augment).batch(4))
    fresh.load_state_dict(saved)
    assert head + [b.tolist() for b in fresh] == full


def _flip_rows(batch):
    return I.random_flip_up_down(batch)          # one coin per row of the batch


@pytest.mark.parametrize("where", ["before batch", "after batch"])
def test_every_example_gets_the_same_draw_on_one_and_on_two_replicas(where):
    def make():
        base = Dataset.from_tensor_slices(IMAGES)
        return base.map(augment).batch(4) if where == "before batch" else base.batch(4).map(_flip_rows)

    alone = _list(make())
    per_worker = run_workers(lambda s: [b.tolist() for b in s.experimental_distribute_dataset(make())], 2)
    together = [a + b for a, b in zip(*per_worker)]   # worker 0 holds rows 0-1 of each batch, worker 1 rows 2-3
    assert together == alone


def test_a_batch_flips_each_image_on_its_own_coin():
    torch.manual_seed(0)
    batch = IMAGES[:1].expand(64, 4, 5, 3)
    flipped = I.random_flip_left_right(batch)
    mirrored = torch.tensor([torch.equal(f, I.flip_left_right(IMAGES[0])) for f in flipped])
    kept = torch.tensor([torch.equal(f, IMAGES[0]) for f in flipped])
    assert torch.all(mirrored ^ kept) and 16 < int(mirrored.sum()) < 48


def test_random_ops_in_one_function_draw_independently_and_seeds_matter():
    draws = Dataset.range(200).map(lambda i: (torch.tensor(random_draws.uniform(None, 1)[0]),
                                              torch.tensor(random_draws.uniform(None, 1)[0]),
                                              torch.tensor(random_draws.uniform(7, 1)[0])))
    a, b, c = (np.array(v) for v in zip(*[[float(t) for t in e] for e in draws]))
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.2 and abs(np.corrcoef(a, c)[0, 1]) < 0.2
    assert 0.4 < a.mean() < 0.6 and a.min() >= 0 and a.max() < 1


def test_random_crop_offsets_cover_every_position_and_stay_inside():
    value = torch.arange(25).reshape(5, 5)
    torch.manual_seed(0)
    corners = {tuple(I.random_crop(value, [3, 2])[0].tolist()) for _ in range(300)}
    assert corners == {(r * 5 + c, r * 5 + c + 1) for r in range(3) for c in range(4)}


def test_outside_a_map_a_seed_gives_a_reproducible_sequence(monkeypatch):
    monkeypatch.setattr(random_draws, "_EAGER_CALLS", {})
    first = [I.random_brightness(torch.zeros(1, 1, 1), 0.5, seed=5).item() for _ in range(3)]
    monkeypatch.setattr(random_draws, "_EAGER_CALLS", {})
    assert [I.random_brightness(torch.zeros(1, 1, 1), 0.5, seed=5).item() for _ in range(3)] == first
    assert len(set(first)) == 3 and all(-0.5 <= v < 0.5 for v in first)


@pytest.mark.parametrize("call, message", [
    (lambda: I.random_crop(torch.zeros(4, 4, 3), [5, 4, 3]), r"random_crop\(size=\[5, 4, 3\]\)"),
    (lambda: I.random_crop(torch.zeros(4, 4, 3), [2, 2]), r"one size per dimension"),
    (lambda: I.random_brightness(torch.zeros(2, 2, 3), -0.1), r"max_delta must be >= 0"),
    (lambda: I.random_contrast(torch.zeros(2, 2, 3), 0.5, 0.2), r"need 0 <= lower < upper"),
    (lambda: I.random_flip_left_right(torch.zeros(4, 3)), r"random_flip_left_right: an image is"),
    (lambda: I.resize(torch.zeros(4, 4, 3), [2, 2], method="bicubic"), r"'bilinear' and 'nearest'"),
])
def test_bad_arguments_are_one_line_naming_them(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("count", [1, 2, 3, 8, 9])
def test_one_images_draws_are_the_rows_draws_bit_for_bit(count):
    """The scalar path (one image, a few draws, in Python ints) gives what the vectorised path gives."""
    for index in (0, 7, 2**40):
        for first_row in (0, 3, 2**63 - 5):
            for salt_seed in (None, 11):
                keys = [random_draws.ElementKey(lambda: 1234567, (2, 5), index, first_row) for _ in range(2)]
                with random_draws.drawing(keys[0]):
                    one = random_draws.uniform(salt_seed, count)
                with random_draws.drawing(keys[1]):
                    rows = random_draws.uniform(salt_seed, count, rows=1)
                assert one.dtype == np.float64 and one.shape == (count,)
                assert np.array_equal(one, rows[0])
