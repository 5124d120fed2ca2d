"""The launcher is a small supervisor: it starts tasks without loading PyTorch itself.

Every `distrib launch` (and every restart it makes) would otherwise spend the
seconds an ``import torch`` takes before the first task even starts.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

_PROBE = textwrap.dedent("""
    import json, sys
    from distrib.launch import launch
    result = launch(sys.argv[1], [], workers=2, output="capture", timeout=60)
    print(json.dumps({"returncode": result.returncode, "torch": "torch" in sys.modules,
                      "numpy": "numpy" in sys.modules}))
""")


def test_a_launch_of_two_tasks_never_imports_torch_in_the_launcher(tmp_path):
    script = tmp_path / "task.py"
    script.write_text("import os\nprint(os.environ['DISTRIB_TASK_NAME'])\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(script)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen == {"returncode": 0, "torch": False, "numpy": False}


def test_the_cli_module_loads_without_torch():
    proc = subprocess.run([sys.executable, "-c", "import sys, distrib.launch.cli; "
                           "print('torch' in sys.modules)"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "False"
