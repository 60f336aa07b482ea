"""Proposer–solver self-play: one policy writes problems and solves them.

Each step, on `sources_per_step` sources (seed problems or documents):

    propose   the policy writes `proposals_per_source` problems per source (proposer prompt)
    check     the answer source validates each proposal (parser, grounding) and fixes its gold answer
    solve     `solvers_per_problem` solver rollouts answer each valid problem (solver prompt)
    assemble  rollouts join their episode (one proposal + its solvers); only complete episodes leave the
              EpisodeAssembler, so a problem whose solvers did not all finish is not trained on
    reward    per complete episode, on the host: solver reward = correct (gold or majority label);
              p̂ = share correct; proposer reward = f(p̂) (learnability, tent, spice_variance, ssr), minus
              the BLEU-cluster repetition share under majority vote, or `invalid_value` when invalid
    advantage comparison groups: solvers within their problem, proposers within their source
              (selfplay.episodes.group_ids), each role with its own mode; role purity checked
    update    one clipped policy-gradient step (`pg`) on both roles' rows

`schedule: alternating` is R-Zero's: phases of `phase_steps` steps that train the proposer against a
frozen solver snapshot (taken at the start of the phase), then the solver on the proposals whose p̂ lies
in `band`.

Anchors, every `anchors.eval_every` steps (step 0 is the warm start) and at the end: greedy accuracy on a
fixed held-out problem set (never a seed, never trained on: a proposal equal to one is invalid), and on
a fixed set of anchor sources the valid-proposal rate, the p̂ distribution, mean learnability,
distinct-2, BLEU-cluster entropy, novelty against an archive of earlier anchor proposals (checkpointed),
the share of problems with signal, and the pseudo-label accuracy under majority vote. The report adds a
table of solver snapshots against the held-out set and against each other's problems.

Every `train.checkpoint_every` steps an orbax checkpoint holds the train state, the archive and the
frozen solver; a rerun continues from it and ends with the same parameters (every draw is keyed by
(seed, stage, step)). Crash points: `proposer_solver:propose:step=N`, `proposer_solver:solve:step=N`
(within step N) and `proposer_solver:step=N` (after its update).
"""

import json
from dataclasses import dataclass, field
from typing import Literal

import jax.numpy as jnp
import numpy as np

from nash_jax import components, data, parallel, runs
from nash_jax.config import (AT_LEAST_1, BUILTIN_SYNTHETIC, NON_NEGATIVE, POSITIVE, PROBABILITY,
                             Range)
from nash_jax.core import advantages as adv
from nash_jax.models.tokenizer import load_tokenizer
from nash_jax.padding import bucket_size
from nash_jax.plan import StepShape
from nash_jax.recipes import Recipe, register
from nash_jax.recipes import preparation
from nash_jax.recipes.online import copy, sampling_settings, start
from nash_jax.rollouts import pg_batch
from nash_jax.sampling import generate, pad_id_of
from nash_jax.selfplay import answer_sources, arithmetic, documents, vocabulary
from nash_jax.selfplay.diversity import bleu_clusters, distinct_n, repetition_penalty
from nash_jax.selfplay.episodes import (EpisodeAssembler, Role, Rollout, check_role_purity,
                                        comparison_key, group_ids, pack_episodes)

STAGE = "proposer_solver"
ANCHOR_STAGE = "proposer_solver_anchors"  # metrics.jsonl records keep one (stage, step) each
HELDOUT = "a held-out problem"  # a valid proposal equal to a held-out problem: left out of training
EMBED_DIM = 256  # hashed bag of unigrams and bigrams: the proposals' embedding for archive novelty


@dataclass(frozen=True)
class TaskConfig:
    DOMAINS = {"seeds": AT_LEAST_1, "corpus_seed": NON_NEGATIVE, "heldout_documents": AT_LEAST_1,
               "teacher_off_by_one": PROBABILITY}
    name: str = "arithmetic"  # arithmetic or document (answer_sources.TASKS)
    seeds: int = 64  # arithmetic: seed problems the proposer writes from
    corpus: str = "builtin"  # document: a jsonl/parquet file with a `text` column, or the generated one
    corpus_seed: int = 0
    heldout_documents: int = 8  # document: documents kept from the proposer; the held-out questions
    # arithmetic: share of the warm start's solver demonstrations that answer one more than the truth
    # (a sloppy teacher: π_0 then knows roughly where each answer lies, and only an exact verifier can
    # teach it the rest)
    teacher_off_by_one: float = 0.0


@dataclass(frozen=True)
class AnchorConfig:
    DOMAINS = {"eval_every": AT_LEAST_1, "heldout_problems": AT_LEAST_1, "sources": AT_LEAST_1,
               "proposals_per_source": AT_LEAST_1, "snapshots": AT_LEAST_1, "archive_size": AT_LEAST_1}
    eval_every: int = 10  # steps between anchor evaluations (and one at step 0 and at the end)
    heldout_problems: int = 64  # arithmetic: the fixed held-out problem set
    sources: int = 16  # fixed anchor sources proposed from at each evaluation
    proposals_per_source: int = 2
    snapshots: int = 2  # solver snapshots over training for the co-adaptation table; steps must divide
    archive_size: int = 512  # earlier anchor proposals kept for novelty


