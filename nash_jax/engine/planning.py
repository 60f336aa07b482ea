"""The memory planner's inputs, unpacked from a run config: the recipe's own update (its `plan_step`,
or the offline step of prompt + response), the policy's shape (a model directory, a preset or a
built-in task's warm-start model), the optimiser, the mesh and the `train.*` fields that change memory.
`nash-jax plan` and the check before a run loads weights both size what this returns."""

from nash_jax import engine
from nash_jax.parallel.padding import bucket_size
from nash_jax.engine import plan as planner
from nash_jax.tasks import registry as builtin_models


def plan_inputs(config, shape=None):
    """The PlanInputs of `config`'s training step; `shape`: a preset's name (`--shape`)."""
    recipe = engine.get(config.recipe)
    if recipe.plan_step is None:
        raise ValueError(f"recipe {recipe.name} gives no plan_step (the shape of its update), so its "
                         "memory cannot be planned; give its Recipe a plan_step")
    builtin = builtin_models.get(config.model.path)
    builtin = builtin if builtin and builtin.name in recipe.builtin_models else None
    llama, source = planner.model_config(
        config.model, shape, warm_start=config.warm_start,
        builtin_tokenizer=(config.model.tokenizer or builtin.tokenizer_dir) if builtin else None)
    m, t = config.mesh, config.train
    return planner.PlanInputs(
        llama=llama, source=source, optimizer=t.optimizer,
        step=recipe.plan_step(config),
        mesh={"data": m.data, "fsdp": m.fsdp, "tensor": m.tensor}, micro_batches=t.micro_batches,
        logprob_chunk=t.logprob_chunk, sampling_temperature=config.sampling.temperature,
        device_memory=m.device_memory, batch_sizes=recipe.batch_sizes(config), lora=config.model.lora)


def plan(config, *, shape=None, **options):
    """planner.plan of `config`'s step (options: devices, device_memory, compile_step)."""
    return planner.plan(plan_inputs(config, shape), **options)


def check_before_loading(config, mesh):
    """planner.check_before_loading of `config`'s step on `mesh`; None when no device memory is known
    (on CPU, without mesh.device_memory)."""
    memory = planner.device_memory(config.mesh.device_memory)
    if memory is None:
        return None
    return planner.check_before_loading(plan_inputs(config), mesh.devices.size, memory)


def default_step(config):
    """The offline step of train.batch_size examples of prompt + response (SPPO's, the warm starts')."""
    objective, hyperparameters = training_objective(config)
    return planner.StepShape(objective, hyperparameters, config.train.batch_size,
                             bucket_size(config.data.max_prompt_tokens + config.sampling.max_new_tokens,
                                         minimum=8))


def training_objective(config):
    """(objective name, hyperparameters) the recipe trains with: its section's `loss` when that names
    an objective whose hyperparameters the section holds, else `sft` on the same token batch (a
    stand-in: the objectives differ by a few scalars per example, not in memory)."""
    from nash_jax.train import objectives

    section = getattr(config, config.recipe, None)
    name = getattr(section, "loss", None)
    if name in objectives.OBJECTIVES:
        wanted = objectives.get(name).hyperparameters
        if all(hasattr(section, h) for h in wanted):
            return name, {h: getattr(section, h) for h in wanted}
    return "sft", {}
