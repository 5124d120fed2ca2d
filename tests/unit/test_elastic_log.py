"""The elastic collective log: numbering, snapshots, the catch-up payload and its replay (one process)."""
import pytest
import torch

from distrib.comm.elastic import elastic_enabled
from distrib.comm.elastic.oplog import OpLog, Replay, ReplayMismatchError
from distrib.comm.elastic.payload import decode_payload, encode_payload


def _log_with_steps():
    """Start-up #0-1; step 0 starts at 2 (#2-3), snapshot at 4; step 1 starts at 4 (#4-5), snapshot at 6; #6 after it."""
    log = OpLog()
    log.record("broadcast@init", [torch.arange(3.0)])
    log.record("control_broadcast@seed", [torch.tensor([7], dtype=torch.int64)])
    for step in range(2):
        log.mark_step()
        log.record("all_reduce@grad", [torch.full((2,), float(step))])
        log.record("all_gather@rng", [torch.ones(1, dtype=torch.uint8), torch.zeros(2, dtype=torch.uint8)])
        log.keep_snapshot(f"state after step {step}".encode())
    log.record("control_all_reduce@stop", [torch.zeros(1)])
    return log


def test_numbering_startup_and_snapshot_marks():
    log = _log_with_steps()
    assert log.seq == 7 and log.first_mark == 2
    assert [e.seq for e in log.startup] == [0, 1]
    assert [(s.seq, s.mark) for s in log.snapshots] == [(4, 4), (6, None)]
    # the newest snapshot has no step after it yet: a replacement restores the older one
    assert log.catch_up_snapshot(until=7).data == b"state after step 0"
    log.mark_step()
    assert log.catch_up_snapshot(until=7).data == b"state after step 1"


def test_only_two_snapshots_are_kept_and_the_log_is_cut_at_the_older():
    log = _log_with_steps()
    log.mark_step()
    log.record("all_reduce@grad", [torch.ones(2)])
    log.keep_snapshot(b"third")
    assert [s.data for s in log.snapshots] == [b"state after step 1", b"third"]
    assert min(e.seq for e in log.entries) == 6


def test_payload_round_trip_is_exact():
    log = _log_with_steps()
    payload = decode_payload(encode_payload(log, until=7, since=6, replace=True))
    assert (payload["until"], payload["mark"], payload["snap_seq"]) == (7, 4, 4)
    assert payload["snapshot"] == b"state after step 0"
    assert [e.seq for e in payload["startup"]] == [0, 1]
    assert [e.seq for e in payload["entries"]] == [4, 5, 6]
    originals = {e.seq: e for e in log.startup + log.entries}
    for entry in payload["startup"] + payload["entries"]:
        assert entry.kind == originals[entry.seq].kind
        assert all(a.dtype == b.dtype and a.equal(b) for a, b in zip(entry.outputs, originals[entry.seq].outputs))


def test_without_a_snapshot_the_payload_names_the_reason():
    log = OpLog()
    log.record("broadcast@init", [torch.zeros(1)])
    assert "no in-memory snapshot" in decode_payload(encode_payload(log, until=1, since=1, replace=True))["error"]


@pytest.mark.parametrize("damage", ["magic", "truncated", "dtype", "span"])
def test_a_malformed_payload_is_refused_with_one_line(damage):
    data = encode_payload(_log_with_steps(), until=7, since=4, replace=True)
    if damage == "magic":
        data = b"pickle" + data
    elif damage == "truncated":
        data = data[:40]
    elif damage == "dtype":
        data = data.replace(b'"torch.float32"', b'"object!!!!!!!"', 1)
    else:
        data = data.replace(b'"snapshot": [0, ', b'"snapshot": [9999999, ', 1)
    with pytest.raises(ReplayMismatchError, match="payload is malformed"):
        decode_payload(data)


def test_replacement_replay_skips_what_a_resumed_start_up_does_not_run_then_matches_in_order():
    log = _log_with_steps()
    payload = decode_payload(encode_payload(log, until=7, since=7, replace=True))
    replay = Replay(payload["startup"], payload["entries"], payload["until"], payload["mark"], payload["snap_seq"])
    mine = OpLog()
    # the replacement restores without drawing the seed again: #1 is skipped, the next site matches
    assert replay.take(mine, "broadcast@init", torch.zeros(3)).outputs[0].equal(torch.arange(3.0))
    replay.restored = True
    replay.step_started(mine)
    assert mine.seq == 4 and not replay.done(4)
    assert replay.take(mine, "all_reduce@grad", torch.zeros(2)).outputs[0].equal(torch.ones(2))
    mine.seq += 1
    with pytest.raises(ReplayMismatchError, match="collective #5 is broadcast@other here but all_gather@rng"):
        replay.take(mine, "broadcast@other", None)
    mine.seq = 7
    assert replay.done(7)


def test_a_replacement_that_steps_before_restoring_is_told_what_it_needs():
    log = _log_with_steps()
    payload = decode_payload(encode_payload(log, until=7, since=7, replace=True))
    replay = Replay(payload["startup"], payload["entries"], 7, payload["mark"], payload["snap_seq"])
    with pytest.raises(ReplayMismatchError, match="restore_or_initialize"):
        replay.step_started(OpLog())


def test_elastic_is_opt_in():
    assert elastic_enabled({"DISTRIB_ELASTIC": "1"}) and not elastic_enabled({}) \
        and not elastic_enabled({"DISTRIB_ELASTIC": "0"})
