"""Run directories: the manifest's check of finished stages."""

import os

from nash_jax.runs import RunDir


def test_large_artifacts_are_checked_by_size_and_their_ends(tmp_path, monkeypatch):
    """Above DIGEST_MAX_BYTES a file is identified by its size and a hash of its first and last MiB:
    cheap for model shards, blind to a copy (a copied run directory resumes), not to truncation."""
    from nash_jax import runs

    monkeypatch.setattr(runs, "DIGEST_MAX_BYTES", 10)
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
