"""Diversity of what a proposer writes, as pure jit-able functions (float32): the entropy of its
clusters, the mean pairwise cosine distance of its embeddings, novelty against an archive.

The formulas and test vectors are those of reference/notes_self_play.md §3–§4 (vector J).
"""

import jax.numpy as jnp

from nash_jax.core.segments import F32, masked_segments, safe_divide


def cluster_entropy(cluster_ids, mask=None, *, num_clusters=None):
    """(H / log B, H) with H = −Σ_k π_k log π_k and π_k = |C_k| / B over the B valid items (float32).

    cluster_ids [B] int in [0, num_clusters) (default B). The normalised entropy is 1 when every item
    is its own cluster and 0 when all share one (or B ≤ 1).
    """
    num_clusters = cluster_ids.shape[0] if num_clusters is None else num_clusters
    _, _, sizes = masked_segments(cluster_ids, mask, num_clusters)
    total = jnp.sum(sizes)
    share = safe_divide(sizes, total)
    entropy = -jnp.sum(jnp.where(share > 0, share * jnp.log(jnp.where(share > 0, share, 1.0)), 0.0))
    return safe_divide(entropy, jnp.log(jnp.maximum(total, 1.0))), entropy


def _unit(x, eps=1e-12):
    x = jnp.asarray(x, F32)
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), eps)


def mean_pairwise_cosine_distance(embeddings, mask=None):
    """1 − mean_{i≠j} cos(E_i, E_j) over the valid rows of embeddings [B, D] (scalar float32); 0 with
    fewer than two rows."""
    e = _unit(embeddings)
    valid = jnp.ones(e.shape[0], bool) if mask is None else jnp.asarray(mask, bool)
    pair = valid[:, None] & valid[None, :] & ~jnp.eye(e.shape[0], dtype=bool)
    cosine = jnp.where(pair, e @ e.T, 0.0)
    pairs = jnp.sum(pair, dtype=F32)
    return jnp.where(pairs > 0, 1.0 - safe_divide(jnp.sum(cosine), pairs), 0.0)


def archive_novelty(embedding, archive, archive_mask=None):
    """1 − max_a cos(e, a) over the valid archive rows → [...] float32 for embedding [..., D] and
    archive [A, D]; 1 against an empty archive. Novelty against everything kept so far, not only this
    batch (a batch can look diverse while repeating the last hundred)."""
    cosine = _unit(embedding) @ _unit(archive).T
    valid = jnp.ones(archive.shape[0], bool) if archive_mask is None else jnp.asarray(archive_mask, bool)
    nearest = jnp.max(jnp.where(valid, cosine, -jnp.inf), axis=-1)
    return jnp.where(jnp.any(valid), 1.0 - nearest, 1.0)
