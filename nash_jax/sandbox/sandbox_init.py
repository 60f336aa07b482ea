"""The first process inside the sandbox's namespaces (run by `unshare` as `python -I -S THIS SETUP
COMMAND...`): it makes the filesystem view with mount(2) calls, then runs COMMAND as the unprivileged
uid and stays PID 1 of the namespace until it ends, exiting with its status (128 + the signal that
killed it); when it exits, the kernel kills whatever the command left behind.

The view: mounts made private, a size-limited tmpfs for /tmp holding a copy of the repository
(/tmp/work, owned by the uid) and an empty /tmp/report (a small tmpfs of its own), /sys covered by
an empty tmpfs, every folder only root may enter on the interpreter's path covered by an empty tmpfs
with the interpreter's own folder put back, and every mount point read-only but the private /tmp. So nothing the tests write
reaches the host's disk, however many files they make; the one file that comes back is pytest's JUnit
report, copied by this process (as root, not following links, at most MAX_REPORT_BYTES) into the host
folder it holds open.

Standalone on purpose (the standard library only, no site): it runs before anything of the package
could be imported, as root, once per test run, and its start-up time is part of every run's.
"""

import ctypes
import json
import os
import shutil
import stat
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 32, 4096, 8192, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS = 38
# statvfs f_flag bits that a read-only remount must keep (they equal the MS_ values)
_KEPT_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC
MAX_REPORT_BYTES = 16 << 20

_libc = ctypes.CDLL(None, use_errno=True)


def mount(source, target, fstype=None, flags=0, data=None):
    code = _libc.mount(source.encode() if source else None, target.encode(),
                       fstype.encode() if fstype else None, ctypes.c_ulong(flags),
                       data.encode() if data else None)
    if code != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {source} on {target}: {os.strerror(errno)}")


def mount_points():
    """Every mount point in this namespace, once each (mountinfo's fifth field, octal escapes read)."""
    seen = []
    with open("/proc/self/mountinfo", "rb") as table:
        for line in table:
            raw = line.split(b" ")[4]
            point = raw.decode("unicode_escape").encode("latin-1").decode()
            if point not in seen:
                seen.append(point)
    return seen


def make_view(setup):
    """Build the view; returns an open descriptor of the host's report folder (hidden from then on)."""
    box, uid = setup["box"], setup["uid"]
    private = f"{box}/tmp"
    mount(None, "/", flags=MS_REC | MS_PRIVATE)
    # The host's report folder: a mount of its own, left writable, held open, hidden below /tmp later.
    host_report = f"{box}/report"
    mount(host_report, host_report, flags=MS_BIND)
    report = os.open(host_report, os.O_RDONLY | os.O_DIRECTORY)
    mount("nash-jax-sandbox", private, "tmpfs", 0, f"size={setup['tmp_bytes']},mode=1777")
    shutil.copytree(f"{box}/work", f"{private}/work", symlinks=True)
    os.mkdir(f"{private}/report")
    # a tmpfs of its own, so that tests filling /tmp leave pytest room for its report
    mount("nash-jax-report", f"{private}/report", "tmpfs", 0, f"size={MAX_REPORT_BYTES},mode=755")
    if uid is not None:
        for folder, names, files in os.walk(private):
            for name in [folder, *(os.path.join(folder, entry) for entry in names + files)]:
                os.chown(name, uid, uid, follow_symlinks=False)
    for folder in setup.get("kept_in_tmp", ()):  # a virtual environment below /tmp, read-only
        target = private + folder[len("/tmp"):]
        os.makedirs(target, exist_ok=True)
        mount(folder, target, flags=MS_BIND | MS_REC)
        mount(None, target, flags=MS_REMOUNT | MS_BIND | MS_RDONLY)
    staged = []
    for number, kept in enumerate(setup["kept"]):
        stage = f"{private}/keep{number}"
        os.mkdir(stage)
        mount(kept, stage, flags=MS_BIND)
        staged.append((stage, kept))
    for hidden in setup["hidden"]:
        mount("nash-jax-hidden", hidden, "tmpfs", 0, "size=1m,mode=755")
    for stage, kept in staged:
        os.makedirs(kept, exist_ok=True)
        mount(stage, kept, flags=MS_MOVE)
        os.rmdir(stage)
    mount("nash-jax-no-sys", "/sys", "tmpfs", MS_RDONLY, "size=4k,mode=555")
    for point in mount_points():
        if point in (private, host_report) or point.startswith((private + "/", "/sys/")):
            continue
        kept_flags = os.statvfs(point).f_flag & _KEPT_FLAGS
        mount(None, point, flags=MS_REMOUNT | MS_BIND | MS_RDONLY | kept_flags)
    mount(private, "/tmp", flags=MS_MOVE)
    return report


def deliver_report(report):
    """Copy /tmp/report/junit.xml into the host's report folder when it is a regular file of at most
    MAX_REPORT_BYTES (the tests could have put a link or a huge file there)."""
    try:
        source = os.open("/tmp/report/junit.xml", os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return
    with os.fdopen(source, "rb") as stream:
        info = os.fstat(stream.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_REPORT_BYTES:
            return
        data = stream.read(MAX_REPORT_BYTES + 1)
    target = os.open("junit.xml", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=report)
    with os.fdopen(target, "wb") as stream:
        stream.write(data)


def run_as(uid, command):
    """Start `command` as `uid` (no groups, no new privileges) in /tmp/work; wait for it as PID 1
    (reaping every orphan meanwhile) and return its status, 128 + signal when killed."""
    child = os.fork()
    if child == 0:
        try:
            os.chdir("/tmp/work")
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
                _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
            os.execv(command[0], command)
        finally:
            os._exit(127)
    while True:
        pid, status = os.wait()
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            return 128 - code if code < 0 else code


def main(argv):
    setup = json.loads(argv[1])
    report = make_view(setup)
    status = run_as(setup["uid"], argv[2:])
    deliver_report(report)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
