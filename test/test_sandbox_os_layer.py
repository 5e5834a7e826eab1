"""The sandbox worker's OS layer (teachbot.sandbox.os_layer): bubblewrap namespaces and a seccomp filter.

The attack tests run raw Python in a worker set up exactly as the real one is (the same command from
the OsPlan, the same harden() with its seccomp filter), but with no AST policy, no restricted builtins
and no audit hook: only the OS layer and the rlimits stand. The worker's parent is a separate "node"
process started with a fake secret in its environment; it runs the attacks under each layer, and under
no layer as the control that proves each attack works when nothing stops it. As root this runs twice:
as root (the worker drops to nobody) and as uid nobody (then the worker cannot change uid, the case the
OS layer exists for); as any other user it runs once, as that user.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from timing import deadline, pytest_timeout, timeout

from teachbot.config import load_yaml
from teachbot.errors import ConfigError
from teachbot.paths import config_path
from teachbot.sandbox import executor as sandbox
from teachbot.sandbox import os_layer
from teachbot.sandbox.executor import RunResult, SandboxExecutor, SandboxLimits
from teachbot.sandbox.os_layer import Detected, IsolationConfig, OsPlan, SandboxIsolationError

SECRET_VAR = "TEACHBOT_OS_LAYER_TEST_SECRET"
SECRET = f"secret-{uuid.uuid4().hex}"
NOBODY = 65534
LIMITS = SandboxLimits(wall_time=3.0, cpu_time=1.0, memory_mb=256)
ATTACKS = ("signal_sibling", "signal_parent", "sigio_owner", "tcp_connect", "unix_connect", "environ_parent", "environ_ppid", "fork",
           "ptrace")

# Runs in the worker process: set up like the real worker, then attack with raw Python.
DRIVER = r"""
import ctypes, fcntl, importlib.util, json, os, signal, socket, sys
sibling, parent, port, abstract, worker_path, seccomp = sys.argv[1:7]
spec = importlib.util.spec_from_file_location("w", worker_path)
w = importlib.util.module_from_spec(spec)
spec.loader.exec_module(w)
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
r, wr = os.pipe()
report = w.harden(r, wr, 256, seccomp=seccomp == "1")
# From here on raw Python: no AST policy, no audit hook. An attacker frees a descriptor (RLIMIT_NOFILE is full).
os.close(0)

def attempt(f):
    try:
        result = f()
    except BaseException as exc:
        return type(exc).__name__
    return result if isinstance(result, str) else "ALLOWED"  # a file's text, or why ptrace failed

def connect(family, address):
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.settimeout(2)
        s.connect(address)
    finally:
        s.close()

def read(path):
    with open(path, "rb") as f:
        return f.read().decode("latin-1")

def fork():
    if os.fork() == 0:
        os._exit(0)

def ptrace():
    if libc.ptrace(16, int(sibling), None, None) == 0:  # PTRACE_ATTACH
        libc.ptrace(17, int(sibling), None, None)  # PTRACE_DETACH
        return None
    return os.strerror(ctypes.get_errno())

out = {
    "report": report,
    "signal_sibling": attempt(lambda: os.kill(int(sibling), signal.SIGTERM)),
    "signal_parent": attempt(lambda: os.kill(int(parent), 0)),
    "sigio_owner": attempt(lambda: fcntl.fcntl(4, fcntl.F_SETOWN, int(sibling))),  # SIGIO to the sibling on I/O
    "tcp_connect": attempt(lambda: connect(socket.AF_INET, ("127.0.0.1", int(port)))),
    "unix_connect": attempt(lambda: connect(socket.AF_UNIX, "\0" + abstract)),
    "socket_inet": attempt(lambda: socket.socket(socket.AF_INET).close()),
    "socket_unix": attempt(lambda: socket.socket(socket.AF_UNIX).close()),
    "environ_parent": attempt(lambda: read(f"/proc/{parent}/environ")),
    "environ_ppid": attempt(lambda: read(f"/proc/{os.getppid()}/environ")),
    "fork": attempt(fork),
    "ptrace": attempt(ptrace),
}
sys.stdout.write(json.dumps(out))
"""

# Runs as the node: the worker's parent, with the secret in the environment it was started with.
NODE = r"""
import json, os, socket, subprocess, sys
from teachbot.sandbox import executor as sandbox
from teachbot.sandbox import os_layer
from teachbot.sandbox.os_layer import IsolationConfig, SandboxIsolationError
from teachbot.sandbox.executor import SandboxExecutor, SandboxLimits

