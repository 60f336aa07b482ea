"""The generated family of SSR repositories: seeded, split by function, and tests that catch every
one-token mutant the mutation engine makes of a function."""

from pathlib import Path

import pytest

from nash_jax.config import load_config
from nash_jax.models.tokenizer import load_tokenizer
from nash_jax.recipes.ssr.game import solver_prompt
from nash_jax.recipes.ssr.task import Repository
from nash_jax.tasks.code import ssr_demonstrations, ssr_prompts
from nash_jax.tasks.code.mutations import file_mutants
from nash_jax.tasks.code.ssr_demonstrations import run_tests
from nash_jax.tasks.code import code_repositories, generated_repos as gen


def _passes(function_text, test_text):
    """Whether the test passes on the function (both run in-process: our own template code)."""
    scope = {}
    exec(function_text, scope)  # noqa: S102
    exec(test_text, scope)  # noqa: S102
    try:
        next(f for name, f in scope.items() if name.startswith("test_"))()
    except AssertionError:
        return False
    return True


@pytest.mark.parametrize("name", [None, "kilo"])  # descriptive, opaque
@pytest.mark.parametrize("family", sorted(gen.FAMILIES))
def test_each_functions_test_passes_on_it_and_fails_on_every_mutant_of_it(family, name):
    for k in range(2, 100):  # the default constants and a max_constant far above them
        function, test = gen.function_text(family, k, name), gen.test_text(family, k, name)
        assert _passes(function, test), (family, k)
        mutants = file_mutants("m.py", function)
        assert len(mutants) >= 3, (family, k, [m.description for m in mutants])
        survivors = [m.description for m in mutants if _passes(m.mutated, test)]
        assert not survivors, (family, k, survivors)


@pytest.mark.parametrize("max_constant", [gen.MAX_CONSTANT, 49])
def test_no_held_out_function_occurs_in_a_training_repository(max_constant):
    train, heldout = set(gen.pairs("train", max_constant)), set(gen.pairs("heldout", max_constant))
    assert train and heldout and not train & heldout
    assert len(train | heldout) == len(gen.FAMILIES) * (max_constant - 1)
    functions = lambda split: {line for i in range(40) for text in gen.repository_files(  # noqa: E731
        split, i, seed=3, max_constant=max_constant).values() for line in text.splitlines()
        if line.startswith("def ")}
    assert not functions("train") & functions("heldout")
    if max_constant > gen.MAX_CONSTANT:  # most training functions then are new ones
        assert sum(int(line.split("_")[-1].split("(")[0]) > gen.MAX_CONSTANT
                   for line in functions("train")) > len(functions("train")) / 2


def test_the_same_seed_writes_the_same_repositories_and_their_tests_pass(tmp_path):
    first = gen.write_repositories(tmp_path / "a", "heldout", 3, seed=7, functions=2)
    again = gen.write_repositories(tmp_path / "b", "heldout", 3, seed=7, functions=2)
    texts = lambda root: {f: (root / f).read_text() for f in code_repositories.check_repository(root)}  # noqa: E731
    assert [texts(a) for a in first] == [texts(b) for b in again]
    assert len({str(texts(a)) for a in first}) == 3
    assert gen.repository_files("heldout", 0, seed=8) != gen.repository_files("heldout", 0, seed=7)
    outcomes, collected = run_tests(first[0])
    assert collected and len(outcomes) == 2 and set(outcomes.values()) == {"passed"}, outcomes


def _bodies_and_names(files):
    module = next(text for path, text in files.items() if not path.startswith("test_"))
    lines = module.splitlines()
    return ([line for line in lines if line.startswith("    return")],
            [line[4:line.index("(")] for line in lines if line.startswith("def ")])


def test_opaque_names_rename_the_same_functions_and_say_nothing_of_them(tmp_path):
    for split in gen.SPLITS:
        for index in range(20):
            plain = gen.repository_files(split, index, seed=5, functions=2)
            opaque = gen.repository_files(split, index, seed=5, functions=2, names="opaque")
            (bodies, described), (same_bodies, words) = _bodies_and_names(plain), _bodies_and_names(opaque)
            assert bodies == same_bodies and plain.keys() == opaque.keys()
            assert len(set(words)) == 2 and set(words) <= set(gen.OPAQUE_NAMES), words
            assert not any(ch.isdigit() for word in words for ch in word)
            for family_name in described:  # neither the family nor the constant appears anywhere
                assert all(family_name not in text for text in opaque.values())
    (root,) = gen.write_repositories(tmp_path, "heldout", 1, seed=5, functions=2, names="opaque")
    outcomes, collected = run_tests(root)
    assert collected and len(outcomes) == 2 and set(outcomes.values()) == {"passed"}, outcomes


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="names='words'; expected one of descriptive, opaque"):
        gen.repository_files("train", 0, seed=0, names="words")
    with pytest.raises(ValueError, match="split 'test'; expected one of train, heldout"):
        gen.repository_files("test", 0, seed=0)
    with pytest.raises(ValueError, match="functions=9; expected 1 to"):
        gen.repository_files("train", 0, seed=0, functions=9)
    with pytest.raises(ValueError, match="max_constant=8; expected at least 9"):
        gen.repository_files("train", 0, seed=0, max_constant=8)


def test_the_demos_prompts_and_answers_fit_its_token_budgets(tmp_path):
    """configs/ssr_demo.yaml: the whole of a generated repository's prompts (so the buggy line is
    in the solver's window) and both roles' demonstrations fit the demo's budgets."""
    config = load_config(Path(__file__).parents[4] / "configs" / "ssr_demo.yaml")
    b, g = config.ssr, config.ssr.generated
    tokenizer = load_tokenizer(ssr_prompts.TOKENIZER_DIR)
    count = lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    roots = gen.write_repositories(tmp_path, "heldout", 2, seed=1, functions=g.functions,
                                   max_constant=g.max_constant)
    demos = ssr_demonstrations.deal([ssr_demonstrations.repository_demonstrations(str(r), 0)
                                     for r in roots], 4)
    assert len(demos) == 4
    for demo in demos:
        repo = Repository(demo.repository, Path(demo.repository))
        buggy = solver_prompt(demo.artifact, repo)
        assert demo.mutant.mutated.splitlines()[demo.mutant.line - 1] in buggy
        assert count(ssr_prompts.injector_prompt(repo.entry, repo.root)) <= config.data.max_prompt_tokens
        assert count(buggy) <= config.data.max_prompt_tokens
        assert count(demo.text()) < b.injector_max_tokens and count(demo.repair_diff) < b.solver_max_tokens
