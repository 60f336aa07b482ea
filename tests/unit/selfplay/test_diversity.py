"""Host-side diversity: distinct-n (notes §4 J) and R-Zero's BLEU-cluster repetition penalty (§4 D)."""

import numpy as np
from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

from nash_jax.selfplay import diversity


def test_vector_j_distinct_2():
    assert diversity.distinct_n(["a b c", "a b d"], 2) == 0.75
    assert diversity.distinct_n(["a", ""], 2) == 0.0


def test_vector_d_repetition_penalty_from_cluster_ids():
    np.testing.assert_allclose(diversity.repetition_penalty([0, 0, 1, 2]), [0.5, 0.5, 0.25, 0.25])
    assert diversity.repetition_penalty([]).shape == (0,)


def test_bleu_distances_average_both_directions():
    texts = ["what is two plus two", "what is two plus three please", "name a prime number"]
    d = diversity.bleu_distances(texts)
    smooth = SmoothingFunction().method1
    one_way = sentence_bleu([texts[1].split()], texts[0].split(), smoothing_function=smooth)
    other_way = sentence_bleu([texts[0].split()], texts[1].split(), smoothing_function=smooth)
    assert one_way != other_way  # BLEU is not symmetric: that is why we average
    np.testing.assert_allclose(d[0, 1], 1 - (one_way + other_way) / 2)
    np.testing.assert_array_equal(d, d.T)
    np.testing.assert_array_equal(np.diag(d), 0.0)


def test_bleu_clusters_group_near_duplicates_and_number_by_first_appearance():
    texts = [
        "find the sum of all positive integers n such that n squared plus one divides n plus ten",
        "how many ways can eight rooks be placed on a chess board so that none attack each other",
        "find the sum of all positive integers n such that n squared plus one divides n plus twelve",
        "what is the remainder when two to the power one hundred is divided by seven",
        "find the sum of all positive integers n such that n squared plus two divides n plus ten",
    ]
    ids = diversity.bleu_clusters(texts, threshold=0.5)
    assert ids.tolist() == [0, 1, 0, 2, 0]
    np.testing.assert_allclose(diversity.repetition_penalty(ids), [0.6, 0.2, 0.6, 0.2, 0.6])
    # threshold 0 merges nothing (distances between different texts are > 0)
    assert diversity.bleu_clusters(texts, threshold=0.0).tolist() == [0, 1, 2, 3, 4]


def test_bleu_clusters_small_batches_and_empty_questions():
    assert diversity.bleu_clusters([]).tolist() == []
    assert diversity.bleu_clusters(["only one"]).tolist() == [0]
    # unparsed questions are empty strings: BLEU 0, distance 1, each its own cluster (as in R-Zero)
    assert diversity.bleu_clusters(["", ""]).tolist() == [0, 1]
