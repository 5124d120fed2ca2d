"""The scenarios of `generate_surface.py`, run on distrib: the same programs, ported line for line."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from surface_scenarios import (LOOKUP_CASES, METRIC_CASES, METRIC_INPUTS, SHARD_POLICIES,  # noqa: E402
                               TEXT_PIPELINES, pipelines, plain)

__all__ = ["DistribOps", "elements", "metrics", "lookups", "distributed"]


def _guard(fn):
    try:
        return {"steps": fn()}
    except Exception as exc:  # the behaviour compared with TF's error
        return {"error": type(exc).__name__, "message": str(exc).splitlines()[0][:300]}


class DistribOps:
    """What the scenarios need that is spelled differently on torch."""

    def upper(self, s):
        import numpy as np

        return np.char.upper(s)

    def fill_n(self, n):
        import torch

        return torch.full((int(n),), int(n))

    def square_n(self, n):
        import torch

        return torch.full((int(n), int(n)), int(n))

    def int64(self, v):
        return v

    def spec(self, shape, dtype):
        import torch

        from distrib.data import STRING, TensorSpec

        return TensorSpec(tuple(shape), STRING if dtype == "string" else getattr(torch, dtype))

    def dtype(self, name):
        return name


def elements():
    from distrib.data import Dataset

    return {name: _guard(lambda ds=ds: [plain(e) for e in ds])
            for name, ds in pipelines(Dataset, DistribOps()).items()}


def metrics():
    import distrib

    out = {}
    for name, (cls, kwargs, inputs, weighted) in METRIC_CASES.items():
        data = METRIC_INPUTS[inputs]
        m = getattr(distrib.metrics, cls)(**kwargs)
        m.update_state(data["y_true"], data["y_pred"], sample_weight=data["sample_weight"] if weighted else None)
        m.update_state(data["y_true"][::-1], data["y_pred"])
        out[name] = plain(m.result())
    return out


def lookups():
    import numpy as np
    import torch

    import distrib

    out = {}
    for name, (kwargs, inputs) in LOOKUP_CASES.items():
        layer = distrib.layers.StringLookup(**kwargs)
        value = torch.tensor(inputs) if kwargs.get("invert") else np.array(inputs)
        out[name] = {"output": plain(layer(value)), "vocabulary": plain(layer.get_vocabulary())}
    return out


def _options(policy):
    from distrib.data import AutoShardPolicy, Options

    opts = Options()
    opts.experimental_distribute.auto_shard_policy = getattr(AutoShardPolicy, policy)
    return opts


def distributed(strategy, files, pattern):
    """Runs in every replica; the structure `generate_surface.distributed` records from TF."""
    import torch

    from distrib.data import Dataset, TextLineDataset

    def local(value):
        return [plain(v) for v in strategy.experimental_local_results(value)]

    out = {"text": {}, "values": None}
    for policy in SHARD_POLICIES:
        for name, ds in TEXT_PIPELINES(Dataset, TextLineDataset, pattern, files).items():
            def run(ds=ds, policy=policy):
                dist = strategy.experimental_distribute_dataset(ds.with_options(_options(policy)))
                return [local(b) for b in dist]
            out["text"][f"{name}/{policy}"] = _guard(run)

    def value_fn(ctx):
        return torch.tensor([ctx.replica_id_in_sync_group, ctx.num_replicas_in_sync], dtype=torch.int64)

    def values():
        per_replica = strategy.experimental_distribute_values_from_function(value_fn)
        return {"values": local(per_replica), "run": local(strategy.run(lambda v: v * 10 + 1, args=(per_replica,)))}
    out["values"] = _guard(values)
    return out