@dataclass(frozen=True)
class ProposerSolverConfig:
    DOMAINS = {"steps": AT_LEAST_1, "sources_per_step": AT_LEAST_1, "proposals_per_source": Range(2),
               "solvers_per_problem": AT_LEAST_1, "spice_var": POSITIVE, "ssr_alpha": PROBABILITY,
               "repetition_threshold": PROBABILITY, "kl_coef": NON_NEGATIVE, "phase_steps": AT_LEAST_1,
               "proposer_max_tokens": AT_LEAST_1, "solver_max_tokens": AT_LEAST_1,
               "clip_low": Range(0, 1), "clip_high": NON_NEGATIVE}
    steps: int = 60
    task: TaskConfig = field(default_factory=TaskConfig)
    answer_source: Literal["verifier", "document", "majority"] = "verifier"
    sources_per_step: int = 4
    proposals_per_source: int = 4  # a proposer's comparison group: the proposals from one source
    solvers_per_problem: int = 4  # M
    proposer_reward: Literal["learnability", "tent", "spice_variance", "ssr"] = "learnability"
    invalid_value: float = -1.0  # the proposer's reward for an invalid proposal
    spice_var: float = 0.01
    ssr_alpha: float = 0.8
    repetition_threshold: float = 0.5  # BLEU distance at which proposals share a cluster
    # subtract R-Zero's repetition share |C_k|/B from proposer rewards: null = under majority vote only
    repetition_penalty: bool | None = None
    kl_coef: float = 0.0  # > 0: the pg_kl objective, a k3 KL penalty towards the initial policy π_0
    proposer_advantage: Literal["grpo", "drgrpo", "rloo"] = "rloo"
    solver_advantage: Literal["grpo", "drgrpo", "rloo"] = "grpo"
    schedule: Literal["joint", "alternating"] = "joint"
    phase_steps: int = 10  # alternating: steps per phase (proposer, then solver)
    band: list[float] = field(default_factory=lambda: [0.25, 0.75])  # alternating: p̂ kept for solvers
    proposer_max_tokens: int = 12
    solver_max_tokens: int = 4
    clip_low: float = 0.2
    clip_high: float = 0.28
    aggregation: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                         "drgrpo"] = "seq-mean-token-mean"
    anchors: AnchorConfig = field(default_factory=AnchorConfig)


def rows_per_step(ps):
    """The learner batch: every rollout of a step (proposals and their solvers), a fixed size."""
    return ps.sources_per_step * ps.proposals_per_source * (1 + ps.solvers_per_problem)


def check(config):
    ps = config.proposer_solver
    answer_sources.answer_source(ps.answer_source, ps.task.name)
    if ps.task.name == "document" and ps.task.corpus != "builtin":
        documents.check_corpus_file(ps.task.corpus)  # before the run directory is touched
    if ps.steps % ps.anchors.snapshots:
        raise ValueError(f"proposer_solver.steps={ps.steps} is not a multiple of "
                         f"proposer_solver.anchors.snapshots={ps.anchors.snapshots}")
    lo, hi = (ps.band + [None, None])[:2]
    if len(ps.band) != 2 or not 0.0 <= lo <= hi <= 1.0:
        raise ValueError(f"proposer_solver.band={ps.band}; expected [lo, hi] with 0 ≤ lo ≤ hi ≤ 1")


# ---------------------------------------------------------------------------------------------------
# the task's data: sources, anchor sources, held-out problems


@dataclass
class TaskData:
    sources: list  # answer_sources.Source the proposer writes from during training
    anchor_sources: list
    heldout: list  # (problem text, gold answer), never a seed and never trained on
    train_problems: list  # (problem, answer) the warm start's solver demonstrations use
    documents: list  # document texts the warm start's proposer demonstrations use (document task)


def task_data(config, run):
    ps, t = config.proposer_solver, config.proposer_solver.task
    if t.name == "document":
        corpus = t.corpus
        if corpus == "builtin":
            corpus = run / "data" / "corpus.jsonl"
            if parallel.is_writer() and not corpus.is_file():
                documents.write_corpus(corpus, seed=t.corpus_seed)
            parallel.barrier("proposer_solver corpus")
        rows = documents.load_corpus(corpus)
        order = np.random.default_rng(runs.stage_seed(config.seed, 0, "heldout")).permutation(len(rows))
        held = [rows[i] for i in order[:t.heldout_documents]]
        train = [rows[i] for i in order[t.heldout_documents:]]
        if not train:
            raise ValueError(f"document corpus {corpus}: {len(rows)} documents, all held out "
                             f"(task.heldout_documents={t.heldout_documents})")
        sources = [answer_sources.Source(r["id"], "document", r["text"]) for r in train]
        heldout = [q for r in held for q in _document_questions(r["text"])]
        train_problems = [q for r in train for q in _document_questions(r["text"])]
        docs = [r["text"] for r in train]
    else:
        heldout = arithmetic.random_problems(ps.anchors.heldout_problems,
                                             runs.stage_seed(config.seed, 0, "heldout"))
        seeds = arithmetic.random_problems(t.seeds, runs.stage_seed(config.seed, 0, "seeds"),
                                           exclude={p for p, _ in heldout})
        sources = [answer_sources.Source(f"seed-{i}", "seed", p) for i, (p, _) in enumerate(seeds)]
        train_problems, docs = [], []
    anchors = [sources[i % len(sources)] for i in range(ps.anchors.sources)]
    return TaskData(sources, anchors, heldout, train_problems, docs)


