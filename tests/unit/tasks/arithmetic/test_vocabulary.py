"""The word tokenizer of the proposer–solver tasks (tasks/arithmetic/vocabulary.py)."""

import numpy as np

from nash_jax.selfplay import answer_sources
from nash_jax.selfplay.answer_sources import Source
from nash_jax.tasks.arithmetic import vocabulary
from nash_jax.tasks.documents import documents


def test_shipped_tokenizer_matches_a_rebuild_and_covers_the_corpus_and_prompts(tmp_path):
    from nash_jax.models.tokenizer import chat_prompt, load_tokenizer

    rebuilt = vocabulary.build_tokenizer(tmp_path / "tok")
    shipped = load_tokenizer(vocabulary.TOKENIZER_DIR)
    assert shipped.get_vocab() == rebuilt.get_vocab()
    unk = shipped.unk_token_id
    for row in documents.generate_corpus():
        for text in (answer_sources.proposer_prompt(Source("d", "document", row["text"])),
                     documents.demonstration(row["text"], np.random.default_rng(0))):
            ids = shipped(chat_prompt(shipped, text), add_special_tokens=False)["input_ids"]
            assert unk not in ids, text
    for text in ("role: solver source: seed problem: ( 3 + 4 ) * 9 / 7 =", "99"):
        assert unk not in shipped(text)["input_ids"]
