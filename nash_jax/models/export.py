"""A policy written out as a Hugging Face directory, whole or not at all, by every process together;
a LoRA policy also as a PEFT adapter directory."""

from nash_jax import parallel, runs
from nash_jax.models import hf, lora, peft_files


def export_policy(model, path, tokenizer_dir, *, in_run=True):
    """Write `model` as an HF directory at `path` (whole, or not at all); a model with LoRA adapters
    with them merged into its weights (what transformers and every other command read). Every process
    takes part in gathering the parameters; process 0 writes. in_run: `path` is an artifact of the
    locked run directory (files.write_dir_atomically); False for a path the user named."""
    if lora.adapters_of(model):
        model = lora.merge_adapters(model)
    _write(path, lambda tmp: hf.save_pretrained(model, tmp, tokenizer_dir=tokenizer_dir), in_run)


def export_adapter(model, path, section, base_name="", *, in_run=True):
    """Write `model`'s LoRA adapters as a PEFT adapter directory at `path` (for `peft.PeftModel.
    from_pretrained(base, path)`), `section` being the run's model.lora."""
    _write(path, lambda tmp: peft_files.save_adapter(model, tmp, section, base_name), in_run)


def _write(path, write, in_run):
    if parallel.is_writer():
        runs.write_dir_atomically(path, write, in_run=in_run)
    else:
        write(path)  # gathers; writes nothing
    parallel.barrier(f"export {path}")
