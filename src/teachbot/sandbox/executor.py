"""The sandbox that runs LLM-written console code in a separate, locked-down worker process.

The parent (this module) checks the source against the AST policy, sends it over a pipe to a worker
started with ``python -I -S`` (teachbot/sandbox/_sandbox_worker.py, which drops to uid nobody and sets
rlimits) inside the OS layer that config/sandbox.yaml's ``isolation:`` asks for (teachbot.sandbox.os_layer:
bubblewrap namespaces, a seccomp filter),
and answers the worker's robot API calls: only registered names, only plain data, as
length-prefixed JSON; nothing from the worker is ever unpickled, and every frame from it is treated
as hostile. The parent's wall clock runs for the whole snippet except the time spent inside robot API
calls and SIGKILLs the worker on overrun (RLIMIT_CPU and RLIMIT_AS kill it from inside); then
``on_kill`` cancels robot goals, a fresh worker gets back the defs and plain-data variables as they
were after the last completed snippet (a killed snippet leaves no trace; no robot call is replayed),
and the console reads one error line that says what was cancelled. The time inside the robot's motion
functions has budgets of its own, per snippet and per episode (teachbot.sandbox.robot_time).
"""

from __future__ import annotations

import ast
import json
import keyword
import logging
import os
import select
import signal
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from teachbot.config import dataclass_block
from teachbot.errors import ConfigError
from teachbot.sandbox._sandbox_wire import HEADER, NotPlainData, decode, encode, pack
from teachbot.sandbox._sandbox_worker import CONSOLE_BUILTINS, EXIT_MEMORY, SandboxViolation, check_source, error_line
from teachbot.sandbox.os_layer import IsolationConfig, SandboxIsolationError, plan
from teachbot.sandbox.robot_time import RobotClock, WallClock, cancel_motions

__all__ = ["CONSOLE_BUILTINS", "RunResult", "SandboxExecutor", "SandboxLimits", "SandboxViolation"]

WORKER_SCRIPT = Path(__file__).with_name("_sandbox_worker.py")
STARTUP_TIMEOUT = 30.0  # seconds for a fresh worker to say ready (slow CI machines)
SEND_TIMEOUT = 5.0  # seconds for the worker to take a message off the pipe
MAX_MESSAGE = 4 << 20  # bytes of one frame from the worker
MAX_STATE_CHARS = 2 << 20  # of plain-data variables, and of def sources, kept for restoring after a kill
MAX_RESULT_BYTES = 8 << 20  # an API result larger than this is refused
MAX_ERROR_CHARS = 10_000  # of an API exception's message
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SandboxLimits:
    """What one run() of console code may use; config/sandbox.yaml holds the deployed values."""

    wall_time: float = 10.0  # seconds per run(), not counting the time spent inside robot API calls
    cpu_time: float = 5.0  # RLIMIT_CPU seconds per run (whole seconds, relative to the worker's usage so far)
    memory_mb: int = 512  # RLIMIT_AS of the worker
    max_output_chars: int = 2000  # longer reprs and lines are cut with a marker
    max_output_lines: int = 200  # output items per run; then one '... [output truncated]'
    max_api_calls: int = 1000  # per run
    recursion_limit: int = 200  # Python frames of user code
    robot_time_per_snippet: float = 300.0  # seconds inside the robot's motion functions per run()
    robot_time_per_episode: float = 900.0  # the same per episode (SandboxExecutor.new_episode)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"SandboxLimits.{f.name} must be a positive number, got {value!r}")
        if self.memory_mb < 64:
            raise ValueError(f"SandboxLimits.memory_mb must be at least 64 (the worker itself needs ~20 MB), got {self.memory_mb}")

    @classmethod
    def from_config(cls, raw: Mapping[str, Any]) -> SandboxLimits:
        """Limits from the 'limits:' block of config/sandbox.yaml (the whole file is accepted too)."""
        block = dataclass_block(raw.get("limits", raw) if isinstance(raw, Mapping) else raw, cls, "sandbox", "limits")
        known = {f.name: f for f in fields(cls)}
        try:
            return cls(**{k: (int(v) if known[k].type == "int" else float(v)) for k, v in block.items()})
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"sandbox config: {exc}") from None


