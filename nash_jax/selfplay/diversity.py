"""Diversity of generated text (host side): distinct-n and R-Zero's BLEU-cluster repetition penalty.

The cluster ids made here feed `core.diversity.cluster_entropy` and, through `repetition_penalty`,
`core.advantages.rzero_challenger_reward`.
"""

import numpy as np
from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import squareform


def _ngrams(words, n):
    return [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]


def distinct_n(texts, n):
    """Distinct n-grams / all n-grams over the whitespace-split texts (0 when there is none)."""
    grams = [g for text in texts for g in _ngrams(text.split(), n)]
    return len(set(grams)) / len(grams) if grams else 0.0


def bleu_distances(texts):
    """[B, B] float64: d_ij = 1 − (BLEU(i | j) + BLEU(j | i)) / 2, 0 on the diagonal.

    BLEU(h | r) is nltk's sentence_bleu of hypothesis h against reference r, on whitespace tokens, with
    smoothing method1, as in R-Zero's caller_penalty.py. BLEU is not symmetric. R-Zero scores only
    one direction per pair (the earlier text as hypothesis), so its distances depend on the order of
    the batch. Averaging both directions removes that dependence.
    """
    words = [text.split() for text in texts]
    smooth = SmoothingFunction().method1
    score = np.eye(len(texts))
    for i, hypothesis in enumerate(words):
        for j, reference in enumerate(words):
            if i != j:
                score[i, j] = sentence_bleu([reference], hypothesis, smoothing_function=smooth)
    return 1.0 - (score + score.T) / 2.0


def bleu_clusters(texts, threshold=0.5):
    """[B] int32 cluster ids (dense, numbered by first appearance) of average-linkage agglomerative
    clustering on `bleu_distances`, cut at `threshold`.

    Two clusters merge while their mean pairwise distance is ≤ threshold (scipy's fcluster,
    criterion="distance"). R-Zero uses sklearn's AgglomerativeClustering(distance_threshold=0.5,
    linkage="average"), which merges only below the threshold; the two differ only at exact ties.
    """
    if len(texts) < 2:
        return np.zeros(len(texts), np.int32)
    tree = linkage(squareform(bleu_distances(texts), checks=False), method="average")
    labels = fcluster(tree, t=threshold, criterion="distance")
    dense = {}
    return np.array([dense.setdefault(label, len(dense)) for label in labels], np.int32)


def repetition_penalty(cluster_ids):
    """|C_k| / B for each item, C_k the cluster holding it (R-Zero's r_rep; B = the batch size)."""
    ids = np.asarray(cluster_ids)
    if ids.size == 0:
        return np.zeros(0)
    _, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
    return counts[inverse] / ids.size
