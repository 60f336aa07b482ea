"""Run directories: the manifest's check of finished stages."""

import os

from nash_jax.runs import RunDir


def test_large_artifacts_are_checked_by_size_and_their_ends(tmp_path, monkeypatch):
    """Above DIGEST_MAX_BYTES a file is identified by its size and a hash of its first and last MiB:
    cheap for model shards, blind to a copy (a copied run directory resumes), not to truncation."""
    from nash_jax.runs import fingerprints

    monkeypatch.setattr(fingerprints, "DIGEST_MAX_BYTES", 10)
    run = RunDir(tmp_path)
    (tmp_path / "big.bin").write_bytes(b"x" * 100)
    (tmp_path / "small.txt").write_text("abc")
    run.finish("stage", ["big.bin", "small.txt"])
    assert run.manifest["stages"]["stage"]["files"]["big.bin"][1].startswith("ends:")
    assert run.done("stage")
    os.utime(tmp_path / "big.bin", (0, 0))  # as a copy would: another modification time
    assert run.done("stage")
    (tmp_path / "small.txt").write_text("abd")  # same size, other content
    assert not run.done("stage")
    (tmp_path / "small.txt").write_text("abc")
    assert run.done("stage")
    (tmp_path / "big.bin").write_bytes(b"x" * 99)
    assert not run.done("stage")


def test_host_values_in_a_checkpoint_come_back_as_host_values(tmp_path):
    """numpy leaves (RAE baselines, archives) are saved from the host and restored as numpy arrays,
    device arrays as device arrays: a run over several processes cannot save host-local jax arrays."""
    import jax.numpy as jnp
    import numpy as np

    from nash_jax import runs

    manager = runs.checkpoint_manager(tmp_path / "checkpoints", every=1)
    baselines = np.array([0.5, -1.25], np.float32)
    runs.save_checkpoint(manager, 3, {"state": {"w": jnp.arange(3.0)}, "baselines": baselines}, {})
    step, trees, _ = runs.restore_checkpoint(manager, {"state": {"w": jnp.zeros(3)},
                                                       "baselines": np.zeros(2, np.float32)})
    manager.close()
    assert step == 3 and isinstance(trees["baselines"], np.ndarray)
    np.testing.assert_array_equal(trees["baselines"], baselines)
    assert not isinstance(trees["state"]["w"], np.ndarray)
    np.testing.assert_array_equal(np.asarray(trees["state"]["w"]), [0.0, 1.0, 2.0])
