"""The first process of a sandboxed run (started as `python -I -S THIS SETUP`, SETUP a JSON object):
inside bubblewrap's namespaces it copies the repository (bound read-only at SETUP["source"]) into the
private, size-limited /tmp, starts pytest there under the rlimits, counts the run's processes while it
waits, and hands back pytest's JUnit report and the run's status through two descriptors the host
opened for it (the only files that leave the sandbox).

The process count is this process's own: the kernel does not apply RLIMIT_NPROC to a uid that maps to
root outside (bubblewrap started by root), so it lists the PID namespace's /proc every POLL_S and, past
SETUP["processes"], kills every process of the namespace. It makes itself undumpable, so that the tests
(the same uid) cannot reach its descriptors through /proc. Killing it ends the run: bubblewrap's PID 1
exits with it, and the kernel kills whatever is left in the namespace.

Without namespaces (isolation=best_effort where bubblewrap cannot make them) the same process runs on
the host with SETUP["pid_namespace"] false: the copy lands in the host folder SETUP["work"], nothing is
counted, and what the tests leave running outlives the run.

Standalone on purpose (the standard library only, no site): it runs before anything of the package
could be imported, once per test run, and its start-up time is part of every run's.
"""

import ctypes
import json
import os
import resource
import shutil
import signal
import stat
import sys
import time

PR_SET_DUMPABLE = 4
MAX_REPORT_BYTES = 16 << 20
POLL_S = 0.02
# PID 1 (bubblewrap's reaper) and this process are not the run's
_OWN_PROCESSES = 2


def set_limits(limits):
    """The rlimits of the tests' process (inherited by whatever it starts)."""
    cpu = limits["cpu_s"]
    for name, value in (("RLIMIT_CPU", (cpu, cpu + 1)), ("RLIMIT_AS", limits["memory_bytes"]),
                        ("RLIMIT_NPROC", limits["processes"]), ("RLIMIT_FSIZE", limits["file_bytes"]),
                        ("RLIMIT_NOFILE", limits["open_files"]), ("RLIMIT_CORE", 0)):
        pair = value if isinstance(value, tuple) else (value, value)
        resource.setrlimit(getattr(resource, name), pair)


def start(setup):
    """Fork pytest (SETUP["command"]) in the copy, under the rlimits; returns its pid."""
    child = os.fork()
    if child == 0:
        try:
            os.chdir(setup["work"])
            set_limits(setup["limits"])
            os.execve(setup["command"][0], setup["command"], dict(os.environ))
        finally:
            os._exit(127)
    return child


def count_processes():
    return sum(1 for name in os.listdir("/proc") if name.isdigit()) - _OWN_PROCESSES


def wait(child, setup):
    """(pytest's status, 128 + signal when killed; "processes" or None) once pytest has ended."""
    cap = setup["limits"]["processes"] if setup["pid_namespace"] else None
    while True:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            return (128 - code if code < 0 else code), None
        if pid:
            continue  # an orphan that was reparented here
        if cap is not None and count_processes() > cap:
            os.kill(-1, signal.SIGKILL)  # every process of the namespace but PID 1 and this one
            os.waitpid(child, 0)
            return 128 + signal.SIGKILL, "processes"
        time.sleep(POLL_S)


def deliver_report(path, report_fd):
    """Copy pytest's report into the host's file when it is a regular file of at most
    MAX_REPORT_BYTES (the tests could have put a link or a huge file there)."""
    try:
        source = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return
    with os.fdopen(source, "rb") as stream:
        info = os.fstat(stream.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_REPORT_BYTES:
            return
        data = stream.read(MAX_REPORT_BYTES + 1)
    os.write(report_fd, data[:MAX_REPORT_BYTES])


def main(argv):
    if argv[1] == "--probe":  # bwrap.probe: the interpreter starts inside the namespaces
        return 0
    setup = json.loads(argv[1])
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    report_fd, status_fd = setup["report_fd"], setup["status_fd"]
    for fd in (report_fd, status_fd):  # not pytest's
        os.set_inheritable(fd, False)
    shutil.copytree(setup["source"], setup["work"], symlinks=True)
    os.makedirs(os.path.dirname(setup["report"]), exist_ok=True)
    returncode, limit = wait(start(setup), setup)
    deliver_report(setup["report"], report_fd)
    os.write(status_fd, json.dumps({"returncode": returncode, "limit": limit}).encode())
    return returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv))