DRIVER = sys.argv[1]
tcp = socket.socket()
tcp.bind(("127.0.0.1", 0))
tcp.listen(8)
abstract = f"teachbot-os-layer-test-{os.getpid()}"
unix = socket.socket(socket.AF_UNIX)
unix.bind("\0" + abstract)
unix.listen(8)

def sibling():  # a process of the worker's uid to signal and trace (the worker drops to nobody under root)
    ids = {"user": 65534, "group": 65534, "extra_groups": []} if os.geteuid() == 0 else {}
    return subprocess.Popen(["sleep", "60"], **ids)

result = {"uid": os.geteuid()}
sib = sibling()
for mode in ("auto", "seccomp", "bwrap", "none"):
    try:
        plan = os_layer.plan(IsolationConfig(mode, allow_no_os_layer=mode == "none"))
    except SandboxIsolationError as exc:
        result[mode] = {"unavailable": str(exc)}
        continue
    args = [str(sib.pid), str(os.getpid()), str(tcp.getsockname()[1]), abstract, str(sandbox.WORKER_SCRIPT), str(int(plan.seccomp))]
    done = subprocess.run(plan.argv(["-c", DRIVER, *args]), env={}, capture_output=True, text=True, timeout=60)
    try:
        outcome = json.loads(done.stdout)
    except ValueError:
        outcome = {"broken": f"status {done.returncode}: {done.stdout[-500:]} {done.stderr[-2000:]}"}
    try:
        sib.wait(timeout=0.2)
    except subprocess.TimeoutExpired:
        pass
    result[mode] = {"layers": plan.layers, "outcome": outcome, "sibling_alive": sib.poll() is None}
    if sib.poll() is not None:
        sib = sibling()
sib.kill()
with SandboxExecutor({"say": print}, SandboxLimits(wall_time=3.0)) as ex:
    result["executor"] = {"isolation": ex.isolation, "run": ex.run("1 + 1").outputs}
print(json.dumps(result))
"""


def _node(argv_prefix: list[str]) -> dict:
    """Run NODE with the secret in its initial environment; its JSON report."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), SECRET_VAR: SECRET, "HOME": "/",
           "PYTHONPATH": str(Path(sandbox.__file__).resolve().parents[2])}  # the teachbot under test
    done = subprocess.run([*argv_prefix, sys.executable, "-c", NODE, DRIVER], env=env, capture_output=True, text=True,
                          timeout=pytest_timeout(180), check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _assert_contained(report: dict, same_uid_parent: bool) -> None:
    """Every available layer stops every attack; the control (no layer) shows the attacks are real."""
    layered = [mode for mode in ("auto", "seccomp", "bwrap") if "unavailable" not in report[mode]]
    assert "auto" in layered and "seccomp" in report["auto"]["layers"], report["auto"]
    for mode in layered:
        entry = report[mode]
        outcome = entry["outcome"]
        assert set(ATTACKS) <= set(outcome), (mode, outcome)
        assert all(outcome[attack] != "ALLOWED" for attack in ATTACKS), (mode, outcome)
        assert entry["sibling_alive"], (mode, outcome)
        assert SECRET not in json.dumps(outcome), (mode, outcome)
        if "seccomp" in entry["layers"]:
            assert outcome["report"]["seccomp"] is True
            assert outcome["socket_inet"] == outcome["socket_unix"] == "PermissionError", (mode, outcome)
    control = report["none"]["outcome"]
    assert {control[attack] for attack in ("tcp_connect", "unix_connect", "signal_sibling", "sigio_owner")} == {"ALLOWED"}, control
    assert not report["none"]["sibling_alive"]
    if same_uid_parent:  # the worker could not drop to nobody: nothing but the OS layer keeps the secret
        assert SECRET in control["environ_parent"] and control["signal_parent"] == "ALLOWED", control
    executor = report["executor"]
    assert executor["run"] == ["2"] and executor["isolation"]["os_layers"] == report["auto"]["layers"], executor


def test_attacks_fail_under_each_os_layer_as_this_user() -> None:
    report = _node([])
    _assert_contained(report, same_uid_parent=os.geteuid() != 0)


def _world_usable(path: Path) -> bool:
    """Every directory above ``path`` is searchable by others, and ``path`` readable."""
    path = path.resolve()
    return all(p.stat().st_mode & stat.S_IXOTH for p in path.parents) and bool(path.stat().st_mode & stat.S_IROTH)


def _as_nobody(tmp_path: Path) -> list[str]:
    """A command prefix that runs as uid/gid nobody. A Python installation under a directory nobody cannot enter
    (pyenv under /root) is made reachable in a private mount namespace: a tmpfs over that directory holding
    only the installation, bound back at its own path."""
    base = Path(os.path.realpath(sys.base_prefix))
    locked = [p for p in reversed(base.parents) if not p.stat().st_mode & stat.S_IXOTH]
    setpriv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
    if not locked:
        return setpriv
    top, keep = locked[0], tmp_path / "python"
    keep.mkdir()
    script = textwrap.dedent(f"""
        set -e
        mount --bind {base} {keep}
        mount -t tmpfs -o mode=755 tmpfs {top}
        mkdir -p {base}
        mount --bind {keep} {base}
        exec "$@"
    """)
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *setpriv]


