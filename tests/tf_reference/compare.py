"""Compare distrib's record of the scenarios (`replay.record`) with TensorFlow's stored one."""
import json
from collections import Counter
from pathlib import Path

__all__ = ["REFERENCE", "compare"]

REFERENCE = json.loads((Path(__file__).resolve().parents[1] / "data" / "tf_reference" /
                        "input_semantics.json").read_text())


def compare(setup, got, section, key):
    """Assert distrib's record of one scenario equals TensorFlow's."""
    want = REFERENCE[setup][section][key]
    have = got[section][key]
    where = f"{setup} {section} {key}"
    if "errors" in want or "error" in want:
        errors = have.get("errors") or [have.get("error")]
        assert all(errors), f"{where}: TensorFlow raised {want}, distrib gave {have}"
        return
    assert "steps" in have, f"{where}: distrib raised {have}"
    if section == "shuffle":
        compare_shuffled(where, want, have)
    else:
        assert have["steps"] == want["steps"], where
    if "contexts" in want:
        assert have["contexts"] == want["contexts"], where


def compare_shuffled(where, want, have):
    """Unseeded shuffles: the order is distrib's own; sizes per step and each pass's examples match.

    Under DATA, TF shuffles each worker's copy with its own seed, so workers can
    repeat or miss examples; distrib agrees one seed, so the workers' slices of
    a pass together hold every example once. Under OFF each worker's pass holds
    every example once in both.
    """
    wanted = want.get("per_worker_steps", [want["steps"]])
    had = have.get("per_worker_steps", [have["steps"]])
    flat = lambda p: Counter(v for step in p for r in step for v in r)  # noqa: E731
    for w_passes, h_passes in zip(wanted, had):
        assert len(h_passes) == len(w_passes) == 2, where
        for w_pass, h_pass in zip(w_passes, h_passes):
            assert [[len(r) for r in step] for step in h_pass] == [[len(r) for r in step] for step in w_pass], where
            if where.endswith("/OFF"):
                assert flat(h_pass) == flat(w_pass), where
    if where.endswith("/DATA"):
        for p in range(2):
            everyone = sum((flat(passes[p]) for passes in had), Counter())
            assert everyone == Counter(range(sum(everyone.values()))), where
            assert sum(everyone.values()) == sum(sum(flat(passes[p]).values()) for passes in wanted), where
    assert had[0][0] != had[0][1], f"{where}: the second pass is not reshuffled"
