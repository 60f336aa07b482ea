"""`nash-jax plan` with model.lora: the compiled memory of a LoRA step holds no restacked copy of the
base (MaxText #5129), a quantised base keeps no fp32 kernels for the backward, and the presets'
LoRA and QLoRA runs fit the devices the issue names."""

import dataclasses
from pathlib import Path

import pytest

from nash_jax import config as config_lib
from nash_jax.config import LoraConfig, OptimizerConfig
from nash_jax.engine import plan, planning
from nash_jax.engine.plan_text import TERMS
from nash_jax.models import hf

CONFIGS = Path(__file__).parents[3] / "configs"
# wide and shallow enough that the base (122 MiB in fp32) dwarfs a step's activations (8 × 8 tokens)
WIDE = {"model_type": "llama", "vocab_size": 512, "hidden_size": 512, "intermediate_size": 2048,
        "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 4}


def compiled_plan(remat, lora):
    llama = dataclasses.replace(hf.config_from_hf(WIDE), remat=remat)
    inputs = plan.PlanInputs(llama=llama, source="wide", optimizer=OptimizerConfig(name="adamw"),
                             step=plan.StepShape("sppo", {"eta": 1000.0}, 8, 8),
                             mesh={"data": 1, "fsdp": 1, "tensor": 1}, lora=lora)
    return plan.plan(inputs, devices=1)


@pytest.mark.parametrize("remat", ["none", "full"])
@pytest.mark.parametrize("base", ["none", "nf4"])
def test_a_lora_step_compiles_without_a_copy_of_the_base(remat, base):
    full = compiled_plan(remat, None)
    adapted = compiled_plan(remat, LoraConfig(rank=8, base=base, merged_from_quantised=True))
    base_fp32 = full["parameters_bytes"]
    compiled = adapted["compiled"]
    print(f"remat {remat}, base {base}: compiled temporaries {compiled['temp'] / 2**20:.1f} MiB, "
          f"total {compiled['total_bytes'] / 2**20:.1f} MiB (full fine-tune "
          f"{full['compiled']['total_bytes'] / 2**20:.1f} MiB); frozen base "
          f"{adapted['frozen_bytes'] / 2**20:.1f} MiB, fp32 base {base_fp32 / 2**20:.1f} MiB")
    # a restacked base (or every layer's dequantised kernel kept for the backward) alone would be
    # the fp32 base's bytes in temporaries; the activations of 64 tokens are a few MiB
    assert compiled["temp"] < 0.5 * base_fp32
    assert compiled["argument"] < adapted["frozen_bytes"] + 0.1 * base_fp32  # base once, as an argument
    assert compiled["total_bytes"] < 0.3 * full["compiled"]["total_bytes"]


def preset_plan(device_memory, *overrides):
    config = config_lib.load_config(CONFIGS / "sppo_llama3_8b.yaml",
                                    ["mesh.fsdp=1", "model.lora.rank=16", *overrides])
    return planning.plan(config, shape="llama3_8b", devices=1,
                         device_memory=config_lib.parse_bytes(device_memory))


def test_sppo_llama3_8b_with_lora_fits_one_80gb_device_and_with_an_nf4_base_one_24gb_device():
    lora = preset_plan("80GB")
    qlora = preset_plan("24GB", "model.lora.base=nf4", "model.lora.merged_from_quantised=true",
                        "model.param_dtype=bfloat16", "train.micro_batches=16")
    for name, result in (("LoRA rank 16, fp32 base, 80 GB", lora), ("QLoRA nf4, 24 GB", qlora)):
        print(f"{name}: " + ", ".join(f"{k} {result[f'{k}_bytes'] / 2**30:.2f} GiB"
                                      for k in TERMS if f"{k}_bytes" in result)
              + f"; total {result['total_bytes'] / 2**30:.2f} GiB ({result['decided_by']}); compiled "
              f"{result['compiled']['total_bytes'] / 2**30:.2f} GiB")
        assert result["fits"], plan.shortfall(result)
    adapters = 2 * 16 * 32 * (4096 + 4096 + 4096 + 1024 + 4096 + 1024 + 4096 + 4096
                              + 3 * (4096 + 14336))  # q k v o gate up down: r (in + out) a layer
    assert lora["parameters_count"] == adapters // 2
    assert lora["optimizer_bytes"] == adapters * 4 // 2  # RMSprop: one fp32 slot per adapter
    assert lora["frozen_bytes"] > 8e9 * 4 * 0.9  # the base in fp32, once
    assert qlora["frozen_bytes"] < 0.5 * 8e9 * 2, "under half the bf16 base: nf4 layers, bf16 embeddings"
    full = planning.plan(config_lib.load_config(CONFIGS / "sppo_llama3_8b.yaml", ["mesh.fsdp=1"]),
                         shape="llama3_8b", devices=1, device_memory=80 * 10**9, compile_step=False)
    assert not full["fits"], "the full fine-tune on one 80 GB device is what LoRA makes possible"