def _nobody_or_skip(tmp_path: Path) -> list[str]:
    """_as_nobody's prefix, or a skip when the checkout cannot be used by another user."""
    repo = Path(sandbox.__file__).resolve().parents[3]
    if not all(_world_usable(p) for p in (repo / "src", Path(sys.executable).parent, sandbox.WORKER_SCRIPT)):
        pytest.skip(f"{repo} or its virtual environment is not readable by other users")
    return _as_nobody(tmp_path)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can start a process as another user; this user's run is the test above")
def test_attacks_fail_under_each_os_layer_as_an_unprivileged_user(tmp_path: Path) -> None:
    report = _node(_nobody_or_skip(tmp_path))
    assert report["uid"] == NOBODY and report["executor"]["isolation"]["uid"] == NOBODY
    _assert_contained(report, same_uid_parent=True)


# Runs COMMAND... as root of a new user namespace (ids 0-65535 mapped to themselves) whose limit on nested
# user namespaces is 0: as where unprivileged user namespaces are off, bwrap cannot work for anyone there.
NO_USERNS = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
go_r, go_w = os.pipe()
mapped_r, mapped_w = os.pipe()
pid = os.fork()
if pid == 0:
    if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
        os._exit(111)
    os.write(go_w, b"x")
    os.read(mapped_r, 1)
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    with open("/proc/sys/user/max_user_namespaces", "w") as limit:
        limit.write("0")
    os.execvp(sys.argv[1], sys.argv[1:])
os.read(go_r, 1)
for name in ("uid_map", "gid_map"):  # several ids: written from the parent namespace
    with open(f"/proc/{pid}/{name}", "w") as f:
        f.write("0 0 65536")
os.write(mapped_w, b"x")
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to set up a user namespace without user namespaces inside")
def test_without_user_namespaces_bwrap_is_detected_unusable_and_seccomp_holds(tmp_path: Path) -> None:
    report = _node([sys.executable, "-I", "-c", NO_USERNS, *_nobody_or_skip(tmp_path)])
    assert "bwrap does not work here" in report["bwrap"]["unavailable"], report["bwrap"]
    assert "user namespaces" in report["bwrap"]["unavailable"], report["bwrap"]
    assert report["auto"]["layers"] == ["seccomp"] and report["executor"]["isolation"]["os_layers"] == ["seccomp"]
    _assert_contained(report, same_uid_parent=True)


def test_isolation_config_block() -> None:
    raw = load_yaml(config_path("sandbox.yaml"))
    assert IsolationConfig.from_config(raw) == IsolationConfig.from_config(raw["isolation"]) == IsolationConfig()
    assert IsolationConfig.from_config({"os_layer": "seccomp"}).os_layer == "seccomp"
    with pytest.raises(ConfigError, match="unknown key"):
        IsolationConfig.from_config({"os_layers": "auto"})
    with pytest.raises(ConfigError, match="must be one of"):
        IsolationConfig.from_config({"os_layer": "docker"})
    with pytest.raises(ConfigError, match="allow_no_os_layer: true"):
        IsolationConfig(os_layer="none")
    with pytest.raises(ConfigError, match="true or false"):
        IsolationConfig(allow_no_os_layer="yes")  # type: ignore[arg-type]


NOTHING = Detected((), "bwrap is not installed", "libseccomp.so.2 cannot be loaded (test)")


