"""Outcomes per test from pytest's JUnit XML report (xunit1: each testcase names its file)."""

import xml.etree.ElementTree as ElementTree
from pathlib import Path

# pytest exit statuses that come with a complete report: all passed, some failed (collection errors
# among them: the sandbox runs with --continue-on-collection-errors), none collected. Interrupted (2),
# internal error (3) and usage error (4) leave the report incomplete even where it lists a few tests.
_REPORTING_STATUSES = (0, 1, 5)


def junit_outcomes(path, returncode):
    """(outcomes {test id: passed|failed|error|skipped}, problem or None, "memory" or None) from the
    report at `path`.

    A missing (or empty) or unreadable report is a problem (the run counts as failed); so is pytest's exit status
    2-4 (a collection error is an error of its file's id). The address-space limit shows as a test
    failing with MemoryError: the one thing read from a failure, its exception type."""
    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        return {}, f"pytest wrote no JUnit report (exit status {returncode})", None
    try:
        root = ElementTree.parse(path).getroot()
    except ElementTree.ParseError as err:
        return {}, f"pytest's JUnit report is not readable XML ({err})", None
    outcomes, memory = {}, None
    for case in root.iter("testcase"):
        test, outcome, element = _case_outcome(case)
        # A test that passed its call and failed its teardown is reported twice: keep the worse.
        if outcomes.get(test) not in ("failed", "error"):
            outcomes[test] = outcome
        if _raised_memory_error(element):
            memory = "memory"
    if returncode in _REPORTING_STATUSES:
        return outcomes, None, memory
    return outcomes, f"pytest stopped with exit status {returncode} (expected 0, 1 or 5)", memory


def _raised_memory_error(element):
    """pytest's failure message starts with the exception's type, and its text ends with
    "file.py:LINE: Type" (a test's source lines in between may name MemoryError harmlessly)."""
    if element is None:
        return False
    message = element.get("message") or ""
    lines = (element.text or "").rstrip().splitlines()
    return message.startswith("MemoryError") or bool(lines) and lines[-1].endswith(": MemoryError")


def _case_outcome(case):
    test = _test_id(case)
    for tag, outcome in (("error", "error"), ("failure", "failed"), ("skipped", "skipped")):
        element = case.find(tag)
        if element is not None:
            return test, outcome, element if tag != "skipped" else None
    return test, "passed", None


def _test_id(case):
    """"file.py::name" or "file.py::Class::name" from xunit1's file and dotted classname."""
    file = case.get("file") or ""
    name = case.get("name") or ""
    classname = case.get("classname") or ""
    module = file[:-3].replace("/", ".") if file.endswith(".py") else ""
    inner = classname[len(module) + 1:] if module and classname.startswith(module + ".") else ""
    if not classname:  # a collection error: the file's own id
        return file or name or "<collection>"
    return "::".join(part for part in (file, inner.replace(".", "::"), name) if part)
