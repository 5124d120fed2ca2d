"""``map(num_parallel_calls=)``: the serial map's elements for any N, exact resume with work in flight, errors, no leaks."""
import json
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch

from distrib import image
from distrib.data import AUTOTUNE, Dataset, Options
from distrib.testing import run_python


def augment(x):
    """Keyed random ops from distrib.image: each element's draws depend on its place only."""
    img = x.float().reshape(1, 1, 1).expand(6, 6, 3) + torch.arange(36.0).reshape(6, 6, 1)
    img = image.random_crop(img, (4, 4, 3))
    img = image.random_flip_left_right(img)
    return image.random_brightness(img, 0.5), x


def pipeline(n_calls=None, deterministic=None, processes=False):
    torch.manual_seed(3)
    ds = Dataset.range(40).shuffle(40, seed=5).map(augment, num_parallel_calls=n_calls, deterministic=deterministic)
    options = Options()  # always attached: a node's place in the pipeline seeds its draws
    options.threading.workers = "processes" if processes else "threads"
    return ds.with_options(options)


def values(ds, it=None):
    return [(a.tolist(), int(b)) for a, b in (it if it is not None else ds)]


def _wait_until(predicate, deadline_s=20.0):
    """Poll ``predicate`` until true or the deadline (never a fixed sleep)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.005)  # poll: the loop above ends at the deadline
    return predicate()


@pytest.mark.parametrize("n", [1, 2, 4, AUTOTUNE])
def test_parallel_map_yields_the_serial_elements_in_order(n):
    assert values(pipeline(n)) == values(pipeline(None))


def test_worker_processes_yield_the_serial_elements():
    assert values(pipeline(2, processes=True)) == values(pipeline(None))


def test_not_deterministic_gives_the_same_multiset():
    got = values(pipeline(4, deterministic=False))
    assert sorted(map(json.dumps, got)) == sorted(map(json.dumps, values(pipeline(None))))


def test_options_deterministic_false_is_the_default_of_a_map_without_the_argument():
    slow_first = threading.Event()

    def f(x):
        if int(x) == 0:
            assert slow_first.wait(20)  # element 0 finishes only after element 1 was handed out
        return x

    options = Options()
    options.deterministic = False
    it = iter(Dataset.range(4).map(f, num_parallel_calls=2).with_options(options))
    first = int(next(it))
    slow_first.set()
    assert first != 0 and sorted([first] + [int(v) for v in it]) == [0, 1, 2, 3]


@pytest.mark.parametrize("n,deterministic", [(2, True), (4, True), (4, False)])
def test_resume_with_work_in_flight_equals_the_uninterrupted_run(n, deterministic):
    whole = values(pipeline(None))
    it = iter(pipeline(n, deterministic))
    seen = [next(it) for _ in range(11)]  # elements 11.. are in flight now
    state = it.state_dict()
    rest = values(None, it)
    again = iter(pipeline(n, deterministic))
    again.load_state_dict(state)
    resumed = values(None, again)
    if deterministic:
        assert values(None, seen) + resumed == whole and resumed == rest
    else:
        key = lambda v: json.dumps(v)  # noqa: E731
        assert sorted(map(key, values(None, seen) + resumed)) == sorted(map(key, whole))


RESUME_SCRIPT = textwrap.dedent("""
    import json, sys, torch
    sys.path.insert(0, {here!r})
    from test_parallel_map import pipeline, values
    with open(sys.argv[1], encoding="utf-8") as f:
        state = json.load(f)
    it = iter(pipeline(3)); it.load_state_dict(state)
    print(json.dumps(values(None, it)))