def _document_questions(text):
    """(question, answer) of both facts of a generated document (the held-out questions)."""
    d = documents.words(text)
    if len(d) < 9:
        return []
    return [(f"how many {d[i + 1]} does the {d[1]} {d[2]} have ?", d[i]) for i in (4, 7)]


# ---------------------------------------------------------------------------------------------------
# the recipe


def tokenizer_dir(config, run):
    if config.model.tokenizer:
        return config.model.tokenizer
    if config.model.path == BUILTIN_SYNTHETIC:
        return vocabulary.TOKENIZER_DIR
    return components.initial_policy_dir(config, run)


def run_proposer_solver(config, run):
    ps = config.proposer_solver
    mesh = preparation.fitting_mesh(config, {"proposer_solver rows per step (sources_per_step × "
                                             "proposals_per_source × (1 + solvers_per_problem))":
                                             rows_per_step(ps)})
    tokenizer = load_tokenizer(tokenizer_dir(config, run))
    task = task_data(config, run)
    source = answer_sources.answer_source(ps.answer_source, ps.task.name)
    if config.model.path == BUILTIN_SYNTHETIC:
        warm_start(config, run, tokenizer, mesh, task)
    game = Game(config, tokenizer, mesh, source)
    snapshots = [run / f"snapshot_{k}" / "policy" for k in range(ps.anchors.snapshots)]
    if not run.done(STAGE):
        train(config, run, task, game, snapshots)
        run.finish(STAGE, [str(p.relative_to(run.path)) for p in snapshots])
    return write_report(config, run, task, game, snapshots)


class Game:
    """Proposing, solving and scoring with one policy: the pieces a step, the anchors and the report
    share."""

    def __init__(self, config, tokenizer, mesh, source):
        self.config, self.tokenizer, self.mesh, self.source = config, tokenizer, mesh, source
        self.ps = config.proposer_solver
        self.kind = answer_sources.TASKS[self.ps.task.name].kind
        self.sampling = sampling_settings(config, tokenizer, mesh)

    def encode(self, texts, where):
        ids, _, _ = data.encode_prompts(self.tokenizer, texts, max_tokens=self.config.data.max_prompt_tokens,
                                        too_long="truncate_left", where=where)
        return ids

    def decode(self, samples, b, k):
        return self.tokenizer.decode(samples.tokens[b, k, :samples.lengths[b, k]], skip_special_tokens=True)

    def propose(self, model, sources, num_samples, key):
        """(prompt ids per source, Samples, texts [S][P])."""
        ids = self.encode([answer_sources.proposer_prompt(s) for s in sources], "proposer prompts")
        samples = generate(model, ids, num_samples=num_samples, max_new_tokens=self.ps.proposer_max_tokens,
                           key=key, **self.sampling)
        texts = [[self.decode(samples, b, k) for k in range(num_samples)] for b in range(len(sources))]
        return ids, samples, texts

    def solve(self, model, problems, num_samples, key, greedy=False):
        """(prompt ids per problem, Samples, replies [Q][M])."""
        ids = self.encode([answer_sources.solver_prompt(self.kind, p) for p in problems], "solver prompts")
        sampling = dict(self.sampling, temperature=0.0) if greedy else self.sampling
        samples = generate(model, ids, num_samples=num_samples, max_new_tokens=self.ps.solver_max_tokens,
                           key=key, **sampling)
        replies = [[self.decode(samples, b, k) for k in range(num_samples)] for b in range(len(problems))]
        return ids, samples, replies

    def check(self, source, text, step, where):
        try:
            return self.source.check(source, text)
        except Exception as err:  # a user's checker: say what it was checking
            raise RuntimeError(f"{where}, step {step}: the {self.ps.answer_source} answer source failed "
                               f"checking the proposal {text!r} from source {source.id!r}: "
                               f"{type(err).__name__}: {err}") from err

    def score(self, proposal, replies, step, where):
        try:
            return self.source.score(proposal, replies)
        except Exception as err:
            raise RuntimeError(f"{where}, step {step}: the {self.ps.answer_source} answer source failed "
                               f"scoring the solvers of problem {proposal.problem!r}: "
                               f"{type(err).__name__}: {err}") from err

    def accuracy(self, model, problems, key, where):
        """Greedy accuracy on (problem, gold) pairs, read as the task reads a reply."""
        return self.accuracies(model, [problems], key, where)[0]

    def accuracies(self, model, problem_sets, key, where):
        """Greedy accuracy on each of several lists of (problem, gold) pairs, in one generate call."""
        flat = [pair for problems in problem_sets for pair in problems]
        if not flat:
            return [float("nan")] * len(problem_sets)
        read = answer_sources.TASKS[self.ps.task.name]().read
        _, _, replies = self.solve(model, [p for p, _ in flat], 1, key, greedy=True)
        right = []
        for reply, (problem, gold) in zip(replies, flat):
            try:
                right.append(read(reply[0]) == gold)
            except Exception as err:
                raise RuntimeError(f"{where}: the {self.ps.task.name} task failed reading the reply "
                                   f"{reply[0]!r} to problem {problem!r}: {type(err).__name__}: {err}") \
                    from err
        out, start = [], 0
        for problems in problem_sets:
            out.append(float(np.mean(right[start:start + len(problems)])) if problems else float("nan"))
            start += len(problems)
        return out

    def proposer_rewards(self, p_hat, valid, shares):
        """Proposer rewards [N] from p̂ [N], validity [N] and repetition shares [N] (0 unless majority)."""
        ps = self.ps
        p = jnp.asarray(p_hat, jnp.float32)
        base = {"learnability": lambda: adv.learnability(p), "tent": lambda: adv.tent(p),
                "spice_variance": lambda: adv.spice_variance_reward(p, ps.spice_var),
                "ssr": lambda: adv.ssr_injector_reward(valid, p, ps.ssr_alpha)}[ps.proposer_reward]()
        return np.asarray(adv.gate_invalid(base - jnp.asarray(shares, jnp.float32), valid,
                                           ps.invalid_value), np.float64)


