"""The recovery protocol's store entries: the tasks of a resized job's ranks, the agreed backend (issue 26)."""
from __future__ import annotations

import json
import time

import pytest
import torch.distributed as dist

from distrib.comm.elastic.recovery import ElasticRecoveryError, agreed_backend, form_generation, join_generation


def _name(r):
    return f"worker {r}"


def test_a_replacement_of_a_resized_job_finds_its_rank_in_the_generation_the_survivors_open():
    """Tasks [0, 2] after worker 1 left; worker 2 is lost and started again: it is rank 1 of 2."""
    store = dist.HashStore()
    es = dist.PrefixStore("distrib/elastic", store)
    es.set("g2/member/1", json.dumps({"seq": 0, "joining": True}))  # the replacement, posted first here
    members = form_generation(store, 2, 0, 2, 57, False, time.monotonic() + 5, _name, tasks=[0, 2])
    assert members[0] == {"seq": 57, "joining": False}
    assert json.loads(es.get("g2/tasks").decode()) == [0, 2]
    es.delete_key("g2/member/1")
    assert join_generation(store, 2, time.monotonic() + 5, _name) == (2, [0, 2])


def test_a_job_that_never_changed_size_names_no_tasks():
    store = dist.HashStore()
    form_generation(store, 1, 0, 1, 3, False, time.monotonic() + 5, _name)
    dist.PrefixStore("distrib/elastic", store).delete_key("g1/member/0")
    assert join_generation(store, 0, time.monotonic() + 5, _name) == (1, None)


@pytest.mark.parametrize("tasks", ['"zero"', "[0, 0]", "[-1, 2]", "[]", "[true, 2]", "not json"])
def test_a_forged_task_list_is_refused_in_one_line(tasks):
    store = dist.HashStore()
    es = dist.PrefixStore("distrib/elastic", store)
    es.set("g1/tasks", tasks)
    es.set("open", "1")
    with pytest.raises(ElasticRecoveryError, match="task list of generation 1"):
        join_generation(store, 2, time.monotonic() + 5, _name)


def test_joiners_build_their_groups_with_the_backend_the_job_agreed_on():
    store = dist.HashStore()
    assert agreed_backend(store, "gloo") == "gloo"  # the chief, at start-up (gloo: two tasks share a GPU)
    assert agreed_backend(store) == "gloo"           # a replacement whose own device would say nccl
    dist.PrefixStore("distrib/elastic", store).set("backend", "rm -rf /")
    with pytest.raises(ElasticRecoveryError, match="not one distrib uses"):
        agreed_backend(store)
