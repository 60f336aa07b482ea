"""`nash-jax ssr-validate ARTIFACT_DIR [--json] [--isolation required|best_effort]`: the seven checks
on one saved artifact, printed.

Exit status 0 when every check passes, 1 when one fails (named on the last line), 2 when the artifact
cannot be read (raised as ValueError for the command's one-line error).
"""

import json
import sys

from nash_jax.sandbox.sandbox import SandboxLimits, require
from nash_jax.tasks.code.ssr_artifact import read_artifact_dir, resolve_repository
from nash_jax.tasks.code.ssr_checks import CHECKS, CheckSettings, validate


def ssr_validate(artifact_dir, *, as_json=False, out=print, isolation="required"):
    """Validate the artifact in `artifact_dir`; returns the exit status (0 valid, 1 a check failed).
    Where the sandbox cannot make its namespaces, `isolation="required"` stops before any test runs
    (SandboxUnavailable, one line); "best_effort" says so on stderr and runs without them."""
    line = require(isolation, opt_out="--isolation best_effort")
    if line is not None:
        print(line, file=sys.stderr)
    artifact = read_artifact_dir(artifact_dir)
    repository = resolve_repository(artifact.repository, artifact_dir)
    validation = validate(artifact, repository, CheckSettings(limits=SandboxLimits(isolation=isolation)))
    if as_json:
        out(json.dumps({"artifact": str(artifact_dir), "repository": str(repository),
                        **validation.to_json()}))
    else:
        for line in _table(artifact_dir, repository, validation):
            out(line)
    return 0 if validation.valid else 1


def _table(artifact_dir, repository, validation):
    yield f"artifact {artifact_dir} (repository {repository})"
    active = [name for name, on in validation.protections.items() if on is True]
    inactive = [name for name, on in validation.protections.items() if on is False]
    yield (f"sandbox: {', '.join(active)}; rlimits {', '.join(validation.protections['rlimits'])}"
           + (f"; not available: {', '.join(inactive)}" if inactive else ""))
    ran = {check.name: check for check in validation.checks}
    for name in CHECKS:
        check = ran.get(name)
        mark = "pass" if check and check.passed else "FAIL" if check else "-"
        yield f"  {mark:4}  {name:26} {check.detail if check else 'not run'}"
    for run in validation.runs:
        yield f"  run {run['label']}: {json.dumps({k: v for k, v in run.items() if k != 'label'})}"
    if validation.valid:
        yield "valid: all seven checks pass"
    else:
        yield f"invalid: {validation.failure} failed"
