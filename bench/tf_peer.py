"""TensorFlow as a benchmark peer, in its own virtual environment (never a distrib dependency).

`ensure_tf_venv()` creates ``bench/.tf-venv`` with ``tensorflow-cpu==2.21.0``
and the legacy Keras TF's multi-worker tutorials were written for (``tf_keras``; Keras
3 crashes in their multi-worker ``fit``, keras#20585), and returns its
python.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENV = HERE / ".tf-venv"
TF = "tensorflow-cpu==2.21.0"
TF_KERAS = "tf_keras==2.21.0"


def ensure_tf_venv() -> str:
    python = VENV / "bin" / "python"
    stamp = VENV / ".ready"
    if not stamp.exists():
        print(f"bench: installing {TF} and {TF_KERAS} into {VENV} (once)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", TF], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", TF_KERAS], check=True)
        stamp.write_text("ok\n")
    return str(python)
