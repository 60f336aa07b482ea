"""The task's data: the training and held-out repositories, the warm start's demonstrations and the
fixed held-out bugs (both made by the mutation engine and saved once, stage DATA_STAGE, as artifact
directories under RUN_DIR/data/ssr that `nash-jax ssr-validate` reads)."""

from dataclasses import dataclass
from pathlib import Path

from nash_jax import parallel
from nash_jax.recipes.ssr.config import DATA_STAGE
from nash_jax.runs.keys import stage_seed
from nash_jax.tasks.code import ssr_demonstrations
from nash_jax.tasks.code.ssr_artifact import read_artifact_dir, resolve_repository
from nash_jax.tasks.code import code_repositories, generated_repos


@dataclass(frozen=True)
class Repository:
    entry: str  # what an artifact's `repository` file holds: a shipped name or a path
    root: Path

    @property
    def name(self):
        return Path(self.entry).name


@dataclass(frozen=True)
class Bug:
    """A mutation-engine bug: its artifact and the repair that undoes it."""
    artifact: object
    repair_diff: str
    repository: Repository


@dataclass
class TaskData:
    train: list  # Repository, trained on
    heldout: list  # Repository, never trained on
    demonstrations: list  # Bug of the training repositories (the warm start's)
    heldout_bugs: list  # Bug of the held-out repositories (the anchor's repair rate)
    anchor_repositories: list  # training repositories the anchor injectors write for


def repositories(entries, split):
    """Repository of each config entry (names, paths, globs: its path), or of the shipped `split`
    (its name)."""
    if entries is None:
        return [Repository(name, code_repositories.resolve(name)) for name in code_repositories.names(split)]
    return [Repository(str(root), root) for root in code_repositories.expand(entries)]


def generated(run, split, n, config):
    """Repository of each of the n generated repositories of `split` (written once per run, by the
    writing process; the same seed gives the same ones)."""
    g, folder = config.ssr.generated, run / "data" / "ssr" / "repos"
    if parallel.is_writer():
        generated_repos.write_repositories(folder, split, n, stage_seed(config.seed, 0, "ssr_repos"),
                                           g.functions, g.max_constant, g.names)
    paths = [generated_repos.path_of(folder, split, index) for index in range(n)]
    return [Repository(str(path), path) for path in paths]


def task_data(config, run):
    b = config.ssr
    train = repositories(b.repositories, "train") + generated(run, "train", b.generated.train, config)
    heldout = (repositories(b.heldout_repositories, "heldout")
               + generated(run, "heldout", b.generated.heldout, config))
    for what, repos in (("training", train), ("held-out", heldout)):
        if not repos:
            raise ValueError(f"ssr: no {what} repositories (repositories / "
                             "heldout_repositories and generated); expected at least one")
    overlap = {r.root for r in train} & {r.root for r in heldout}
    if overlap:
        raise ValueError(f"ssr: {sorted(map(str, overlap))} are both training and held-out "
                         "repositories; expected held-out repositories that are never trained on")
    if (b.demonstration_repositories or 0) > len(train):
        raise ValueError(f"ssr.demonstration_repositories={b.demonstration_repositories}: there "
                         f"are {len(train)} training repositories; expected at most that many (null: all)")
    folder = run / "data" / "ssr"
    if not run.done(DATA_STAGE):
        if parallel.is_writer():
            # the key keeps the recipe's name before its rename: the same bugs as the runs measured then
            seed = stage_seed(config.seed, 0, "bug_injection_data")
            _write_bugs(folder / "demonstrations", train[:b.demonstration_repositories], b.demonstrations,
                        seed, b.sandbox.isolation)
            _write_bugs(folder / "heldout", heldout, b.anchors.heldout_bugs, seed, b.sandbox.isolation)
        run.finish(DATA_STAGE, ["data/ssr/demonstrations", "data/ssr/heldout"])
    by_entry = {r.entry: r for r in train + heldout}
    anchors = [train[i % len(train)] for i in range(b.anchors.repositories)]
    return TaskData(train, heldout, read_bugs(folder / "demonstrations", by_entry),
                    read_bugs(folder / "heldout", by_entry), anchors)


def _write_bugs(folder, repos, n, seed, isolation):
    streams = [ssr_demonstrations.repository_demonstrations(r.entry, seed, isolation=isolation)
               for r in repos]
    demos = ssr_demonstrations.deal(streams, n)
    if not demos:
        raise ValueError(f"ssr: the mutation engine found no valid bug in "
                         f"{[r.entry for r in repos]}; expected repositories whose tests catch a mutant")
    folder.mkdir(parents=True, exist_ok=True)
    for i, demo in enumerate(demos):
        demo.write(folder / f"{i:03d}_{Path(demo.repository).name}")


def read_bugs(folder, by_entry):
    bugs = []
    for directory in sorted(p for p in Path(folder).iterdir() if p.is_dir()):
        artifact = read_artifact_dir(directory)
        repo = by_entry.get(artifact.repository) or Repository(
            artifact.repository, resolve_repository(artifact.repository, directory))
        bugs.append(Bug(artifact, (directory / "repair.diff").read_text(encoding="utf-8"), repo))
    return bugs
