"""The SSR policy's prompts and its built-in tokenizer: the shipped tokenizer is what build_tokenizer
makes, it gives back every byte of a diff, and both prompts end with the task line."""

from nash_jax.models.tokenizer import load_tokenizer
from nash_jax.tasks.code import code_repositories, ssr_prompts


def test_the_shipped_tokenizer_is_the_one_build_tokenizer_makes(tmp_path):
    ssr_prompts.build_tokenizer(tmp_path)
    shipped = (ssr_prompts.TOKENIZER_DIR / "tokenizer.json").read_text()
    assert (tmp_path / "tokenizer.json").read_text() == shipped


def test_the_tokenizer_gives_back_every_byte_of_a_held_out_repositorys_files_and_a_diff():
    tokenizer = load_tokenizer(ssr_prompts.TOKENIZER_DIR)
    root = code_repositories.resolve("bowling")
    text = ssr_prompts.injector_prompt("bowling", root) + "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-\ta\n+\tb\n"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text
    assert len(ids) < len(text) / 2  # BPE merges, not one token a byte


def test_both_prompts_end_with_their_task_line(tmp_path):
    root = code_repositories.resolve("roman")
    assert ssr_prompts.injector_prompt("roman", root).endswith(
        f"### task\ninject a bug into roman: {ssr_prompts.INJECTOR_FORMAT}\n")
    prompt = ssr_prompts.solver_prompt(root, "--- a/test_roman.py\n")
    assert "### roman.py\n" in prompt and "### test_roman.py" not in prompt  # sources only
    assert prompt.endswith(f"### specification\n--- a/test_roman.py\n### task\nrepair the bug: "
                           f"{ssr_prompts.SOLVER_FORMAT}\n")
