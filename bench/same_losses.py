"""Do two source trees train the same? The benchmark's loss curves under each, compared exactly.

    python bench/same_losses.py --src /path/to/old/src --src src
    python bench/same_losses.py --src A --src B --only distrib_1p_fit,distrib_mwms_fit

For a restructuring that must not change behaviour: every distrib system of
`bench/run.py` trains the TF tutorials' MNIST job (same seeds, same data order) once with
each tree first on ``PYTHONPATH``, and the loss recorded at every logged step
must be bit-identical between the trees. Prints one line per system and exits
1 if any curve differs (naming the first step that does).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import List

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import run_once  # noqa: E402  (bench/ is on sys.path when run as a script)

SYSTEMS = ["distrib_1p_ctl", "distrib_1p_fit", "distrib_mwms_ctl", "distrib_mwms_fit"]


def curve(system: str, src: str) -> List[float]:
    os.environ["PYTHONPATH"] = os.path.abspath(src)
    return run_once(system, sys.executable)["loss_curve"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", action="append", required=True, help="a distrib source tree (give two)")
    ap.add_argument("--only", default=",".join(SYSTEMS), help="comma-separated systems")
    args = ap.parse_args()
    if len(args.src) != 2:
        ap.error("give --src twice: the tree before and the tree after")
    differ = 0
    for system in args.only.split(","):
        before, after = (curve(system, src) for src in args.src)
        if not before or len(before) != len(after):
            print(f"{system}: {len(before)} vs {len(after)} logged losses: DIFFERENT")
            differ += 1
            continue
        first = next((i for i, (a, b) in enumerate(zip(before, after)) if a != b), None)
        if first is None:
            print(f"{system}: {len(before)} losses, identical (first {before[0]:.6f}, last {before[-1]:.6f})")
        else:
            print(f"{system}: DIFFERENT from logged step {first}: {before[first]!r} vs {after[first]!r}")
            differ += 1
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
