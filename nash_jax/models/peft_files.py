"""PEFT adapter directories in and out: adapter_config.json + adapter_model.safetensors, the layout
`peft.PeftModel.from_pretrained(base, path)` loads over the base, for the adapters of models/lora.py.

Import checks the directory against the model before reading a tensor: a LoRA adapter (not DoRA, not
rsLoRA, no bias, no modules_to_save), its rank, alpha and targets those of the run's `model.lora`,
and every tensor's shape that of our adapter slot (a base of another size or depth is refused in one
line naming the first mismatch).
"""

import json
from pathlib import Path

from flax import nnx
from safetensors.numpy import save_file

from nash_jax.models import loading, lora
from nash_jax.runs.files import write_atomically, write_text_atomically

CONFIG_FILE, WEIGHTS_FILE = "adapter_config.json", "adapter_model.safetensors"


def adapter_state(model):
    """The nnx.State of `model`'s adapters (LoRAParams)."""
    return nnx.state(model, nnx.LoRAParam)


def adapter_tensors(model, state=None):
    """{PEFT key: numpy tensor} of `model`'s adapters (or of `state`, a tree shaped like them, e.g.
    their gradients), gathered to the host."""
    state = adapter_state(model) if state is None else state
    return loading.checkpoint_tensors(state, lora.adapter_key_map(), prefix=lora.PEFT_PREFIX)


def peft_config(section, base_name=""):
    """adapter_config.json's dict for a `model.lora` section."""
    return {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": section.rank,
            "lora_alpha": section.alpha, "lora_dropout": section.dropout,
            "target_modules": lora.targets(section), "bias": "none", "fan_in_fan_out": False,
            "use_rslora": False, "use_dora": False, "modules_to_save": None,
            "init_lora_weights": True, "inference_mode": True,
            "base_model_name_or_path": str(base_name)}


def save_adapter(model, path, section, base_name=""):
    """Write `model`'s adapters as a PEFT adapter directory at `path` (each file written and renamed;
    only process 0 writes, every process gathers)."""
    import jax

    tensors = adapter_tensors(model)
    if jax.process_index() != 0:
        return Path(path)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    write_atomically(path / WEIGHTS_FILE,
                     lambda tmp: save_file(tensors, tmp, metadata={"format": "pt"}))
    write_text_atomically(path / CONFIG_FILE,
                          json.dumps(peft_config(section, base_name), indent=2, sort_keys=True))
    return path


def read_adapter_config(path, section, key="model.lora.adapter"):
    """adapter_config.json of `path`, checked against the `model.lora` section; one-line ValueError."""
    path = Path(path)
    config_path = path / CONFIG_FILE
    if not config_path.is_file() or not (path / WEIGHTS_FILE).is_file():
        raise FileNotFoundError(f"{key}={str(path)!r}: expected a PEFT adapter directory with "
                                f"{CONFIG_FILE} and {WEIGHTS_FILE}")
    try:
        config = json.loads(config_path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{key}: {config_path} is not valid JSON: {err}") from None
    wanted = {"peft_type": "LORA", "r": section.rank, "lora_alpha": section.alpha,
              "bias": "none", "use_rslora": False, "use_dora": False, "modules_to_save": None,
              "fan_in_fan_out": False}
    for name, value in wanted.items():
        got = config.get(name, None if name == "modules_to_save" else value)
        if got != value and not (name == "lora_alpha" and _same_number(got, value)):
            raise ValueError(f"{key}: {config_path} has {name}={got!r}; the run's model.lora "
                             f"expects {value!r}")
    for name in ("rank_pattern", "alpha_pattern"):  # per-module ranks or scalings: not one LoRA section
        if config.get(name):
            raise ValueError(f"{key}: {config_path} has {name}={config[name]!r}; expected none (one rank "
                             "and alpha for every target, as model.lora has)")
    got_targets = config.get("target_modules")
    if sorted(got_targets or []) != sorted(section.targets):
        raise ValueError(f"{key}: {config_path} has target_modules={got_targets!r}; the run's "
                         f"model.lora.targets are {list(section.targets)}")
    return config


def _same_number(a, b):
    return isinstance(a, (int, float)) and float(a) == float(b)


def check_adapter_fits(model, path, key="model.lora.adapter"):
    """(the adapter state of `model` (concrete or abstract), the tensor source of the PEFT adapter at
    `path`) after checking every tensor's name and shape against it; one-line ValueError when it was
    made for another base."""
    state = adapter_state(model)
    source = loading.SafetensorsSource({k: Path(path) / WEIGHTS_FILE for k in _keys(path)})
    _, problems = loading.check_source(state, lora.adapter_key_map(), source, prefix=lora.PEFT_PREFIX)
    if problems:
        raise ValueError(f"{key}={str(path)!r} does not fit the model ({len(problems)} problems; "
                         f"the first: {problems[0]}): was it trained on another base?")
    return state, source


def load_adapter(model, path, section, key="model.lora.adapter"):
    """Fill `model`'s adapters (added for `section`) from the PEFT adapter directory `path`, placed
    like the adapters they replace; refuses an adapter made for another base in one line."""
    read_adapter_config(path, section, key)
    state, source = check_adapter_fits(model, path, key)
    mesh = _mesh_of(state)
    loading.load_into(state, lora.adapter_key_map(), source, mesh=mesh, prefix=lora.PEFT_PREFIX)
    nnx.update(model, state)
    return model


def _keys(path):
    with loading.open_safetensors(Path(path) / WEIGHTS_FILE) as f:
        return list(f.keys())


def _mesh_of(state):
    """The mesh the adapters live on (None: a single device)."""
    sharding = getattr(next(iter(nnx.to_flat_state(state)))[1].get_value(), "sharding", None)
    return getattr(sharding, "mesh", None)