@dataclass
class RunResult:
    """What the console shows for one snippet."""

    outputs: list[str] = field(default_factory=list)  # expression reprs and print() lines, in order
    error: str | None = None  # one line, "ExcType: message"
    error_type: str | None = None  # 'NameError', 'SandboxViolation', 'Timeout', 'MemoryError', 'Killed', an API error class, ...
    undefined_name: str | None = None  # a called name that is not defined (for function generation)
    killed: bool = False  # the worker was killed (wall clock, CPU, memory) and restarted
    sandbox_s: float = field(default=0.0, compare=False)  # seconds it ran in the sandbox, the robot API calls not counted


class _Lost(Exception):
    """The worker stopped playing its part: 'timeout', 'died' or 'protocol'."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _reap(proc: subprocess.Popen[bytes], fds: tuple[int, ...]) -> None:
    """Kill a worker and close the parent's pipe ends (also run by weakref.finalize at exit)."""
    with suppress(OSError):
        proc.kill()
    with suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5.0)
    for fd in fds:
        with suppress(OSError):
            os.close(fd)


class _Worker:
    """One worker process and the parent's non-blocking ends of its two pipes."""

    def __init__(self, api_names: list[str], limits: SandboxLimits, isolation: IsolationConfig) -> None:
        os_plan = plan(isolation)  # SandboxIsolationError before anything starts when no required layer is available
        child_r, self.wfd = os.pipe()
        self.rfd, child_w = os.pipe()
        try:
            self.proc = os_plan.spawn(str(WORKER_SCRIPT), [str(child_r), str(child_w)], (child_r, child_w))
        except BaseException:
            os.close(self.rfd)
            os.close(self.wfd)
            raise
        finally:
            os.close(child_r)
            os.close(child_w)
        os.set_blocking(self.rfd, False)
        os.set_blocking(self.wfd, False)
        self.buffer = bytearray()
        self.finalizer = weakref.finalize(self, _reap, self.proc, (self.rfd, self.wfd))
        try:
            self.send({"op": "init", "api": api_names, "limits": {f.name: getattr(limits, f.name) for f in fields(limits)},
                       "seccomp": os_plan.seccomp})
            self.info = self.recv(WallClock(STARTUP_TIMEOUT))
        except _Lost as lost:
            self.close()
            raise RuntimeError(f"the sandbox worker did not start ({lost.reason})") from None
        if self.info.get("op") != "ready":
            self.close()
            raise RuntimeError("the sandbox worker did not start (unexpected greeting)")
        if "setuid_error" in self.info:
            _log.warning("sandbox worker runs as root (could not switch to nobody: %s)", self.info["setuid_error"])
        try:
            self.info["os_layers"] = os_plan.applied(self.info)
        except SandboxIsolationError:
            self.close()
            raise
        if os_plan.seccomp and "seccomp" not in self.info["os_layers"]:
            _log.warning("sandbox worker runs without its seccomp filter: %s", self.info.get("seccomp_error", "not reported"))
        if not self.info["os_layers"]:
            _log.warning("sandbox worker runs without an OS layer (isolation.allow_no_os_layer: true)")

    def send(self, message: dict[str, Any]) -> None:
        view = memoryview(pack(message))
        deadline = time.monotonic() + SEND_TIMEOUT
        while view:
            try:
                view = view[os.write(self.wfd, view) :]
            except BlockingIOError:
                left = deadline - time.monotonic()
                poller = select.poll()
                poller.register(self.wfd, select.POLLOUT)
                if left <= 0 or not poller.poll(left * 1000):
                    raise _Lost("timeout") from None
            except OSError:
                raise _Lost("died") from None

    def recv(self, budget: WallClock) -> dict[str, Any]:
        """The next message; _Lost when ``budget`` runs out, the worker dies or it sends anything malformed."""
        while True:
            if len(self.buffer) >= HEADER.size:
                (size,) = HEADER.unpack_from(self.buffer)
                if size > MAX_MESSAGE:
                    raise _Lost("protocol")
                if len(self.buffer) >= HEADER.size + size:
                    body = bytes(self.buffer[HEADER.size : HEADER.size + size])
                    del self.buffer[: HEADER.size + size]
                    try:
                        message = json.loads(body)
                    except (ValueError, RecursionError):
                        raise _Lost("protocol") from None
                    if type(message) is not dict:
                        raise _Lost("protocol")
                    return message
            try:
                chunk = os.read(self.rfd, 1 << 16)
            except BlockingIOError:
                left = budget.left()
                if left <= 0:
                    raise _Lost("timeout") from None
                poller = select.poll()
                poller.register(self.rfd, select.POLLIN)
                poller.poll(left * 1000 + 1)
                continue
            except OSError:
                raise _Lost("died") from None
            if not chunk:
                raise _Lost("died")
            self.buffer += chunk

    def cause(self, reason: str, limits: SandboxLimits) -> tuple[str, str]:
        """(error type, what happened) once the worker is lost; kills it if it is still alive."""
        if reason == "timeout":
            self.close()
            return "Timeout", f"the code ran longer than {limits.wall_time:g} s and was stopped"
        try:
            code = self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            code = None
        self.close()
        if code == -signal.SIGXCPU:
            return "Timeout", f"the code used more than {limits.cpu_time:g} s of CPU time and was stopped"
        if code == EXIT_MEMORY:
            return "MemoryError", f"the code used more than {limits.memory_mb} MB of memory and was stopped"
        if reason == "protocol":
            return "Killed", "the sandbox worker broke the console protocol and was stopped"
        if code is not None and code < 0:
            return "Killed", f"the sandbox worker was killed by {signal.Signals(-code).name}"
        return "Killed", f"the sandbox worker exited unexpectedly (status {code})"

    def alive(self) -> bool:
        return self.finalizer.alive and self.proc.poll() is None

    def close(self) -> None:
        self.finalizer()

    def kill(self) -> None:
        """SIGKILL the process, leaving the pipe to whoever reads it (it then sees the worker die)."""
        with suppress(OSError):
            self.proc.kill()


