"""The operating-system layer around the sandbox worker: a bubblewrap namespace and a seccomp filter.

Both work for an unprivileged user, so the worker is contained also when the node does not run as
root (then the worker cannot drop to uid nobody). bubblewrap (``bwrap``) starts the worker in new
PID, network, IPC and UTS namespaces (and a user namespace unless we are root) with a filesystem of
read-only binds (the system libraries, the Python installation, this directory) and a private /proc:
other processes, their environments and the network are out of sight. The seccomp filter
(teachbot/sandbox/_sandbox_seccomp.py, loaded by the worker itself before it says ready) refuses
files, sockets, processes, signals to others and ptrace at the system-call level, namespaces or not.

config/sandbox.yaml's ``isolation:`` block picks the layers; with none available the worker is not
started unless ``allow_no_os_layer: true`` says so explicitly.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from teachbot.config import dataclass_block, load_yaml
from teachbot.errors import ConfigError
from teachbot.paths import config_path

HERE = Path(__file__).resolve().parent  # the worker script and the modules it loads beside it, bound read-only into bwrap
SECCOMP_LIBRARY = "libseccomp.so.2"
OS_LAYERS = ("auto", "bwrap", "seccomp", "none")
PROBE_TIMEOUT = 20.0  # seconds for bwrap to start `python -c pass` when probing (slow CI machines)
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
_SECCOMP_HINT = "install libseccomp2 (apt-get install libseccomp2)"


class SandboxIsolationError(RuntimeError):
    """The OS layer that config/sandbox.yaml asks for is not available; the message says what to install or set."""


@dataclass(frozen=True)
class IsolationConfig:
    """The 'isolation:' block of config/sandbox.yaml: which OS layers contain the worker."""

    os_layer: str = "auto"  # auto (each available one) | bwrap | seccomp | none
    allow_no_os_layer: bool = False  # start a worker with rlimits and the audit hook only, if no OS layer applies

    def __post_init__(self) -> None:
        if self.os_layer not in OS_LAYERS:
            raise ConfigError(f"sandbox config: isolation.os_layer must be one of {', '.join(OS_LAYERS)}, got {self.os_layer!r}")
        if type(self.allow_no_os_layer) is not bool:
            raise ConfigError(f"sandbox config: isolation.allow_no_os_layer must be true or false, got {self.allow_no_os_layer!r}")
        if self.os_layer == "none" and not self.allow_no_os_layer:
            raise ConfigError("sandbox config: isolation.os_layer: none runs LLM code without an OS layer; "
                              "set isolation.allow_no_os_layer: true to mean it")

    @classmethod
    def from_config(cls, raw: Mapping[str, Any]) -> IsolationConfig:
        """From the 'isolation:' block of config/sandbox.yaml (the whole file is accepted too)."""
        block = raw.get("isolation", {}) if isinstance(raw, Mapping) and ("limits" in raw or "isolation" in raw) else raw
        return cls(**dataclass_block(block, cls, "sandbox", "isolation"))

    @classmethod
    def deployed(cls) -> IsolationConfig:
        """The block in the deployed config/sandbox.yaml (read once per process); the defaults if there is no file."""
        return _deployed()


@functools.cache
def _deployed() -> IsolationConfig:
    path = config_path("sandbox.yaml")
    return IsolationConfig.from_config(load_yaml(path)) if path.is_file() else IsolationConfig()


@dataclass(frozen=True)
class Detected:
    """What this machine offers: a working bwrap command prefix, libseccomp; or why not."""

    bwrap: tuple[str, ...] = ()  # argv before the Python executable; empty when bwrap is unusable
    bwrap_problem: str = ""
    seccomp_problem: str = ""


def python_executable() -> str:
    """The interpreter the worker runs on: the real file, so bwrap need not bind the virtual environment."""
    return os.path.realpath(sys.executable)


def bwrap_command(bwrap: str, python: str) -> list[str]:
    """bwrap's argv up to the worker's executable: fresh namespaces, read-only system and Python paths, private /proc."""
    if os.geteuid() == 0:
        # Root needs no user namespace; without one the worker's own setuid to nobody is a real one.
        namespaces = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    else:
        namespaces = ["--unshare-all"]
    # The fresh /proc, /dev and /tmp first: a bind below (a checkout under /tmp) must land on top of them.
    argv = [bwrap, *namespaces, "--new-session", "--clearenv", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    if os.path.isfile("/etc/ld.so.cache"):
        argv += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    binds = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.base_exec_prefix), python, str(HERE)}
    for path in sorted(binds):
        if not any(path == d or path.startswith(d + "/") for d in _SYSTEM_DIRS):
            argv += ["--ro-bind", path, path]
    return argv + ["--chdir", "/"]


def _probe_bwrap(python: str) -> tuple[tuple[str, ...], str]:
    """(prefix, '') when bwrap can start this Python here, else ((), why not)."""
    bwrap = shutil.which("bwrap") or ("/usr/bin/bwrap" if os.access("/usr/bin/bwrap", os.X_OK) else None)
    if bwrap is None:
        return (), "bwrap is not installed"
    prefix = bwrap_command(bwrap, python)
    try:
        done = subprocess.run([*prefix, python, "-I", "-S", "-c", "pass"], capture_output=True, timeout=PROBE_TIMEOUT,
                              env={}, stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return (), f"bwrap could not be started ({exc})"
    if done.returncode != 0:
        # Typically user namespaces are off for unprivileged users (kernel.unprivileged_userns_clone=0,
        # user.max_user_namespaces=0, or an AppArmor userns restriction).
        why = " ".join(done.stderr.decode(errors="replace").split())[:300] or f"status {done.returncode}"
        return (), f"bwrap does not work here ({why})"
    return tuple(prefix), ""


def _seccomp_problem() -> str:
    """'' when libseccomp loads and the kernel has seccomp, else why not."""
    try:
        ctypes.CDLL(SECCOMP_LIBRARY)
    except OSError as exc:
        return f"{SECCOMP_LIBRARY} cannot be loaded ({exc})"
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return ""  # no /proc to ask: the worker finds out when it loads the filter
    return "" if "\nSeccomp:" in status else "the kernel has no seccomp support"


@functools.cache
def _detect(python: str, euid: int) -> Detected:
    prefix, bwrap_problem = _probe_bwrap(python)
    return Detected(prefix, bwrap_problem, _seccomp_problem())


def detect() -> Detected:
    """What this machine offers, probed once per process (and user id)."""
    return _detect(python_executable(), os.geteuid())


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, read from /proc (children before grandchildren)."""
    found, queue = [], [pid]
    while queue:
        parent = queue.pop(0)
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                children = Path(f"/proc/{parent}/task/{task}/children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                if child not in found:
                    found.append(child)
                    queue.append(child)
    return found


class _BwrapPopen(subprocess.Popen):  # type: ignore[type-arg]
    """bwrap reports a child killed by signal n as status 128 + n; turn that back into -n like a direct child.

    bwrap forks: the process started here watches a second bwrap, the init of the new PID namespace, which
    runs the worker. SIGKILL to the first alone orphans the other two, and a worker in a busy loop would
    spin on forever; so ``kill()`` kills the whole tree (the namespace's init taking the worker with it).
    """

    def kill(self) -> None:
        if self.returncode is not None:
            return
        below = descendants(self.pid)  # read before the first kill: orphans are no longer found under it
        super().kill()
        for pid in below:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def _from_bwrap(self, code: int) -> int:
        if 128 < code <= 128 + 64:
            self.returncode = code = 128 - code
        return code

    def poll(self) -> int | None:
        code = super().poll()
        return None if code is None else self._from_bwrap(code)

    def wait(self, timeout: float | None = None) -> int:
        return self._from_bwrap(super().wait(timeout))


@dataclass(frozen=True)
class OsPlan:
    """How to start a worker: under bwrap or not, with the seccomp filter or not."""

    config: IsolationConfig
    bwrap: tuple[str, ...] = ()
    seccomp: bool = False

    @property
    def layers(self) -> list[str]:
        return ["bwrap"] * bool(self.bwrap) + ["seccomp"] * self.seccomp

    def argv(self, args: Sequence[str], binds: Sequence[str] = ()) -> list[str]:
        """The command for ``python -I -S ARGS`` inside the planned namespaces; ``binds``: more files it reads."""
        if not self.bwrap:
            return [sys.executable, "-I", "-S", *args]
        extra = [a for path in binds if not Path(path).resolve().is_relative_to(HERE) for a in ("--ro-bind", path, path)]
        return [*self.bwrap, *extra, python_executable(), "-I", "-S", *args]

    def spawn(self, script: str, args: Sequence[str], pass_fds: Sequence[int]) -> subprocess.Popen[bytes]:
        """Start ``python -I -S SCRIPT ARGS`` with an empty environment in a session of its own."""
        popen = _BwrapPopen if self.bwrap else subprocess.Popen
        return popen(self.argv([script, *args], binds=[script]), pass_fds=tuple(pass_fds), stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={}, start_new_session=True)

    def applied(self, report: Mapping[str, Any]) -> list[str]:
        """The layers in force, given the worker's ready report; SandboxIsolationError if they fall short of the config."""
        layers = ["bwrap"] * bool(self.bwrap) + ["seccomp"] * (report.get("seccomp") is True)
        problem = ""
        if self.seccomp and "seccomp" not in layers:
            problem = f"the worker could not load its seccomp filter ({report.get('seccomp_error', 'no report')})"
            if self.config.os_layer == "seccomp":
                raise SandboxIsolationError(f"isolation.os_layer: seccomp, but {problem}")
        if not layers and not self.config.allow_no_os_layer:
            raise SandboxIsolationError(_refusal(problem or "no OS layer applied", _SECCOMP_HINT))
        return layers


def _bwrap_hint(problem: str) -> str:
    if "not installed" in problem:
        return "install bubblewrap (apt-get install bubblewrap; `make setup` does this when run as root)"
    return ("let bwrap create namespaces (unprivileged user namespaces on: sysctl kernel.unprivileged_userns_clone=1 "
            "where it exists, user.max_user_namespaces > 0, no AppArmor restriction on them)")


def _refusal(why: str, hints: str) -> str:
    return (f"the sandbox worker was not started: {why}; {hints}, or set isolation.allow_no_os_layer: true "
            "in config/sandbox.yaml to run LLM code with rlimits and the audit hook only")


def plan(config: IsolationConfig) -> OsPlan:
    """The layers to apply under ``config`` on this machine; SandboxIsolationError when the config cannot be met."""
    if config.os_layer == "none":
        return OsPlan(config)
    found = detect()
    use_bwrap = config.os_layer in ("auto", "bwrap")
    use_seccomp = config.os_layer in ("auto", "seccomp")
    if config.os_layer == "bwrap" and not found.bwrap:
        raise SandboxIsolationError(f"isolation.os_layer: bwrap, but {found.bwrap_problem}; {_bwrap_hint(found.bwrap_problem)}, "
                                    "or set isolation.os_layer: auto in config/sandbox.yaml")
    if config.os_layer == "seccomp" and found.seccomp_problem:
        raise SandboxIsolationError(f"isolation.os_layer: seccomp, but {found.seccomp_problem}; {_SECCOMP_HINT}, "
                                    "or set isolation.os_layer: auto in config/sandbox.yaml")
    result = OsPlan(config, found.bwrap if use_bwrap else (), use_seccomp and not found.seccomp_problem)
    if not result.layers and not config.allow_no_os_layer:
        hints = f"{_bwrap_hint(found.bwrap_problem)} and/or {_SECCOMP_HINT}"
        raise SandboxIsolationError(_refusal(f"{found.bwrap_problem} and {found.seccomp_problem}", hints))
    return result
