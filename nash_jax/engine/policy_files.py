"""The policy a run config's `model` section names: where π_0's weights and tokenizer are (a model
directory or a built-in task's warm start), loading it onto the mesh, and the mesh itself."""

from pathlib import Path

from nash_jax import parallel
from nash_jax.models import hf, lora, peft_files, quantised
from nash_jax.models.export import export_adapter, export_policy  # noqa: F401  (files out, beside those in)
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


def load_trainable_policy(path, model, mesh, seed, adapter_dir=None):
    """The policy a run trains, from the base at `path`: with `model.lora` set, the base with LoRA
    adapters (A drawn from `seed`), filled from `adapter_dir` (an iterate's), else from
    model.lora.adapter (an imported PEFT adapter), else B = 0 (the base itself), the base then
    quantised as model.lora.base says; without it, the policy at `path` (every parameter trains)."""
    policy = load_policy(path, model, mesh)
    if model.lora is None:
        return policy
    lora.add_adapters(policy, model.lora, seed=seed)
    adapter = adapter_dir if adapter_dir is not None else model.lora.adapter
    if adapter is not None:
        peft_files.load_adapter(policy, adapter, model.lora,
                                key="model.lora.adapter" if adapter_dir is None else str(adapter_dir))
    return quantised.quantise_base(policy, model.lora.base, lora.PROJECTIONS)


def adapter_base(model, run):
    """The base an exported adapter goes over (its adapter_config's base_model_name_or_path): the
    absolute path of π_0's directory before any adapter, a run's warm start where it made one."""
    return str(Path(initial_policy_dir(model.path, run)).resolve())


def check_adapter(model):
    """Refuse a model.lora.adapter that does not match model.lora, or whose tensors do not fit the
    base at model.path (from its config.json: no weights read), before the run directory is touched;
    a built-in model's base is made in the run, so its adapter's tensors are checked when it loads."""
    if model.lora is None or model.lora.adapter is None:
        return
    peft_files.read_adapter_config(model.lora.adapter, model.lora)
    if (Path(model.path) / "config.json").is_file():
        config = hf.config_from_hf(hf.read_config(model.path), source=str(model.path))
        peft_files.check_adapter_fits(lora.abstract_model(config, model.lora), model.lora.adapter)


def load_policy_tokenizer(model, run):
    return load_tokenizer(tokenizer_source(model, run))