""")


def test_resume_in_a_fresh_process(tmp_path):
    import os

    it = iter(pipeline(3))
    for _ in range(17):
        next(it)
    state = it.state_dict()
    rest = values(None, it)
    script, saved = tmp_path / "resume.py", tmp_path / "state.json"
    script.write_text(RESUME_SCRIPT.format(here=os.path.dirname(__file__)))
    saved.write_text(json.dumps(state))
    out = run_python([script, saved], timeout=120)  # a fork of the harness's preloaded server where exact
    assert out.returncode == 0, out.stderr
    assert [tuple(v) for v in json.loads(out.stdout)] == rest


class Broken(ValueError):
    pass


def fail_on_7(x):
    if int(x) == 7:
        raise Broken("element seven is bad")
    return x


@pytest.mark.parametrize("processes", [False, True])
def test_a_worker_error_is_the_users_exception_naming_the_element(processes):
    options = Options()
    options.threading.workers = "processes" if processes else "threads"
    it = iter(Dataset.range(20).map(fail_on_7, num_parallel_calls=3).with_options(options))
    got = [int(next(it)) for _ in range(7)]
    with pytest.raises(Broken, match="element seven is bad") as info:
        next(it)
    assert got == list(range(7))
    assert any("element 7" in note for note in info.value.__notes__)
    with pytest.raises(Broken):  # the iterator stays failed; its pool is shut down
        next(it)


def _data_threads():
    """The pipeline threads alive now (a set: threads of earlier tests may still be winding down)."""
    return {t for t in threading.enumerate() if t.name.startswith(("distrib-data", "distrib-prefetch"))}


def test_dropping_an_iterator_mid_epoch_stops_its_workers():
    import gc

    before = _data_threads()
    it = iter(Dataset.range(1000).map(lambda x: x + 1, num_parallel_calls=4).prefetch(3))
    for _ in range(5):
        next(it)
    started = _data_threads() - before
    assert started
    del it
    gc.collect()
    assert _wait_until(lambda: not (started & _data_threads())), threading.enumerate()


def test_dropping_an_iterator_mid_epoch_stops_its_worker_processes():
    import gc
    import multiprocessing

    def children():
        return {p.pid for p in multiprocessing.active_children()}

    before = children()
    options = Options()
    options.threading.workers = "processes"
    it = iter(Dataset.range(1000).map(lambda x: x + 1, num_parallel_calls=2).with_options(options))
    assert [int(next(it)) for _ in range(5)] == [1, 2, 3, 4, 5]
    started = children() - before
    assert started
    del it
    gc.collect()
    assert _wait_until(lambda: not (started & children()))


def test_a_map_after_batch_on_lazy_batches_still_applies_to_a_replicas_rows():
    from distrib.data.blocks import LazyBatch

    ds = Dataset.from_tensor_slices(torch.arange(8.0)).batch(4).map(lambda b: b * 2, num_parallel_calls=2)
    element = iter(ds).next_element()
    assert type(element) is LazyBatch                     # still lazy: a replica gathers its own rows
    assert element.slice(2, 4).value().tolist() == [4.0, 6.0]
    assert [b.tolist() for b in ds] == [[0.0, 2.0, 4.0, 6.0], [8.0, 10.0, 12.0, 14.0]]


def test_a_bad_count_is_refused():
    with pytest.raises(ValueError, match="num_parallel_calls"):
        Dataset.range(3).map(abs, num_parallel_calls=0)


@pytest.mark.parametrize("workers", ["threads", "processes"])
def test_an_input_error_comes_after_the_elements_read_before_it(workers):
    def bad_input(x):
        if int(x) == 10:
            raise Broken("input ten")
        return x

    options = Options()
    options.threading.workers = workers
    ds = Dataset.range(30).map(bad_input).map(lambda x: x * 2, num_parallel_calls=4).with_options(options)
    it = iter(ds)
    assert [int(next(it)) for _ in range(10)] == [2 * i for i in range(10)]
    with pytest.raises(Broken, match="input ten"):
        next(it)


EXIT_SCRIPT = textwrap.dedent("""
    import torch
    from distrib.data import Dataset, Options
    options = Options(); options.threading.workers = "processes"
    a = iter(Dataset.range(10**6).map(lambda x: x + 1, num_parallel_calls=3).batch(4).prefetch(2))
    b = iter(Dataset.range(10**6).map(lambda x: x * 2, num_parallel_calls=2).with_options(options))
    print(next(a).tolist(), int(next(b)))
""")


def test_the_interpreter_exits_with_iterators_still_running():
    import os

    out = subprocess.run([sys.executable, "-c", EXIT_SCRIPT], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[1,", "2,", "3,", "4]", "0"]


@pytest.mark.parametrize("n", [2, 4, 6])
def test_a_few_elements_still_run_on_every_worker_thread(n):
    meet = threading.Barrier(2, timeout=20)  # two elements must run at once, or this breaks

    def f(x):
        meet.wait()
        return x * 3

    assert [int(v) for v in Dataset.range(n).map(f, num_parallel_calls=2)] == [3 * i for i in range(n)]
