"""configs/smollm2_ssr.yaml shortened to one step: SSR on the real SmolLM2-135M-Instruct through the
CLI, as a user runs it. The experiment's figures are on docs/results/smollm2-ssr.md; here: the
mechanics on a real checkpoint (the supervised warm start of model.path through the same step
factory, that warm start as π_0 of self-play, the seven checks in the sandbox, the anchors at step 0
and after the step)."""

import json

import numpy as np
import pytest
from safetensors.numpy import load_file

from tests.recipes.conftest import run_on_real_model

pytestmark = pytest.mark.long

SHORTENED = ("warm_start.steps=2", "warm_start.batch_size=4", "warm_start.checkpoint_every=1",
             "ssr.steps=1", "ssr.repositories_per_step=1", "ssr.solvers_per_artifact=1",
             "ssr.anchors.eval_every=1", "ssr.anchors.heldout_bugs=2", "ssr.anchors.repositories=1",
             "train.micro_batches=2",  # 1 × 2 × (1 + 1) = 4 rows a step
             # the 8 warm-start examples need 8 demonstrations (each one validated in the sandbox)
             "ssr.demonstrations=8", "ssr.generated.train=8", "ssr.generated.heldout=4")


@pytest.fixture(scope="module")
def finished_run(smollm2_dir, tmp_path_factory):
    return (*run_on_real_model("smollm2_ssr", smollm2_dir, tmp_path_factory, SHORTENED), smollm2_dir)


def test_the_warm_start_fits_the_real_model_and_is_pi_0_of_self_play(finished_run):
    run_dir, stdout, report, model_dir = finished_run
    stages = json.loads((run_dir / "manifest.json").read_text())["stages"]
    assert stages["init"]["info"]["examples"] == 8  # warm_start.steps × batch_size
    fitted, base = (load_file(d / "model.safetensors") for d in (run_dir / "init" / "policy", model_dir))
    key = "model.layers.0.self_attn.q_proj.weight"
    assert not np.array_equal(fitted[key], base[key])  # the fit moved the weights
    assert report["initial_policy"] == str(run_dir / "init" / "policy") and report["warm_start_examples"] == 8
    assert "π_0: the warm start" in (run_dir / "report.md").read_text()


def test_the_anchors_come_out_at_the_warm_start_and_after_the_step(finished_run):
    _, stdout, report, _ = finished_run
    anchors = report["anchors"]
    assert anchors["step"] == [0, 1]
    assert all(0.0 <= v <= 1.0 for v in anchors["heldout_repair_rate"] + anchors["valid_artifact_rate"])
    assert "anchor steps: 0, 1 (step 0 = the warm start)" in stdout
    assert report["sandbox_isolation"] == "required" and report["sandbox_off"] == []
