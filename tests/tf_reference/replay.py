"""The scenarios of `generate.py`, run on distrib: the same program, ported line for line.

`record(strategy, files)` returns the structure `generate.py` records from
TensorFlow, so tests compare the two directly. It runs in every replica (local
replicas included: `experimental_local_results` is collective among them).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scenarios import FILE_SCENARIOS, FUNCTION_SCENARIOS, LOCAL_RESULTS, POLICIES, SHUFFLE_SCENARIOS, RANGE_SCENARIOS  # noqa: E402

__all__ = ["record", "read_ints"]


def read_ints(path):
    """A text file of one integer a line, as an int64 tensor (TF: TextLineDataset + to_number)."""
    import torch

    with open(path, encoding="utf-8") as handle:
        return torch.tensor([int(line) for line in handle if line.strip()], dtype=torch.int64)


def _values(strategy, value):
    return [t.reshape(-1).tolist() for t in strategy.experimental_local_results(value)]


def _steps(strategy, dist):
    steps = []
    for batch in dist:
        steps.append(_values(strategy, batch))
        if len(steps) > 100:
            raise RuntimeError("runaway")
    return steps


def _guard(fn):
    try:
        return {"steps": fn()}
    except Exception as exc:  # the behaviour compared with TF's error
        return {"error": type(exc).__name__, "message": str(exc).splitlines()[0][:300]}


def _options(policy):
    from distrib.data import AutoShardPolicy, Options

    opts = Options()
    opts.experimental_distribute.auto_shard_policy = getattr(AutoShardPolicy, policy)
    return opts


def record(strategy, files):
    from distrib.data import Dataset

    out = {"num_replicas_in_sync": strategy.num_replicas_in_sync, "range": {}, "shuffle": {}, "files": {},
           "function": {}, "local_results": {}}
    for name, (n, batch) in RANGE_SCENARIOS.items():
        for policy in POLICIES:
            def run(n=n, batch=batch, policy=policy):
                ds = Dataset.range(n).batch(batch)
                return _steps(strategy, strategy.experimental_distribute_dataset(ds.with_options(_options(policy))))
            out["range"][f"{name}/{policy}"] = _guard(run)
    for name, (n, buffer, batch) in SHUFFLE_SCENARIOS.items():
        for policy in ("DATA", "OFF"):
            def run(n=n, buffer=buffer, batch=batch, policy=policy):
                ds = Dataset.range(n).shuffle(buffer).batch(batch)
                dist = strategy.experimental_distribute_dataset(ds.with_options(_options(policy)))
                return [_steps(strategy, dist) for _ in range(2)]
            out["shuffle"][f"{name}/{policy}"] = _guard(run)
    for name, batch in FILE_SCENARIOS.items():
        for policy in POLICIES:
            def run(batch=batch, policy=policy):
                ds = Dataset.from_files(files, read_ints).batch(batch)
                return _steps(strategy, strategy.experimental_distribute_dataset(ds.with_options(_options(policy))))
            out["files"][f"{name}/{policy}"] = _guard(run)
    for name, (n, global_batch) in FUNCTION_SCENARIOS.items():
        seen = []

        def fn(ctx, n=n, global_batch=global_batch):
            seen.append({"num_input_pipelines": ctx.num_input_pipelines,
                         "input_pipeline_id": ctx.input_pipeline_id,
                         "num_replicas_in_sync": ctx.num_replicas_in_sync,
                         "per_replica_batch": ctx.get_per_replica_batch_size(global_batch)})
            ds = Dataset.range(n).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
            return ds.batch(ctx.get_per_replica_batch_size(global_batch))

        result = _guard(lambda: _steps(strategy, strategy.distribute_datasets_from_function(fn)))
        result["contexts"] = seen
        out["function"][name] = result
    for name, (n, batch) in LOCAL_RESULTS.items():
        def run(n=n, batch=batch):
            dist = strategy.experimental_distribute_dataset(Dataset.range(n).batch(batch))
            steps = []
            for x in dist:
                result = strategy.run(lambda t: t * 10, args=(x,))
                steps.append(_values(strategy, result))
            return steps
        out["local_results"][name] = _guard(run)
    return out