def heldout_texts(task):
    return {p for p, _ in task.heldout}


def train(config, run, task, game, snapshots):
    ps, a = config.proposer_solver, config.proposer_solver.anchors
    step = plan_step(config)
    online = start(config, run, game.mesh, initial_dir=components.initial_policy_dir(config, run),
                   tokenizer_dir=tokenizer_dir(config, run), objective=step.objective,
                   total_steps=ps.steps, **step.hyperparameters)
    model_def, step_fn = online.model_def, online.step_fn
    reference = online.reference_logprobs() if ps.kl_coef > 0 else None
    held = heldout_texts(task)
    pad_id = pad_id_of(game.tokenizer)
    capacity = rows_per_step(ps)
    per_snapshot = ps.steps // a.snapshots

    def anchors(step, params, extra):
        metrics, extra = evaluate_anchors(config, game, task, model_def.merge(params), extra, held,
                                            step)
        run.log_metrics(ANCHOR_STAGE, step, _defined(metrics))
        return extra

    def work(step, state, extra, _):
        if step % a.eval_every == 0:
            extra = anchors(step, state.params, extra)
        proposer_phase = solver_phase = True
        if ps.schedule == "alternating":
            proposer_phase = (step // ps.phase_steps) % 2 == 0
            solver_phase = not proposer_phase
            if proposer_phase and step % ps.phase_steps == 0:
                extra = {**extra, "frozen_solver": copy(state.params)}
        policy = model_def.merge(state.params)
        solver = model_def.merge(extra["frozen_solver"]) if ps.schedule == "alternating" and \
            proposer_phase else policy
        rng = np.random.default_rng([config.seed, step])
        chosen = [task.sources[i] for i in rng.choice(len(task.sources), size=ps.sources_per_step,
                                                      replace=len(task.sources) < ps.sources_per_step)]
        episode = play(config, game, chosen, policy, solver, step, held,
                       propose_key=runs.stage_key(config.seed, 0, "propose", step),
                       solve_key=runs.stage_key(config.seed, 0, "solve", step),
                       crash_prefix=STAGE)
        rows, info = learner_rows(config, game, episode, capacity, proposer_phase, solver_phase)
        if rows is None:
            metrics = {"loss": 0.0, "skipped_update": 1.0}
        else:
            batch = learner_batch(rows, pad_id, capacity)
            if reference is not None:
                batch["ref_logp"] = reference(step_fn, batch)
            state, metrics = step_fn.jitted(state, step_fn.place_global(batch))
            metrics = dict(metrics)
        metrics.update(info, phase=float(solver_phase and not proposer_phase))
        metrics = _defined(metrics)
        if (step + 1) % per_snapshot == 0:
            online.export(state.params, snapshots[(step + 1) // per_snapshot - 1])
        return state, extra, metrics

    extra = {"archive": jnp.zeros((a.archive_size, EMBED_DIM), jnp.float32),
             "archive_count": jnp.int32(0)}
    if ps.schedule == "alternating":
        extra["frozen_solver"] = copy(online.state.params)
    state, extra = online.loop(STAGE, total=ps.steps, work=work, extra=extra)
    anchors(ps.steps, state.params, extra)


def _defined(metrics):
    """The metrics that have a value (a figure over no item, such as p̂ with no valid proposal, is NaN
    and is left out of the logs)."""
    return {k: v for k, v in metrics.items() if not (isinstance(v, float) and np.isnan(v))}


# ---------------------------------------------------------------------------------------------------
# one round of the game: propose, check, solve, assemble, score


@dataclass
class Round:
    episodes: list  # complete episodes (selfplay.episodes.Episode), rewards set
    prompts: dict  # rollout uid -> prompt token ids
    proposals: list  # (source, text, Proposal) of every proposal
    scored: dict  # proposal uid -> Scored (complete episodes of valid proposals)
    incomplete: int  # valid proposals whose solvers did not all finish


def play(config, game, sources, proposer, solver, step, heldout, *, propose_key, solve_key,
         crash_prefix=None, num_proposals=None, where="training"):
    """Propose from `sources`, solve the valid proposals, and return the complete, scored episodes."""
    ps = config.proposer_solver
    P, M = num_proposals or ps.proposals_per_source, ps.solvers_per_problem
    prompt_ids, proposed, texts = game.propose(proposer, sources, P, propose_key)
    if crash_prefix:
        runs.crash_point(f"{crash_prefix}:propose:step={step + 1}")
    assembler, members, prompts, proposals = EpisodeAssembler(), {}, {}, []
    uid = 0
    valid = []  # (proposal uid, Proposal)
    for b, source in enumerate(sources):
        for k in range(P):
            text = texts[b][k]
            proposal = game.check(source, text, step + 1, where)
            if proposal.valid and not proposed.finished[b, k]:
                proposal = answer_sources.Proposal(False, "no end of proposal")
            if proposal.valid and proposal.problem in heldout:  # never trained on: no episode at all
                proposals.append((source, text, answer_sources.Proposal(False, HELDOUT)))
                uid += 1
                continue
            proposals.append((source, text, proposal))
            expected = {Role.PROPOSER: 1, Role.SOLVER: M} if proposal.valid else {Role.PROPOSER: 1}
            assembler.open(uid, expected)
            rollout = Rollout(uid=uid, role=Role.PROPOSER, episode=uid, source=source.id,
                              tokens=proposed.tokens[b, k, :proposed.lengths[b, k]],
                              logprobs=proposed.logprobs[b, k, :proposed.lengths[b, k]], finished=True)
            assembler.add(rollout)
            members[uid], prompts[uid] = [rollout], prompt_ids[b]
            if proposal.valid:
                valid.append((uid, proposal))
            uid += 1
    scored, incomplete = {}, 0
    if valid:
        solver_ids, solved, replies = game.solve(solver, [p.problem for _, p in valid], M, solve_key)
        for q, (parent, proposal) in enumerate(valid):
            for k in range(M):
                rollout = Rollout(uid=uid, role=Role.SOLVER, episode=parent, parent=parent,
                                  tokens=solved.tokens[q, k, :solved.lengths[q, k]],
                                  logprobs=solved.logprobs[q, k, :solved.lengths[q, k]],
                                  finished=bool(solved.finished[q, k]))
                assembler.add(rollout)
                members[parent].append(rollout)
                prompts[uid] = solver_ids[q]
                uid += 1
            if all(r.finished for r in members[parent][1:]):  # the episode is assembled: score it
                scored[parent] = game.score(proposal, replies[q], step + 1, where)
            else:
                incomplete += 1
    if crash_prefix:  # after solving (nothing, when no proposal was valid)
        runs.crash_point(f"{crash_prefix}:solve:step={step + 1}")
    # rewards, now that every complete episode is whole
    uids = sorted(scored)
    p_hat = {u: scored[u].p_hat for u in uids}
    shares = {}
    penalise = ps.answer_source == "majority" if ps.repetition_penalty is None else ps.repetition_penalty
    if penalise and uids:
        problems = [proposals[u][2].problem for u in uids]
        shares = dict(zip(uids, repetition_penalty(bleu_clusters(problems, ps.repetition_threshold))))
    n = len(proposals)
    ok = np.array([u in scored for u in range(n)])
    rewards = game.proposer_rewards([p_hat.get(u, 0.0) for u in range(n)], ok,
                                    [shares.get(u, 0.0) for u in range(n)])
    for u in range(n):
        if u not in members:
            continue
        if u in scored or not proposals[u][2].valid:
            members[u][0].reward = float(rewards[u])
        for k, rollout in enumerate(members[u][1:]):
            if u in scored:
                rollout.reward = float(scored[u].correct[k])
    episodes = assembler.pop_complete()
    if len(assembler):
        assert len(assembler) == incomplete, (len(assembler), incomplete)
    return Round(episodes, prompts, proposals, scored, incomplete)


def learner_rows(config, game, rnd, capacity, proposer_phase, solver_phase):
    """(rows [(prompt ids, rollout, advantage)] or None, step metrics) of a round's complete episodes."""
    ps = config.proposer_solver
    lo, hi = ps.band
    if ps.schedule == "alternating":
        for episode in rnd.episodes:
            for r in episode.rollouts:
                band_ok = r.role == Role.SOLVER and lo <= rnd.scored[r.parent].p_hat <= hi
                r.trainable = proposer_phase if r.role == Role.PROPOSER else (solver_phase and band_ok)
    packed, carry = pack_episodes(rnd.episodes, capacity)
    assert not carry, "a step's episodes always fit its batch"
    rollouts = [r for e in packed for r in e.rollouts]
    roles = np.array([int(r.role) for r in rollouts], np.int32)
    groups = group_ids(roles, [comparison_key(r) for r in rollouts])
    check_role_purity(groups, roles)
    rewards = np.array([r.reward for r in rollouts], np.float32)
    advantage = np.zeros(len(rollouts), np.float32)
    pad = capacity - len(rollouts)
    for role, mode in ((Role.PROPOSER, ps.proposer_advantage), (Role.SOLVER, ps.solver_advantage)):
        mask = roles == role
        if mask.any():
            a = adv.group_advantages(jnp.asarray(np.pad(rewards, (0, pad))),
                                     jnp.asarray(np.pad(groups, (0, pad), constant_values=-1)),
                                     jnp.asarray(np.pad(mask, (0, pad))), num_groups=capacity, mode=mode)
            advantage = np.where(mask, np.asarray(a)[:len(rollouts)], advantage)
    metrics = round_metrics(ps, rnd, rollouts, roles, groups, rewards)
    rows = [(rnd.prompts[r.uid], r, float(a)) for r, a in zip(rollouts, advantage) if r.trainable]
    metrics["trained_rows"] = float(len(rows))
    return (rows or None), metrics


def round_metrics(ps, rnd, rollouts=None, roles=None, groups=None, rewards=None):
    """Host-side figures of one round: validity, p̂, learnability, signal, parsing, pseudo-labels."""
    n = len(rnd.proposals)
    valid = [p.valid for _, _, p in rnd.proposals]
    scored = list(rnd.scored.values())
    p_hat = np.array([s.p_hat for s in scored])
    replies = len(scored) * ps.solvers_per_problem
    out = {"valid_proposal_rate": float(np.mean(valid)) if n else 0.0,
           "mean_p_hat": float(p_hat.mean()) if len(p_hat) else float("nan"),
           "mean_learnability": float(np.mean(4 * p_hat * (1 - p_hat))) if len(p_hat) else 0.0,
           "signal_share": float(np.mean((p_hat > 0) & (p_hat < 1))) if len(p_hat) else 0.0,
           "incomplete_episodes": float(rnd.incomplete),
           "unparsed_share": float(sum(s.unparsed for s in scored) / replies) if replies else 0.0,
           "heldout_collisions": float(sum(p.reason == HELDOUT for _, _, p in rnd.proposals))}
    labelled = [s.label_correct for s in scored if s.label_correct is not None]
    if ps.answer_source == "majority":
        out["pseudo_label_accuracy"] = float(np.mean(labelled)) if labelled else float("nan")
    if rollouts is not None:
        solver = roles == Role.SOLVER
        out["solver_reward"] = float(rewards[solver].mean()) if solver.any() else float("nan")
        out["proposer_reward"] = float(rewards[~solver].mean()) if (~solver).any() else float("nan")
    return out


def learner_batch(rows, pad_id, capacity):
    """The pg batch of [(prompt ids, rollout, advantage)], padded to `capacity` rows (rollouts.pg_batch)."""
    return pg_batch([p for p, _, _ in rows], [r.tokens.tolist() for _, r, _ in rows],
                    [r.logprobs for _, r, _ in rows], [a for _, _, a in rows], pad_id, capacity)


# ---------------------------------------------------------------------------------------------------
# anchors


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
                                                 runs.stage_key(config.seed, 0, "anchor_heldout"),
                                                 f"held-out evaluation, step {step}")}
    rnd = play(config, game, task.anchor_sources, model, model, step - 1, heldout,
               propose_key=runs.stage_key(config.seed, 0, "anchor_propose", step),
               solve_key=runs.stage_key(config.seed, 0, "anchor_solve", step),
               num_proposals=a.proposals_per_source, where="anchor evaluation")
    metrics.update(round_metrics(ps, rnd))
    texts = [text for _, text, _ in rnd.proposals]
    metrics["distinct_2"] = distinct_n(texts, 2)
    clusters = bleu_clusters(texts, ps.repetition_threshold)
    metrics["cluster_entropy"] = float(adv.cluster_entropy(jnp.asarray(clusters))[0])
    e = embed(texts, game.tokenizer)
    count = int(extra["archive_count"])
    mask = np.arange(a.archive_size) < min(count, a.archive_size)
    novelty = adv.archive_novelty(jnp.asarray(e), extra["archive"], jnp.asarray(mask))
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


# ---------------------------------------------------------------------------------------------------
# warm start: a tiny Llama fit to demonstrations of both roles


def warm_start(config, run, tokenizer, mesh, task):
    """Fit a tiny Llama to demonstrations of both roles and export it as π_0 (stage `init`)."""
    if run.done("init"):
        return
    w, ps = config.warm_start, config.proposer_solver
    model = preparation.tiny_llama(config, tokenizer)
    rng = np.random.default_rng(runs.stage_seed(config.seed, 0, "warm_start"))
    held = heldout_texts(task)
    kind = answer_sources.TASKS[ps.task.name].kind
    prompts, responses = [], []
    for i in range(w.steps * w.batch_size):
        if i % 2 == 0:  # a proposer demonstration
            source = task.sources[rng.integers(len(task.sources))]
            if kind == "document":
                response = documents.demonstration(source.text, rng)
            elif rng.random() < 0.05:
                response = arithmetic.malformed_problem(rng)
            else:
                response = arithmetic.random_problem(rng)[0]
                while response in held:
                    response = arithmetic.random_problem(rng)[0]
            prompts.append(answer_sources.proposer_prompt(source))
        else:  # a solver demonstration, never on a held-out problem
            if kind == "document":
                problem, answer = task.train_problems[rng.integers(len(task.train_problems))]
            else:
                problem, answer = arithmetic.random_problem(rng)
                while problem in held:
                    problem, answer = arithmetic.random_problem(rng)
            prompts.append(answer_sources.solver_prompt(kind, problem))
            sloppy = kind == "seed" and rng.random() < ps.task.teacher_off_by_one
            response = str(answer + 1 if sloppy else answer)
        responses.append(response)
    ids, _, _ = data.encode_prompts(tokenizer, prompts, max_tokens=config.data.max_prompt_tokens,
                                    too_long="truncate_left", where="warm-start prompts")
    preparation.fit_demonstrations(config, run, model, list(zip(ids, responses)), tokenizer,
                                   vocabulary.TOKENIZER_DIR, mesh)


# ---------------------------------------------------------------------------------------------------
# report


def snapshot_table(config, run, task, game, snapshots):
    """Per solver snapshot (π_0 first): greedy held-out accuracy, and accuracy on each snapshot's own
    valid proposals (made on the anchor sources; their true answers from the task's checker)."""
    ps = config.proposer_solver
    labels = ["step_0"] + [f"step_{(k + 1) * ps.steps // ps.anchors.snapshots}"
                           for k in range(len(snapshots))]
    paths = [components.initial_policy_dir(config, run), *snapshots]
    held = heldout_texts(task)
    problems, accuracy = [], []
    for path in paths:
        model = components.load_policy(path, config, game.mesh)
        _, _, texts = game.propose(model, task.anchor_sources, ps.anchors.proposals_per_source,
                                   runs.stage_key(config.seed, 0, "snapshot_propose"))
        mine = {}
        for b, source in enumerate(task.anchor_sources):
            for text in texts[b]:
                p = game.check(source, text, "report", "snapshot table")
                if p.valid and p.checker is not None and p.problem not in held:
                    mine.setdefault(p.problem, p.checker)
        problems.append(sorted(mine.items()))
    key = runs.stage_key(config.seed, 0, "snapshot_solve")
    for path in paths:
        model = components.load_policy(path, config, game.mesh)
        held_out, *vs = game.accuracies(model, [task.heldout, *problems], key,
                                        f"snapshot table, solver {path}")
        accuracy.append({"heldout": held_out, "vs": vs})
    known = lambda v: None if np.isnan(v) else v  # noqa: E731  (no problem to score on)
    return {"labels": labels, "heldout_accuracy": [known(a["heldout"]) for a in accuracy],
            "cross_accuracy": [[known(v) for v in a["vs"]] for a in accuracy],
            "problems": [len(p) for p in problems]}


ANCHOR_KEYS = ("heldout_accuracy", "valid_proposal_rate", "mean_learnability", "distinct_2",
               "cluster_entropy", "novelty", "signal_share", "mean_p_hat", "unparsed_share")


def write_report(config, run, task, game, snapshots):
    ps = config.proposer_solver
    metrics = runs.read_metrics(run / "metrics.jsonl")
    records = sorted((m for m in metrics if m["stage"] == ANCHOR_STAGE), key=lambda m: m["step"])
    keys = ANCHOR_KEYS + (("pseudo_label_accuracy",) if ps.answer_source == "majority" else ())
    anchors = {"step": [m["step"] for m in records], **{k: [m.get(k) for m in records] for k in keys}}
    M = ps.solvers_per_problem
    anchors["p_hat_distribution"] = [[m.get(f"p_hat_{k}_of_{M}", 0.0) for k in range(M + 1)]
                                     for m in records]
    train = [m for m in metrics if m["stage"] == STAGE]
    report = {"run_dir": str(run.path), "recipe": config.recipe, "task": ps.task.name,
              "answer_source": ps.answer_source, "proposer_reward": ps.proposer_reward,
              "schedule": ps.schedule, "anchors": anchors,
              "snapshots": snapshot_table(config, run, task, game, snapshots),
              "training": {k: [m.get(k) for m in train] for k in
                           ("step", "loss", "valid_proposal_rate", "mean_learnability",
                            "solver_reward", "signal_share")}}
    if parallel.is_writer():
        runs.write_text_atomically(run / "report.json", json.dumps(report, indent=1))
        plots = draw_plots(report, run.path)
        runs.write_text_atomically(run / "report.md", markdown(report, plots))
    parallel.barrier("proposer_solver report")
    run.finish("report", ["report.json", "report.md"], leaf=True)
    return report


def draw_plots(report, directory):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    anchors, names = report["anchors"], []
    keys = [k for k in (*ANCHOR_KEYS, "pseudo_label_accuracy") if k in anchors]
    cols = 3
    fig, axes = plt.subplots(-(-len(keys) // cols), cols, figsize=(12, 2.8 * -(-len(keys) // cols)))
    for ax, key in zip(axes.flat, keys):
        ax.plot(anchors["step"], [np.nan if v is None else v for v in anchors[key]], marker="o")
        ax.set_title(key.replace("_", " "))
        ax.set_xlabel("step")
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    fig.tight_layout()
    runs.write_atomically(directory / "anchors.png", lambda tmp: fig.savefig(tmp, format="png", dpi=80))
    plt.close(fig)
    names.append("anchors.png")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    dist = np.asarray(anchors["p_hat_distribution"])
    M = dist.shape[1] - 1
    for k in range(M + 1):
        ax.plot(anchors["step"], dist[:, k], marker=".", label=f"p̂ = {k}/{M}")
    ax.set_xlabel("step")
    ax.set_ylabel("share of valid proposals")
    ax.legend(fontsize=7)
    fig.tight_layout()
    runs.write_atomically(directory / "p_hat.png", lambda tmp: fig.savefig(tmp, format="png", dpi=80))
    plt.close(fig)
    names.append("p_hat.png")
    return names


def markdown(report, plots):
    a, s = report["anchors"], report["snapshots"]
    lines = [f"# Run report: proposer_solver ({report['run_dir']})", "",
             f"Task {report['task']}, answer source {report['answer_source']}, proposer reward "
             f"{report['proposer_reward']}, schedule {report['schedule']}.", "",
             "## Anchors over evaluation steps (step 0 = the warm start)", "",
             "| " + " | ".join(k for k in a if k != "p_hat_distribution") + " |",
             "|---" * (len(a) - 1) + "|"]
    for i in range(len(a["step"])):
        lines.append("| " + " | ".join(_fmt(a[k][i]) for k in a if k != "p_hat_distribution") + " |")
    lines += ["", "## Solver snapshots: accuracy on the held-out set and on each snapshot's problems", "",
              "| solver | held-out | " + " | ".join(f"problems of {l} (n={n})" for l, n in
                                                   zip(s["labels"], s["problems"])) + " |",
              "|---|---|" + "---|" * len(s["labels"])]
    for label, held, row in zip(s["labels"], s["heldout_accuracy"], s["cross_accuracy"]):
        lines.append(f"| {label} | {_fmt(held)} | " + " | ".join(_fmt(v) for v in row) + " |")
    lines += ["", "A later solver that does worse than an earlier one on the held-out set, or on the "
              "earlier proposer's problems, is a regression that self-play alone would not show.", ""]
    lines += [f"![{name}]({name})" for name in plots] + [""]
    return "\n".join(lines)


def _fmt(value):
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def summary_lines(report):
    a = report["anchors"]

    def span(key):
        values = [v for v in a.get(key, []) if v is not None]
        return f"{values[0]:.3f} -> {values[-1]:.3f}" if values else "-"

    lines = [f"held-out accuracy (warm start -> final): {span('heldout_accuracy')}",
             f"mean learnability: {span('mean_learnability')}",
             f"valid proposal rate: {span('valid_proposal_rate')}",
             f"distinct-2: {span('distinct_2')}"]
    if "pseudo_label_accuracy" in a:
        lines.append(f"pseudo-label accuracy: {span('pseudo_label_accuracy')}")
    return lines


def plan_step(config):
    """One update: every rollout of a step (rows_per_step), with a k3 KL to π_0 when kl_coef > 0."""
    ps = config.proposer_solver
    kl = {"kl_coef": ps.kl_coef} if ps.kl_coef > 0 else {}
    longest = max(ps.proposer_max_tokens, ps.solver_max_tokens)
    return StepShape("pg_kl" if kl else "pg",
                     dict(clip_low=ps.clip_low, clip_high=ps.clip_high, aggregation=ps.aggregation,
                          max_len=longest, **kl),
                     rows_per_step(ps), bucket_size(config.data.max_prompt_tokens + longest, minimum=8))


register(Recipe(name="proposer_solver", run=run_proposer_solver, section="proposer_solver",
                section_type=ProposerSolverConfig, check=check, summary=summary_lines,
                report_options=(), builtin_models={BUILTIN_SYNTHETIC: vocabulary.TOKENIZER_DIR},
                plan_step=plan_step))
