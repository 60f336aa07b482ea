"""The first process inside the sandbox's namespaces (run by `unshare` as `python -I -S THIS SETUP
COMMAND...`): it makes the filesystem view with mount(2) calls, then runs COMMAND as the unprivileged
uid and stays PID 1 of the namespace until it ends, exiting with its status (128 + the signal that
killed it); when it exits, the kernel kills whatever the command left behind.

The view: mounts made private, a tmpfs for /tmp holding the repository copy (/tmp/work) and the
report folder (/tmp/report) bound from the host, /sys covered by an empty tmpfs, every folder only
root may enter on the interpreter's path covered by an empty tmpfs with the interpreter's own folder
put back, and every mount point read-only except the private /tmp.

Standalone on purpose (the standard library only, no site): it runs before anything of the package
could be imported, as root, once per test run, and its start-up time is part of every run's.
"""

import ctypes
import json
import os
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 32, 4096, 8192, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS = 38
# statvfs f_flag bits that a read-only remount must keep (they equal the MS_ values)
_KEPT_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC

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
    box = setup["box"]
    private = f"{box}/tmp"
    mount(None, "/", flags=MS_REC | MS_PRIVATE)
    mount("nash-jax-sandbox", private, "tmpfs", 0, f"size={setup['tmp_bytes']},mode=1777")
    for name in ("work", "report"):
        os.mkdir(f"{private}/{name}")
        mount(f"{box}/{name}", f"{private}/{name}", flags=MS_BIND)
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
        if point == private or point.startswith(private + "/") or point.startswith("/sys/"):
            continue
        kept_flags = os.statvfs(point).f_flag & _KEPT_FLAGS
        mount(None, point, flags=MS_REMOUNT | MS_BIND | MS_RDONLY | kept_flags)
    mount(private, "/tmp", flags=MS_MOVE)


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
    make_view(setup)
    return run_as(setup["uid"], argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