def test_no_os_layer_refuses_to_start_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os_layer, "detect", lambda: NOTHING)
    with pytest.raises(SandboxIsolationError) as refused:
        SandboxExecutor({"say": print}, LIMITS, isolation_config=IsolationConfig())
    message = str(refused.value)
    assert "bwrap is not installed" in message and "libseccomp.so.2 cannot be loaded" in message
    assert "apt-get install bubblewrap" in message and "isolation.allow_no_os_layer: true" in message
    with pytest.raises(SandboxIsolationError, match="os_layer: bwrap, but bwrap is not installed"):
        SandboxExecutor({"say": print}, LIMITS, isolation_config=IsolationConfig("bwrap"))
    with pytest.raises(SandboxIsolationError, match="os_layer: seccomp, but libseccomp.so.2"):
        SandboxExecutor({"say": print}, LIMITS, isolation_config=IsolationConfig("seccomp"))
    with SandboxExecutor({"say": print}, LIMITS, isolation_config=IsolationConfig(allow_no_os_layer=True)) as ex:
        assert ex.isolation["os_layers"] == [] and "seccomp" not in ex.isolation
        assert ex.run("1 + 1") == RunResult(outputs=["2"])


def test_a_worker_that_does_not_load_its_filter_is_refused() -> None:
    """The parent believes the worker's report only as far as it goes: no 'seccomp: true', no seccomp layer."""
    failed = {"seccomp_error": "seccomp_load: Invalid argument"}
    with pytest.raises(SandboxIsolationError, match="could not load its seccomp filter.*Invalid argument"):
        OsPlan(IsolationConfig("seccomp"), seccomp=True).applied(failed)
    with pytest.raises(SandboxIsolationError, match="allow_no_os_layer"):
        OsPlan(IsolationConfig(), seccomp=True).applied(failed)
    assert OsPlan(IsolationConfig(), bwrap=("bwrap",), seccomp=True).applied(failed) == ["bwrap"]
    assert OsPlan(IsolationConfig(allow_no_os_layer=True), seccomp=True).applied(failed) == []
    assert OsPlan(IsolationConfig(), bwrap=("bwrap",), seccomp=True).applied({"seccomp": True}) == ["bwrap", "seccomp"]


def test_a_signal_that_kills_a_worker_under_bwrap_reads_as_that_signal(tmp_path: Path) -> None:
    """bwrap exits 128 + n for a child killed by signal n; the executor's kill reports need -n (SIGXCPU = CPU limit)."""
    if not os_layer.detect().bwrap:
        pytest.skip(f"bubblewrap is not usable here: {os_layer.detect().bwrap_problem}")
    script = tmp_path / "suicide.py"
    script.write_text("import os, signal\nos.kill(os.getpid(), signal.SIGXCPU)\n")
    proc = OsPlan(IsolationConfig("bwrap"), bwrap=os_layer.detect().bwrap).spawn(str(script), [], ())
    assert proc.wait(timeout=timeout(30)) == -signal.SIGXCPU and proc.poll() == -signal.SIGXCPU


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting for its reaper counts as dead)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.mark.parametrize("layer", ["auto", "seccomp"])
def test_a_killed_worker_leaves_no_process_behind(layer: str) -> None:
    """A busy loop killed on the wall clock ends with every process of its worker, bwrap's included: under
    bwrap the worker is a grandchild, and killing only the process started here left it spinning."""
    if layer == "auto" and not os_layer.detect().bwrap:
        pytest.skip(f"bwrap does not work here: {os_layer.detect().bwrap_problem}")
    with SandboxExecutor({}, SandboxLimits(wall_time=0.5, cpu_time=30), isolation_config=IsolationConfig(os_layer=layer)) as ex:
        assert ex.run("1 + 1").outputs == ["2"]
        tree = [ex._worker.proc.pid, *os_layer.descendants(ex._worker.proc.pid)]
        assert len(tree) == (3 if layer == "auto" else 1)  # bwrap, the namespace's init bwrap, the worker
        result = ex.run("while True:\n    pass")
        assert result.error_type == "Timeout" and result.killed, result
        until = deadline(5.0)
        while any(map(_alive, tree)) and time.monotonic() < until:
            time.sleep(0.05)
        assert not [pid for pid in tree if _alive(pid)]
        assert ex.run("2 + 2").outputs == ["4"]