def _to_plain(value: Any) -> Any:
    """Make a robot API result plain: numpy arrays and scalars, enums and other subclasses of plain types."""
    if type(value).__module__.split(".")[0] == "numpy" and hasattr(value, "tolist"):
        return value.tolist()
    for base in (bool, int, float, str, bytes, tuple, list, frozenset, set, dict):
        if isinstance(value, base):
            return str.__str__(value) if base is str else base(value)
    raise NotPlainData(type(value).__name__)


def _text(value: Any, limit: int) -> str | None:
    if value is None:
        return None
    if type(value) is not str:
        raise _Lost("protocol")
    return value if len(value) <= limit else value[:limit] + "... [truncated]"


class SandboxExecutor:
    """Runs console snippets in a persistent namespace inside a sandbox worker; the robot API stays in the parent."""

    def __init__(
        self, api: Mapping[str, Callable[..., Any]], limits: SandboxLimits = SandboxLimits(),
        on_kill: Callable[[], Any] | None = None, *, robot_functions: Collection[str] = (),
        isolation_config: IsolationConfig | None = None,
    ) -> None:
        """``on_kill`` cancels the robot's goals after a kill and returns the names of those it cancelled;
        the API functions named in ``robot_functions`` (the motions) count toward the robot-time budgets.
        ``isolation_config`` (default: config/sandbox.yaml's ``isolation:``) picks the OS layer around the worker."""
        for name in api:
            if not isinstance(name, str) or not name.isidentifier() or name.startswith("_") or keyword.iskeyword(name):
                raise ValueError(f"robot API name {name!r} must be a public Python identifier")
        unknown = sorted(set(robot_functions) - set(api))
        if unknown:
            raise ValueError(f"robot_functions {unknown} are not robot API functions")
        self._api = dict(api)
        self.limits = limits
        self._on_kill = on_kill
        self._isolation_config = isolation_config or IsolationConfig.deployed()
        self._motions = frozenset(robot_functions)
        self._robot_time = RobotClock(limits.robot_time_per_snippet, limits.robot_time_per_episode)
        self._lock = threading.Lock()
        self._owner: int | None = None
        self._defs: list[str] = []
        self._state: dict[str, str] = {}
        self._names: set[str] = set()
        self._closed = False
        self._worker: _Worker | None = _Worker(sorted(self._api), limits, self._isolation_config)

    @property
    def isolation(self) -> dict[str, Any]:
        """What the current worker applied to itself (uid, rlimits, seccomp) and ``os_layers``, for logs and tests."""
        return dict(self._worker.info) if self._worker else {}

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        if self._owner == threading.get_ident():
            raise RuntimeError("SandboxExecutor is not re-entrant: a robot API function called back into it")
        with self._lock:
            if self._closed:
                raise RuntimeError("the sandbox executor is closed")
            self._owner = threading.get_ident()
            try:
                yield
            finally:
                self._owner = None

    def refusal(self, source: str) -> RunResult | None:
        """The error ``run`` would return without running anything (not Python, against the console's policy), or None."""
        checked = self._check(source)
        return checked if isinstance(checked, RunResult) else None

    def _check(self, source: str) -> ast.Module | RunResult:
        try:
            return check_source(source, self._api)
        except (SyntaxError, SandboxViolation) as exc:
            kind, line = error_line(exc, max_chars=self.limits.max_output_chars)
            return RunResult(error=line, error_type=kind)
        except ValueError as exc:
            return RunResult(error=f"SyntaxError: {exc}", error_type="SyntaxError")
        except (RecursionError, MemoryError):  # the parser's own stack
            return RunResult(error="SandboxViolation: code this deeply nested is not allowed in the robot console",
                             error_type="SandboxViolation")

    def run(self, source: str) -> RunResult:
        """Run a console snippet: top-level statements in order, expression values shown, stop at the first error."""
        tree = self._check(source)
        if isinstance(tree, RunResult):
            return tree
        if not tree.body:
            return RunResult()
        with self._exclusive():
            worker = self._ready_worker()
            outputs: list[str] = []
            try:
                return self._execute(worker, source, outputs)
            except _Lost as lost:
                kind, what = worker.cause(lost.reason, self.limits)
                note = cancel_motions(self._on_kill) + self._respawn()
                return RunResult(outputs=outputs, error=f"{kind}: {what}{note}", error_type=kind, killed=True)
            except BaseException:  # KeyboardInterrupt in an API call: the worker is mid-call, drop it
                worker.close()
                cancel_motions(self._on_kill)
                raise

    def names(self) -> set[str]:
        """Names defined in the persistent namespace (user variables and functions)."""
        return set(self._names)

    @property
    def robot_seconds(self) -> float:
        """Seconds spent inside the robot's motion functions since this executor was made (an evaluation's run clock)."""
        return self._robot_time.total

    def new_episode(self) -> None:
        """An episode starts: the robot-time budget per episode is full again."""
        self._robot_time.new_episode()

    def reset(self) -> None:
        """Start over with an empty namespace."""
        with self._exclusive():
            worker = self._ready_worker()
            try:
                worker.send({"op": "reset"})
                if worker.recv(WallClock(self.limits.wall_time)).get("op") != "reset":
                    raise _Lost("protocol")
            except _Lost:
                worker.close()
            self._defs, self._state, self._names = [], {}, set()

    def close(self) -> None:
        """Kill the worker; later runs raise RuntimeError. A statement running now is not waited for (a stack that
        stops must not wait out a task): its worker is killed under it, so it ends with an error once the robot call
        it is in returns, and no worker is started again."""
        self._closed = True
        worker = self._worker
        if worker is not None:
            worker.kill()  # the process only: the pipe stays with the thread that may be running a statement
        if self._lock.acquire(blocking=False):
            try:
                if self._worker is not None:
                    self._worker.close()
                    self._worker = None
            finally:
                self._lock.release()

    def __enter__(self) -> SandboxExecutor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _ready_worker(self) -> _Worker:
        if self._worker is None or not self._worker.alive():
            if self._worker is not None:
                self._worker.close()
            self._respawn()
            if self._worker is None:
                raise RuntimeError("the sandbox worker could not be started")
        return self._worker

    def _execute(self, worker: _Worker, source: str, outputs: list[str]) -> RunResult:
        budget = WallClock(self.limits.wall_time)
        self._robot_time.new_snippet()
        worker.send({"op": "run", "src": source})
        calls = 0
        while True:
            message = worker.recv(budget)
            self._collect(outputs, message.get("out"))
            op = message.get("op")
            if op == "call":
                calls += 1
                worker.send(self._dispatch(message, calls, budget))
            elif op == "done":
                self._update(message)
                undefined = message.get("undef")
                return RunResult(
                    sandbox_s=round(max(0.0, self.limits.wall_time - budget.left()), 6),
                    outputs=outputs,
                    error=_text(message.get("error"), self.limits.max_output_chars),
                    error_type=_text(message.get("etype"), 100),
                    undefined_name=undefined if isinstance(undefined, str) and undefined.isidentifier() else None,
                )
            else:
                raise _Lost("protocol")

    def _collect(self, outputs: list[str], items: Any) -> None:
        if items is None:
            return
        if type(items) is not list:
            raise _Lost("protocol")
        cap = self.limits.max_output_lines + 1
        outputs.extend(_text(item, self.limits.max_output_chars) or "" for item in items[: max(0, cap - len(outputs))])

    def _dispatch(self, message: dict[str, Any], calls: int, budget: WallClock) -> dict[str, Any]:
        """Run one robot API call for the worker; the reply carries the result or the exception."""
        name = message.get("name")
        if type(name) is not str or name not in self._api:
            raise _Lost("protocol")
        if calls > self.limits.max_api_calls:
            limit = self.limits.max_api_calls
            text = f"more than {limit} robot API calls in one snippet is not allowed; split the work into several snippets"
            return {"op": "raise", "type": "SandboxViolation", "msg": text}
        try:
            args, kwargs = decode(message.get("args")), decode(message.get("kwargs"))
        except (ValueError, RecursionError):
            raise _Lost("protocol") from None
        if type(args) is not tuple or type(kwargs) is not dict or not all(type(k) is str for k in kwargs):
            raise _Lost("protocol")
        timed: AbstractContextManager[None] = self._robot_time.motion(name) if name in self._motions else nullcontext()
        try:
            with budget.paused(), timed:  # a used-up robot-time budget raises here, before the call
                result = self._api[name](*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the robot's error becomes the console's error line
            try:
                exc_args = encode(exc.args, max_size=1 << 16)
            except (TypeError, ValueError):
                exc_args = None
            text = " ".join(str(exc)[:MAX_ERROR_CHARS].splitlines())
            return {"op": "raise", "type": type(exc).__name__, "msg": text, "args": exc_args}
        try:
            return {"op": "ret", "value": encode(result, convert=_to_plain, max_size=MAX_RESULT_BYTES)}
        except (TypeError, ValueError) as exc:
            text = f"robot API function {name}() returned {type(result).__name__}, which cannot cross into the console: {exc}"
            return {"op": "raise", "type": "TypeError", "msg": text, "args": None}

    def _update(self, message: dict[str, Any]) -> None:
        """Keep the worker's report of names, restorable variables and replayable defs."""
        names, state, defs = message.get("names"), message.get("state"), message.get("defs")
        if type(names) is not list or type(state) is not dict or type(defs) is not list:
            raise _Lost("protocol")
        self._names = {n for n in names if type(n) is str and n.isidentifier() and not n.startswith("_")}
        for name, text in state.items():
            if type(text) is str and name in self._names:
                self._state[name] = text
            else:
                self._state.pop(name, None)
        while sum(map(len, self._state.values())) > MAX_STATE_CHARS:
            self._state.pop(max(self._state, key=lambda n: len(self._state[n])))
        kept, total = [], 0
        for source in (d for d in defs if type(d) is str):
            total += len(source)
            if total > MAX_STATE_CHARS:
                break
            kept.append(source)
        self._defs = kept

    def _respawn(self) -> str:
        """Start a fresh worker and give it back the defs and plain variables; a note on what was lost."""
        before = set(self._names)
        self._worker = None
        if self._closed:
            return "; the console was closed"
        try:
            self._worker = _Worker(sorted(self._api), self.limits, self._isolation_config)
        except (RuntimeError, OSError) as exc:
            return f"; the sandbox could not be restarted ({exc})"
        if self._defs or self._state:
            try:
                self._worker.send({"op": "restore", "defs": self._defs, "state": self._state})
                message = self._worker.recv(WallClock(self.limits.wall_time))
                if message.get("op") != "restored":
                    raise _Lost("protocol")
                self._update(message)
            except _Lost:
                self._worker.close()
                self._worker = None
                self._defs, self._state, self._names = [], {}, set()
                return self._respawn() + "; the console namespace could not be restored"
        else:
            self._names = set()
        lost = sorted(before - self._names)
        return f"; not restored: {', '.join(lost)}" if lost else ""
