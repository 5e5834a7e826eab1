"""The sandbox worker's seccomp filter: a small ctypes binding over Debian's libseccomp.so.2.

Standard library only: the worker (``python -I -S``) loads this file by path before it drops its
privileges. The filter is an allow-list: the system calls a worker needs once set up (pipe I/O,
memory, signals, clocks, its own rlimits) pass; every other call fails with EPERM, so an escape that
got past the audit hook and the AST policy still cannot open a file (``/proc/<parent>/environ``
included), create a socket, fork, exec, ptrace or read another process's memory, change the
filesystem, or signal anything but itself. A 32-bit or x32 system call kills the process.
"""

from __future__ import annotations

import ctypes
import errno
import os

LIBRARY = "libseccomp.so.2"
ALLOW = 0x7FFF0000  # SCMP_ACT_ALLOW
KILL_PROCESS = 0x80000000  # SCMP_ACT_KILL_PROCESS
ERRNO = 0x00050000  # SCMP_ACT_ERRNO(e) = ERRNO | e
CMP_EQ = 4  # SCMP_CMP_EQ
ATTR_ACT_BADARCH = 2  # SCMP_FLTATR_ACT_BADARCH
ATTR_CTL_NNP = 3  # SCMP_FLTATR_CTL_NNP: set no_new_privs on load, so no privilege is needed to load

# What the worker's request loop, the interpreter and glibc's allocator call after setup; unknown names
# (another architecture's) are skipped. No open/openat/stat of paths, no fork/clone/exec, no ioctl, and no
# fcntl (F_SETOWN with O_ASYNC would have the kernel send SIGIO to another process).
ALLOWED = (
    "read", "readv", "write", "writev", "close", "fstat", "lseek", "poll", "ppoll", "getcwd",
    "brk", "mmap", "munmap", "mremap", "mprotect", "madvise",
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack", "restart_syscall",
    "futex", "sched_yield", "clock_gettime", "clock_getres", "gettimeofday", "time", "nanosleep", "clock_nanosleep",
    "getpid", "gettid", "getuid", "geteuid", "getgid", "getegid", "getrusage", "getrandom",
    "exit", "exit_group",
)
SELF_ONLY = ("kill", "tkill", "tgkill")  # allowed with arg0 == the worker's own pid (abort() signals itself)
OWN_LIMITS = ("prlimit64",)  # allowed with arg0 == 0: getrlimit/setrlimit of the worker itself, never of another pid


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


class SeccompError(OSError):
    """libseccomp is missing, or the kernel refused the filter."""


class Filter:
    """The worker's filter, built (library loaded, rules compiled) before setup and loaded at its very end."""

    def __init__(self, library: str = LIBRARY) -> None:
        try:
            lib = ctypes.CDLL(library, use_errno=True)
        except OSError as exc:
            raise SeccompError(f"{library} cannot be loaded ({exc}); install libseccomp2") from None
        lib.seccomp_init.restype = ctypes.c_void_p
        lib.seccomp_init.argtypes = [ctypes.c_uint32]
        lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
        lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
        lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                               ctypes.POINTER(_ArgCmp)]
        lib.seccomp_load.argtypes = [ctypes.c_void_p]
        lib.seccomp_release.argtypes = [ctypes.c_void_p]
        self._lib = lib
        self._ctx = lib.seccomp_init(ERRNO | errno.EPERM)
        if not self._ctx:
            raise SeccompError("seccomp_init failed")
        self._check(lib.seccomp_attr_set(self._ctx, ATTR_ACT_BADARCH, KILL_PROCESS), "seccomp_attr_set")
        self._check(lib.seccomp_attr_set(self._ctx, ATTR_CTL_NNP, 1), "seccomp_attr_set")
        self.rules = 0
        for name in ALLOWED:
            self._allow(name)
        for name in SELF_ONLY:
            self._allow(name, _ArgCmp(0, CMP_EQ, os.getpid(), 0))
        for name in OWN_LIMITS:
            self._allow(name, _ArgCmp(0, CMP_EQ, 0, 0))

    def _check(self, rc: int, what: str) -> None:
        if rc < 0:
            raise SeccompError(-rc, f"{what}: {os.strerror(-rc)}")

    def _allow(self, name: str, *conditions: _ArgCmp) -> None:
        number = self._lib.seccomp_syscall_resolve_name(name.encode())
        if number < 0:  # not a system call of this architecture
            return
        array = (_ArgCmp * len(conditions))(*conditions) if conditions else None
        self._check(self._lib.seccomp_rule_add_array(self._ctx, ALLOW, number, len(conditions), array), f"seccomp rule for {name}")
        self.rules += 1

    def load(self) -> None:
        """Apply the filter to this process (for good: no_new_privs is set and a filter cannot be removed)."""
        try:
            self._check(self._lib.seccomp_load(self._ctx), "seccomp_load")
        finally:
            self._lib.seccomp_release(self._ctx)
            self._ctx = None
