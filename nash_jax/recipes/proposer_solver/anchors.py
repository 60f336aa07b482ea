"""Anchors: what an evaluation every `anchors.eval_every` steps measures — greedy accuracy on the
held-out problems, and, on fresh proposals from the fixed anchor sources, validity, p̂ and its spread,
learnability, distinct-2, BLEU-cluster entropy and novelty against the archive of earlier anchor
proposals (kept in the checkpoint)."""

import jax.numpy as jnp
import numpy as np

from nash_jax.core import diversity
from nash_jax.recipes.proposer_solver.credit import round_metrics
from nash_jax.recipes.proposer_solver.rounds import play
from nash_jax.runs.keys import stage_key
from nash_jax.selfplay.diversity import bleu_clusters, distinct_n

EMBED_DIM = 256  # hashed bag of unigrams and bigrams: the proposals' embedding for archive novelty


def embed(texts, tokenizer):
    """[B, EMBED_DIM] hashed counts of token unigrams and bigrams (a proposal's embedding)."""
    out = np.zeros((len(texts), EMBED_DIM), np.float32)
    for i, text in enumerate(texts):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        for t in ids:
            out[i, (t * 7919) % EMBED_DIM] += 1
        for a, b in zip(ids, ids[1:]):
            out[i, (a * 104729 + b * 7919 + 1) % EMBED_DIM] += 1
    return out


def evaluate_anchors(config, game, task, model, extra, heldout, step):
    """({anchor metrics}, extra with this evaluation's proposals added to the archive). The proposals
    are fresh draws at each evaluation (keyed by the step), so their novelty is the policy's."""
    ps, a = config.proposer_solver, config.proposer_solver.anchors
    metrics = {"heldout_accuracy": game.accuracy(model, task.heldout,
                                                 stage_key(config.seed, 0, "anchor_heldout"),
                                                 f"held-out evaluation, step {step}")}
    rnd = play(config, game, task.anchor_sources, model, model, step - 1, heldout,
               propose_key=stage_key(config.seed, 0, "anchor_propose", step),
               solve_key=stage_key(config.seed, 0, "anchor_solve", step),
               num_proposals=a.proposals_per_source, where="anchor evaluation")
    metrics.update(round_metrics(ps, rnd))
    texts = [text for _, text, _ in rnd.records]
    metrics["distinct_2"] = distinct_n(texts, 2)
    clusters = bleu_clusters(texts, ps.repetition_threshold)
    metrics["cluster_entropy"] = float(diversity.cluster_entropy(jnp.asarray(clusters))[0])
    e = embed(texts, game.tokenizer)
    count = int(extra["archive_count"])
    mask = np.arange(a.archive_size) < min(count, a.archive_size)
    novelty = diversity.archive_novelty(jnp.asarray(e), extra["archive"], jnp.asarray(mask))
    metrics["novelty"] = float(jnp.mean(novelty))
    archive = np.array(extra["archive"])
    for i, row in enumerate(e):
        archive[(count + i) % a.archive_size] = row
    M = ps.solvers_per_problem
    p_hat = np.array([s.p_hat for s in rnd.scored.values()])
    for k in range(M + 1):  # the curriculum: how the valid proposals' p̂ spread over k/M
        metrics[f"p_hat_{k}_of_{M}"] = float(np.mean(np.isclose(p_hat, k / M))) if len(p_hat) else 0.0
    extra = {**extra, "archive": jnp.asarray(archive), "archive_count": jnp.int32(count + len(e))}
    return metrics, extra
