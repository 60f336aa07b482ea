"""File fingerprints: what the manifest records of each file a stage wrote, and how a recorded file is
checked again on resume (size and SHA-256; above DIGEST_MAX_BYTES, size and a hash of its ends)."""

import hashlib


def file_digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# Files up to this size are checked by SHA-256; larger ones (model shards) by size and modification
# time, so that resuming a 7B run does not re-read tens of gigabytes. A truncated file is caught either way.
DIGEST_MAX_BYTES = 64 * 2**20


def _identity(path):
    stat = path.stat()
    if stat.st_size <= DIGEST_MAX_BYTES:
        return file_digest(path)
    h = hashlib.sha256()
    with open(path, "rb") as f:  # the first and last MiB: a truncation or a rewrite shows, a copy not
        h.update(f.read(1 << 20))
        f.seek(max(stat.st_size - (1 << 20), 0))
        h.update(f.read(1 << 20))
    return f"ends:{h.hexdigest()}"


def same_identity(path, recorded):
    if recorded.startswith("mtime_ns:"):  # recorded by an earlier version
        return recorded == f"mtime_ns:{path.stat().st_mtime_ns}"
    return _identity(path) == recorded


def fingerprint(root, relative):
    """{relative file path: [size, sha256 or mtime]} of a file or of every file under a directory."""
    target = root / relative
    files = [target] if target.is_file() else sorted(p for p in target.rglob("*") if p.is_file())
    return {str(p.relative_to(root)): [p.stat().st_size, _identity(p)] for p in files}
