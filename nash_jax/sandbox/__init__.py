"""Running untrusted, policy-written code: a repository's tests on a fresh copy, in namespaces, under
limits, with a scrubbed environment (`sandbox`); the namespace's first process that makes the filesystem
view (`sandbox_init`); the outcome of each test read from pytest's JUnit report (`sandbox_report`).
The security boundary, in one place to review: it imports nothing else of the package."""
