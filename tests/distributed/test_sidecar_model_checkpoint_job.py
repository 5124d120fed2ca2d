"""`distrib launch --evaluator` over a job whose chief saves with `ModelCheckpoint` ends.

TF's documented pairing: ``ModelCheckpoint(dir + '/ckpt-{epoch}', save_weights_only=True)``
in training, ``SidecarEvaluator(model, data, checkpoint_dir=dir, max_evaluations=EPOCHS)``
on the evaluator, no timeout. Before, the evaluator saw ``ckpt-1``, could not
read it and waited forever, so the job never ended.
"""
from __future__ import annotations

import json
import os
import textwrap

import pytest

from distrib.testing import run_script

pytestmark = [pytest.mark.timeout(300), pytest.mark.skipif(os.name != "posix", reason="POSIX only")]

JOB = textwrap.dedent("""
    import json, os
    import torch
    import distrib

    work = os.environ["SIDECAR_DIR"]
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
    y = (x.sum(dim=1) > 0).long()
    strategy = distrib.MultiWorkerMirroredStrategy()
    with strategy.scope():
        torch.manual_seed(0)
        model = distrib.Model(torch.nn.Linear(4, 2))
        model.compile(optimizer=distrib.optimizers.SGD(0.1), metrics=["accuracy"],
                      loss=distrib.losses.SparseCategoricalCrossentropy(from_logits=True))
    data = distrib.data.Dataset.from_tensor_slices((x, y)).batch(16)
    if json.loads(os.environ["TF_CONFIG"])["task"]["type"] == "evaluator":
        distrib.SidecarEvaluator(model, data, checkpoint_dir=os.path.join(work, "ckpt"), max_evaluations=2,
                                 log_dir=os.path.join(work, "logs"), poll_interval=0.2).start()
    else:
        model.fit(data, epochs=2, verbose=0, callbacks=[distrib.callbacks.ModelCheckpoint(
            os.path.join(work, "ckpt", "ckpt-{epoch}"), save_weights_only=True)])
""")


def test_the_evaluator_evaluates_model_checkpoint_saves_and_the_job_ends(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    result = run_script(str(script), num_workers=1, evaluator=True, timeout=240,
                        env={"SIDECAR_DIR": str(tmp_path), "OMP_NUM_THREADS": "1"})
    assert result.ok, result.output
    assert result.tasks["evaluator"].returncode == 0
    with open(tmp_path / "logs" / "eval" / "sidecar_state.json", encoding="utf-8") as f:
        assert [e["checkpoint"] for e in json.load(f)["evaluated"]] == ["ckpt-1", "ckpt-2"]
