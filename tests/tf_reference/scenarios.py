"""The input-pipeline scenarios recorded from TensorFlow and replayed on distrib (no TF import)."""
from pathlib import Path
from typing import Dict, List, Tuple

#: auto_shard_policy names, as in tf.data.experimental.AutoShardPolicy / distrib.data.AutoShardPolicy
POLICIES = ("DATA", "OFF", "AUTO", "FILE")

#: name -> (n, global batch) for ``Dataset.range(n).batch(global batch)``
RANGE_SCENARIOS: Dict[str, Tuple[int, int]] = {
    "range16_batch8": (16, 8),
    "range10_batch4": (10, 4),   # a trailing partial batch [8, 9]
    "range9_batch4": (9, 4),     # a trailing partial batch [8]: one replica gets nothing
}

#: name -> (n, shuffle buffer, global batch) for ``range(n).shuffle(buffer).batch(global batch)``,
#: unseeded: the order differs from TF's, so tests compare sizes per step and each pass's multiset
SHUFFLE_SCENARIOS: Dict[str, Tuple[int, int, int]] = {"range16_shuffle16_batch8": (16, 16, 8),
                                                      "range10_shuffle4_batch4": (10, 4, 4)}

#: name -> global batch for 4 text files of 4 integers each (0..15), read in order
FILE_SCENARIOS: Dict[str, int] = {"files4_batch4": 4, "files4_batch6": 6}

#: name -> (n, global batch) for a dataset function ``range(n).shard(pipelines, id).batch(per replica)``
FUNCTION_SCENARIOS: Dict[str, Tuple[int, int]] = {"fn_range16_batch8": (16, 8), "fn_range20_batch8": (20, 8)}

#: name -> (n, global batch): ``run(lambda x: x * 10)`` on each distributed batch, local results kept
LOCAL_RESULTS: Dict[str, Tuple[int, int]] = {"range24_batch8": (24, 8), "range10_batch4": (10, 4)}

NUM_FILES, PER_FILE = 4, 4
SECTIONS = ("range", "shuffle", "files", "function", "local_results")


def write_files(directory: Path) -> List[str]:
    """Write the text files (one integer a line) and return their paths in order."""
    paths = []
    for k in range(NUM_FILES):
        path = Path(directory) / f"part-{k}.txt"
        path.write_text("".join(f"{k * PER_FILE + i}\n" for i in range(PER_FILE)))
        paths.append(str(path))
    return paths


def merge_workers(parts):
    """Per-worker records -> one record whose steps list every replica (worker 0's first)."""
    merged = {"num_replicas_in_sync": parts[0]["num_replicas_in_sync"], "per_worker": parts}
    for section in SECTIONS:
        merged[section] = {}
        for key in parts[0][section]:
            rows = [p[section][key] for p in parts]
            if any("error" in r for r in rows):
                merged[section][key] = {"errors": [r.get("error") for r in rows],
                                        "messages": [r.get("message") for r in rows]}
                continue
            count = max(len(r["steps"]) for r in rows)
            steps = []
            for s in range(count):
                step = []
                for r in rows:
                    step.extend(r["steps"][s] if s < len(r["steps"]) else [None])
                steps.append(step)
            merged[section][key] = {"steps": steps, "per_worker_steps": [r["steps"] for r in rows]}
            if "contexts" in rows[0]:
                merged[section][key]["contexts"] = [r["contexts"] for r in rows]
    return merged
