"""`nash-jax judge`: K×K preference matrices from any judge, as JSON lines."""

import json
from pathlib import Path

from nash_jax.cli.arguments import positive_int


def judge_command(args):
    from nash_jax import config as config_lib
    from nash_jax import judges

    values = {"kind": "pairrm", "path": args.model, "mode": args.mode, "batch_size": args.batch_size}
    for text in args.settings:
        keys, value = config_lib.parse_override(text)
        values[".".join(keys)] = value
    judge_config = config_lib.build(config_lib.JudgeConfig, values, "judge")
    prompts, candidates = read_judge_requests(args.prompts)
    judge = judges.make_judge(judge_config)
    per_call = judge_config.prompts_per_call
    for start in range(0, len(prompts), per_call):
        chunk = slice(start, start + per_call)
        matrices, notes = judge.judgments(prompts[chunk], candidates[chunk])
        for offset, matrix in enumerate(matrices):
            print(json.dumps({"index": start + offset, "matrix": matrix.tolist(),
                              "win_rates": matrix.mean(axis=1).tolist(),
                              **{name: float(values[offset]) for name, values in notes.items()}}),
                  flush=True)


def read_judge_requests(path):
    """JSONL lines {"prompt": str, "candidates": [str, ...]} -> (prompts, candidate lists)."""
    from nash_jax.runs.files import reading_text

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"prompts file {path} does not exist")
    with reading_text(path):
        lines = path.read_text().splitlines()
    prompts, candidates = [], []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{n}: not valid JSON: {err}") from None
        if (not isinstance(row, dict) or not isinstance(row.get("prompt"), str)
                or not isinstance(row.get("candidates"), list)
                or not all(isinstance(c, str) for c in row["candidates"])):
            raise ValueError(f"{path}:{n}: expected {{\"prompt\": str, \"candidates\": [str, ...]}}")
        prompts.append(row["prompt"])
        candidates.append(row["candidates"])
    if not prompts:
        raise ValueError(f"{path}: no requests")
    return prompts, candidates


def add(commands):
    judge = commands.add_parser(
        "judge", help="K×K preference matrices from any judge (PairRM by default), as JSON lines",
        description="Judge every ordered pair of candidates of each prompt and print one JSON line per "
                    "prompt: its K×K matrix P[i][j] = P(candidate i ≻ candidate j), the win rates (row "
                    "means) and the judge's per-prompt figures (the LLM judge's position_inconsistency). "
                    "The judge is PairRM at --model unless KEY=VALUE settings of the config's `judge` "
                    "section say otherwise: kind=llm path=DIR, kind=reward_model path=DIR, kind=python "
                    "function=package.module:name returns=rewards, kind=file path=FILE.")
    judge.add_argument("--model", help="the judge's directory or file (judge.path; PairRM: config.json, "
                                       "weights, tokenizer)")
    judge.add_argument("--prompts", required=True,
                       help='JSONL file of {"prompt": ..., "candidates": [...]} lines')
    judge.add_argument("--mode", choices=["pairwise", "blender"], default="pairwise",
                       help="PairRM: pairwise: σ((s(i,j) − s(j,i))/2) (default); blender: the official "
                            "SPPO pipeline's σ(score_i − score_j)")
    judge.add_argument("--batch-size", type=positive_int, default=16,
                       help="rows per device call (PairRM encoder rows, LLM judge pairs, reward-model "
                            "responses)")
    judge.add_argument("settings", nargs="*", metavar="KEY=VALUE",
                       help="fields of the judge section (kind=llm, template=..., labels=[A,B], "
                            "max_tokens=N, dtype=bfloat16, function=..., returns=..., prompts_per_call=N: "
                            "prompts per judge call)")
    judge.set_defaults(handler=judge_command)
