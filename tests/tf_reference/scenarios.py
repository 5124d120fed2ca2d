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

#: name -> global batch for 4 text files of 4 integers each (0..15), read in order
FILE_SCENARIOS: Dict[str, int] = {"files4_batch4": 4, "files4_batch6": 6}

#: name -> (n, global batch) for a dataset function ``range(n).shard(pipelines, id).batch(per replica)``
FUNCTION_SCENARIOS: Dict[str, Tuple[int, int]] = {"fn_range16_batch8": (16, 8), "fn_range20_batch8": (20, 8)}

#: name -> (n, global batch): ``run(lambda x: x * 10)`` on each distributed batch, local results kept
LOCAL_RESULTS: Dict[str, Tuple[int, int]] = {"range24_batch8": (24, 8), "range10_batch4": (10, 4)}

NUM_FILES, PER_FILE = 4, 4


def write_files(directory: Path) -> List[str]:
    """Write the text files (one integer a line) and return their paths in order."""
    paths = []
    for k in range(NUM_FILES):
        path = Path(directory) / f"part-{k}.txt"
        path.write_text("".join(f"{k * PER_FILE + i}\n" for i in range(PER_FILE)))
        paths.append(str(path))
    return paths
