"""Run configurations: typed dataclasses read from YAML, with `key=value` overrides from the command line.

Every section is a frozen dataclass; `load_config(path, overrides)` builds the whole tree, checking each
key against the dataclass fields and each value against the field's type (a `Literal` lists the allowed
values). Errors name the file, the dotted key, what was given and what was expected.

    domains     Range (a numeric field's domain), choices, sizes in bytes
    sections    the shared sections (model, data, sampling, judge, train, mesh, eval, logging, ...)
    recipes     the one recipe registry: names, their sections, entry-point discovery
    loader      YAML and overrides in, a checked run config out; to_dict / to_yaml
    yaml_files  YAML that refuses duplicate keys
"""

from nash_jax.config.domains import (AT_LEAST_1, NON_NEGATIVE, POSITIVE, PROBABILITY, Range, check_choice,
                                     parse_bytes)
from nash_jax.config.loader import (RESULT_NEUTRAL, apply_overrides, build, build_run_config, load_config,
                                    normalised, parse_override, read_yaml, to_dict, to_yaml)
from nash_jax.config.recipes import (ENTRY_POINT_GROUP, discover_recipes, recipe_names, register_recipe,
                                     run_config_type)
from nash_jax.config.sections import (BUILTIN_SYNTHETIC, builtin_path_parts, REPORT_ONLY_EVAL_FIELDS, DataConfig, EvalConfig,
                                      JudgeConfig, LoggingConfig, LoraConfig, MeshConfig, ModelConfig,
                                      OptimizerConfig, RunConfig, SamplingConfig, TrainConfig, WarmStartConfig)

__all__ = ["AT_LEAST_1", "BUILTIN_SYNTHETIC", "builtin_path_parts", "DataConfig", "ENTRY_POINT_GROUP", "EvalConfig", "JudgeConfig",
           "LoggingConfig", "LoraConfig", "MeshConfig", "ModelConfig", "NON_NEGATIVE", "OptimizerConfig", "POSITIVE",
           "PROBABILITY", "REPORT_ONLY_EVAL_FIELDS", "RESULT_NEUTRAL", "Range", "RunConfig", "SamplingConfig",
           "TrainConfig", "WarmStartConfig", "apply_overrides", "build", "build_run_config",
           "check_choice", "discover_recipes", "load_config", "normalised", "parse_bytes",
           "parse_override", "read_yaml", "recipe_names", "register_recipe", "run_config_type",
           "to_dict", "to_yaml"]
