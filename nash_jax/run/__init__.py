"""One resumable run directory and what it owns; everything written is written whole or not at all.

    directory     RunDir: the lock (one writer at a time), the resolved config, the manifest of finished
                  stages (verified on resume: a damaged stage is redone with everything after it), and
                  the sweep of temporaries an interrupted write left
    fingerprints  what the manifest records of each file (size and SHA-256, or a hash of its ends)
    metrics       metrics.jsonl and TensorBoard (RunDir.log_metrics), read back by read_metrics
    tables        a stage's parquet tables
    checkpoints   orbax checkpoints of a training loop
    keys          the PRNG keys and host seeds of every draw, from (seed, iteration, stage, index)
    control       stop requests, crash points for the resume tests, the progress bar

The temp-file-and-rename writers themselves are nash_jax.files. nash_jax.runs names all of these as
`runs.X` for the callers that import it.
"""
