"""A policy written out as a Hugging Face directory, whole or not at all, by every process together."""

from nash_jax import parallel, runs
from nash_jax.models import hf


def export_policy(model, path, tokenizer_dir, *, in_run=True):
    """Write `model` as an HF directory at `path` (whole, or not at all). Every process takes part in
    gathering the parameters; process 0 writes. in_run: `path` is an artifact of the locked run
    directory (files.write_dir_atomically); False for a path the user named."""
    if parallel.is_writer():
        runs.write_dir_atomically(path, lambda tmp: hf.save_pretrained(model, tmp, tokenizer_dir=tokenizer_dir),
                                  in_run=in_run)
    else:
        hf.save_pretrained(model, path, tokenizer_dir=tokenizer_dir)  # gathers; writes nothing
    parallel.barrier(f"export {path}")
