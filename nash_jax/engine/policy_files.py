"""The policy a run config's `model` section names: where π_0's weights and tokenizer are (a model
directory or a built-in task's warm start), loading it onto the mesh, and the mesh itself."""

from pathlib import Path

from nash_jax import parallel
from nash_jax.models import hf
from nash_jax.models.export import export_policy  # noqa: F401  (policy files out, beside those in)
from nash_jax.models.tokenizer import load_tokenizer
from nash_jax.tasks import registry as builtin_models


def make_mesh(mesh, micro_batches, batch_sizes):
    """The mesh of a run's `mesh` section, after checking that each of `batch_sizes` ({config key:
    examples per step}) divides into `micro_batches` (train.micro_batches) over it (before any work
    starts)."""
    made = parallel.make_mesh(mesh.data, mesh.fsdp, mesh.tensor)
    parallel.check_batch_sizes(batch_sizes, micro_batches, parallel.data_shards(made))
    return made



def builtin_model(model_path):
    """The built-in model (a tasks.registry row) that `model_path` names, or None for a directory."""
    return builtin_models.get(model_path)


def initial_policy_dir(model_path, run):
    """π_0's HF directory: a built-in model's warm start in the run; a model directory's, when the run
    fitted it (warm_start.fit_model: RUN_DIR/init/policy, written whole once the fit finished); else
    model.path `model_path`."""
    if (warm := builtin_models.initial_dir(model_path, run)) is not None:
        return warm
    if (run / "init" / "policy" / "config.json").is_file():
        return run / "init" / "policy"
    path = Path(model_path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"model.path={path}: no config.json there; expected a local Hugging "
                                "Face model directory (config.json + safetensors)")
    return path


def tokenizer_source(model, run):
    """Where the policy of the `model` section keeps its tokenizer: model.tokenizer, a built-in
    model's, or the model's own."""
    if model.tokenizer:
        return model.tokenizer
    builtin = builtin_models.get(model.path)
    return builtin.tokenizer_dir if builtin else initial_policy_dir(model.path, run)


def load_policy(path, model, mesh):
    """The policy at `path` on `mesh`, with the dtypes, remat and attention of the `model` section."""
    return hf.load_pretrained(path, mesh=mesh, dtype=model.dtype, param_dtype=model.param_dtype,
                              remat=model.remat, attention=model.attention)


def load_policy_tokenizer(model, run):
    return load_tokenizer(tokenizer_source(model, run))
