"""Attack suite for the robot-console sandbox: escapes that LLM-written code might try, each proven contained.

Every case names its containment: a SandboxViolation line saying what was refused, a specific error
line, a kill report, or capped output. After every case the same executor must still answer `1 + 1`,
the parent's sentinel file must not exist, and the parent's environment secret must appear nowhere.
Further tests prove two inner layers on their own (the worker's OS limits and its audit hook, as if
an attacker had already got past the AST policy) and the parent against a hostile worker process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from timing import pytest_timeout

from teachbot.sandbox import executor as sandbox
from teachbot.sandbox.executor import RunResult, SandboxExecutor, SandboxLimits

SECRET_VAR = "TEACHBOT_SANDBOX_TEST_SECRET"
SECRET = f"secret-{uuid.uuid4().hex}"
SENTINEL = Path(f"/tmp/teachbot-sandbox-sentinel-{os.getpid()}")
LIMITS = SandboxLimits(wall_time=3.0, cpu_time=1.0, memory_mb=256, max_output_chars=200, max_output_lines=20, max_api_calls=50)
WORKER = Path(sandbox.__file__).with_name("_sandbox_worker.py")

V, E, K, OUT = "violation", "error", "kill", "output"  # containment kinds
# (id, code, kind, error type or None, fragment of the error line, or for OUT the expected outputs)
ATTACKS = [
    ("class-walk", "().__class__.__bases__[0].__subclasses__()", V, "SandboxViolation", "access to '__class__'"),
    ("mro-walk", "''.__class__.__mro__[-1].__subclasses__()", V, "SandboxViolation", "'__class__'"),
    ("type-mro-method", "int.mro()", V, "SandboxViolation", "the attribute '.mro'"),
    ("object-subclasses", "object.__subclasses__()", V, "SandboxViolation", "the built-in 'object'"),
    ("getattr-dunder", "getattr(get_obj_names, '__globals__')", V, "SandboxViolation", "the built-in 'getattr'"),
    ("format-attr-walk", "'{0.__class__.__base__}'.format(1)", V, "SandboxViolation", "the attribute '.format'"),
    ("format-map", "'{x.__class__}'.format_map({'x': 1})", V, "SandboxViolation", "the attribute '.format_map'"),
    ("unbound-str-format", "f = str.format\nf('{0.__globals__}', get_obj_names)", V, "SandboxViolation", "'.format'"),
    ("fstring-attr", "f'{get_obj_names.__globals__}'", V, "SandboxViolation", "access to '__globals__'"),
    ("proxy-globals", "get_obj_names.__globals__['os'].environ", V, "SandboxViolation", "access to '__globals__'"),
    ("proxy-closure", "get_obj_names.__closure__[0].cell_contents", V, "SandboxViolation", "access to '__closure__'"),
    ("print-globals-unicode", "print.__ｇｌｏｂａｌｓ__", V, "SandboxViolation", "access to '__globals__'"),
    ("builtins-dict", "__builtins__['eval']('1')", V, "SandboxViolation", "access to '__builtins__'"),
    ("import-os", f"import os\nos.system('touch {SENTINEL}')", V, "SandboxViolation", "importing modules"),
    ("dunder-import", "__import__('os').system('id')", V, "SandboxViolation", "access to '__import__'"),
    ("eval", "eval('1 + 1')", V, "SandboxViolation", "the built-in 'eval'"),
    ("exec", "exec('x = 1')", V, "SandboxViolation", "the built-in 'exec'"),
    ("compile", "compile('1', 'f', 'eval')", V, "SandboxViolation", "the built-in 'compile'"),
    ("breakpoint", "breakpoint()", V, "SandboxViolation", "the built-in 'breakpoint'"),
    ("globals", "globals()['__builtins__']", V, "SandboxViolation", "the built-in 'globals'"),
    ("vars-locals", "vars()\nlocals()", V, "SandboxViolation", "the built-in 'vars'"),
    ("type-trick", "type('X', (), {})", V, "SandboxViolation", "the built-in 'type'"),
    ("class-def", "class X:\n    pass", V, "SandboxViolation", "defining classes"),
    ("open-passwd", "open('/etc/passwd').read()", V, "SandboxViolation", "the built-in 'open'"),
    ("open-write-sentinel", f"open('{SENTINEL}', 'w').write('pwned')", V, "SandboxViolation", "the built-in 'open'"),
    ("os-environ", "os.environ", V, "SandboxViolation", "the module 'os'"),
    ("environ-via-subclasses", "[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == '_wrap_close'][0]"
     ".__init__.__globals__['environ']", V, "SandboxViolation", "access to '__class__'"),
    ("socket", "import socket\nsocket.create_connection(('10.0.0.1', 80))", V, "SandboxViolation", "importing modules"),
    ("subprocess", f"import subprocess\nsubprocess.run(['touch', '{SENTINEL}'])", V, "SandboxViolation", "importing modules"),
    ("signal", "signal.alarm(1)", V, "SandboxViolation", "the module 'signal'"),
    ("ctypes", "from ctypes import CDLL", V, "SandboxViolation", "importing modules"),
    ("gc-objects", "gc.get_objects()", V, "SandboxViolation", "the module 'gc'"),
    ("sys-getframe", "sys._getframe(0).f_globals", V, "SandboxViolation", "'_getframe'"),
    ("traceback-frame", "try:\n    1 / 0\nexcept Exception as e:\n    e.__traceback__.tb_frame.f_globals", V, "SandboxViolation",
     "access to '__traceback__'"),
    ("tb-frame-no-underscore", "try:\n    1 / 0\nexcept Exception as e:\n    e.tb_frame", V, "SandboxViolation", "'.tb_frame'"),
    ("generator-gi-frame", "g = (i for i in [1])\ng.gi_frame.f_back.f_globals", V, "SandboxViolation", "the attribute '.gi_frame'"),
    ("generator-function", "def gen():\n    yield 1", V, "SandboxViolation", "'yield'"),
    ("decorator-dunder", "@(lambda f: f.__globals__)\ndef g():\n    pass", V, "SandboxViolation", "access to '__globals__'"),
    ("decorator-api-with-function", "@say\ndef g():\n    pass", V, "SandboxViolation", "a decorator is not allowed"),
    ("api-with-function", "def g():\n    pass\nsay(g)", E, "TypeError", "say() takes plain data only"),
    ("lambda-default-capture", "(lambda f=get_obj_names: f.__globals__)()", V, "SandboxViolation", "which is not a literal"),
    ("rebind-api-proxy", "get_obj_names = lambda: ['fake']", V, "SandboxViolation", "redefining the robot API function"),
    ("replace-proxy-code", "get_obj_names.__code__ = (lambda: 1).__code__", V, "SandboxViolation", "access to '__code__'"),
    ("set-proxy-attribute", "get_obj_names.calls = 0", V, "SandboxViolation", "setting or deleting attributes"),
    ("delete-api-proxy", "del get_obj_names", V, "SandboxViolation", "redefining the robot API function"),
    ("pickle-reduce", "get_obj_names.__reduce_ex__(2)", V, "SandboxViolation", "access to '__reduce_ex__'"),
    ("pickle-import", "import pickle\npickle.loads(b'cos\\nsystem\\n(Vid\\ntR.')", V, "SandboxViolation", "importing modules"),
    ("api-arg-function", "say(get_obj_names)", E, "TypeError", "say() takes plain data only"),
    ("api-arg-too-large", "say('x' * (10 ** 7))", E, "ValueError", "too large"),
    ("codec-import-at-runtime", "b'x'.decode('uu_codec')", E, "SandboxViolation", "importing modules"),
    ("with-block", "with open('x') as f:\n    pass", V, "SandboxViolation", "a 'with' block"),
    ("global-statement", "def f():\n    global x\n    x = 1", V, "SandboxViolation", "'global'"),
    ("match-class-attr", "match 1:\n    case int(__class__=c):\n        pass", V, "SandboxViolation", "a 'match' statement"),
    ("async", "async def f():\n    pass", V, "SandboxViolation", "async code"),
    ("dunder-keyword", "dict(__class__=1)", V, "SandboxViolation", "access to '__class__'"),
    ("exit", "exit()", V, "SandboxViolation", "the built-in 'exit'"),
    ("raise-system-exit", "raise SystemExit(0)", E, "NameError", "name 'SystemExit' is not defined"),
    ("input", "input()", V, "SandboxViolation", "the built-in 'input'"),
    ("long-sleep", "time.sleep(1000)", V, "SandboxViolation", "the module 'time'"),
    ("fork-bomb", "import os\nwhile True:\n    os.fork()", V, "SandboxViolation", "importing modules"),
    ("infinite-loop", "while True:\n    pass", K, "Timeout", "was stopped; no robot motion was in progress"),
    ("infinite-loop-in-def", "def spin():\n    while True:\n        pass\nspin()", K, "Timeout", "was stopped"),
    ("infinite-iterator", "sum(iter(int, 1))", K, "Timeout", "was stopped"),
    ("huge-power", "9 ** 9 ** 9", K, "Timeout", "was stopped"),
    ("api-flood-swallowed", "while True:\n    try:\n        get_obj_names()\n    except Exception:\n        pass", K, "Timeout",
     "was stopped"),
    ("api-flood", "while True:\n    get_obj_names()", E, "SandboxViolation", "more than 50 robot API calls"),
    ("huge-string", "'x' * (10 ** 10)", E, "MemoryError", "more than 256 MB"),
    ("huge-list", "[0] * (10 ** 9)", E, "MemoryError", "more than 256 MB"),
    ("growing-allocation", "def grow():\n    a = []\n    while True:\n        a.append(bytearray(10 ** 7))\ngrow()", E,
     "MemoryError", "more than 256 MB"),
    ("deep-recursion", "def f(n):\n    return f(n + 1)\nf(0)", E, "RecursionError", "maximum recursion depth"),
    ("deeply-nested-repr", "def nest():\n    x = []\n    for i in range(100000):\n        x = [x]\n    return x\nnest()", E,
     "RecursionError", "maximum recursion depth"),
    ("huge-exception-message", "raise ValueError('z' * 10 ** 7)", E, "ValueError", "... [truncated]"),
    ("print-huge-string", "print('x' * (10 ** 8))", OUT, None, ["x" * 200 + "... [truncated]"]),
    ("repr-huge-string", "'y' * (10 ** 8)", OUT, None, ["'" + "y" * 199 + "... [truncated]"]),
    ("very-long-output", "for i in range(10 ** 5):\n    print(i)", OUT, None, [str(i) for i in range(20)] + ["... [output truncated]"]),
    ("deeply-nested-source", "x = " + "(" * 1000 + "1" + ")" * 1000, E, "SyntaxError", "too many nested parentheses"),
    ("source-too-long", "x = 1\n" * 20_000, V, "SandboxViolation", "longer than 100000 characters"),
]


class Robot:
    """The parent-side robot API of the attack suite, recording what reached it."""

    def __init__(self) -> None:
        self.said: list[object] = []
        self.calls = 0
        self.kills = 0

    def get_obj_names(self) -> list[str]:
        self.calls += 1
        return ["red block", "blue bowl"]

    def say(self, text: object) -> None:
        self.said.append(text)

    def on_kill(self) -> list[str]:
        self.kills += 1
        return []  # no robot goal is in flight in the attack suite


@pytest.fixture(scope="module")
def robot() -> Robot:
    return Robot()


@pytest.fixture(scope="module")
def executor(robot: Robot):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(SECRET_VAR, SECRET)
        ex = SandboxExecutor({"get_obj_names": robot.get_obj_names, "say": robot.say}, LIMITS, on_kill=robot.on_kill)
        yield ex
        ex.close()
    SENTINEL.unlink(missing_ok=True)


def test_at_least_thirty_attacks() -> None:
    assert len(ATTACKS) >= 30 and len({a[0] for a in ATTACKS}) == len(ATTACKS)


@pytest.mark.parametrize(("code", "kind", "error_type", "expected"), [pytest.param(*a[1:], id=a[0]) for a in ATTACKS])
def test_attack_is_contained(executor: SandboxExecutor, robot: Robot, code: str, kind: str, error_type: str | None,
                             expected: str | list[str]) -> None:
    kills, cwd = robot.kills, Path.cwd()
    robot.calls = 0
    result = executor.run(code)
    assert result.error_type == error_type, result
    if kind == OUT:
        assert result.outputs == expected and result.error is None
    else:
        assert result.error is not None and result.error.startswith(f"{error_type}: ") and expected in result.error, result
        assert "\n" not in result.error and len(result.error) <= LIMITS.max_output_chars + 20
    if kind == V:
        assert result.outputs == [] and robot.calls == 0, "a refused snippet must not run at all"
    assert result.killed == (kind == K) and robot.kills == kills + (kind == K)
    # the same executor goes on working, and the parent is unharmed
    assert executor.run("1 + 1") == RunResult(outputs=["2"])
    assert not SENTINEL.exists()
    assert all(SECRET not in text for text in [*result.outputs, result.error or "", *map(str, robot.said)])
    assert os.environ[SECRET_VAR] == SECRET and Path.cwd() == cwd


def test_api_flood_reaches_the_robot_at_most_max_api_calls_times(robot: Robot) -> None:
    # a separate executor whose wall time cannot run out: what counts is how many calls reach the robot, and 500
    # refused calls can take the attack suite's 3 s on a loaded machine (they did at load 19 on 2 cores)
    robot.calls = 0
    with SandboxExecutor({"get_obj_names": robot.get_obj_names}, replace(LIMITS, wall_time=120.0)) as executor:
        result = executor.run("for i in range(500):\n    try:\n        get_obj_names()\n    except SandboxViolation:\n        pass")
    assert result.error is None and robot.calls == LIMITS.max_api_calls
    robot.calls = 0


def test_worker_is_a_separate_unprivileged_limited_process(executor: SandboxExecutor) -> None:
    info = executor.isolation
    if os.geteuid() == 0:
        assert (info["uid"], info["gid"]) == (65534, 65534)
    assert info["rlimits"] == {"RLIMIT_CORE": 0, "RLIMIT_FSIZE": 0, "RLIMIT_NPROC": 0, "RLIMIT_NOFILE": 5, "RLIMIT_MEMLOCK": 0,
                               "RLIMIT_AS": 256 << 20}


def _run_script(body: str) -> dict[str, str]:
    """Run ``body`` in a fresh `python -I -S` with the worker module loaded as ``w``; it prints a JSON dict."""
    prelude = f"""
        import importlib.util, json, os, socket, sys
        spec = importlib.util.spec_from_file_location("w", {str(WORKER)!r})
        w = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(w)
        def attempt(f):
            try:
                f()
                return "ALLOWED"
            except BaseException as exc:
                return type(exc).__name__
    """
    script = textwrap.dedent(prelude) + textwrap.dedent(body)
    env = {SECRET_VAR: SECRET}
    done = subprocess.run([sys.executable, "-I", "-S", "-c", script], capture_output=True, text=True,
                          timeout=pytest_timeout(60), env=env, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_os_layer_alone_stops_escape_primitives() -> None:
    """As if the AST policy, the builtins and the audit hook were all bypassed: harden() still refuses."""
    outcome = _run_script(f"""
        r, wr = os.pipe()
        w.harden(r, wr, 256)
        out = {{
            "fork": attempt(os.fork),
            "read_file": attempt(lambda: open("/etc/hostname").read()),
            "write_file": attempt(lambda: open("{SENTINEL}", "w").write("pwned")),
            "socket": attempt(socket.socket),
            "allocate": attempt(lambda: bytearray(300 << 20)),
            "environ": "LEAKED" if os.environ else "empty",
            "cwd_create": attempt(lambda: os.mkdir("x")),
        }}
        if os.getppid() != 1 and {os.geteuid() == 0}:
            out["signal_parent"] = attempt(lambda: os.kill(os.getppid(), 0))
        print(json.dumps(out))
    """)
    assert "ALLOWED" not in outcome.values() and outcome["environ"] == "empty", outcome
    assert outcome["fork"] == "BlockingIOError" and outcome["allocate"] == "MemoryError", outcome
    assert not SENTINEL.exists()


def test_audit_layer_alone_blocks_reflection_and_io() -> None:
    """As if user code had reached real builtins and already-loaded modules: the audit hook still refuses."""
    outcome = _run_script("""
        import gc, subprocess
        sys.addaudithook(w._audit)
        probes = {
            "import": lambda: __import__("ctypes"), "open": lambda: open("/etc/hostname"), "system": lambda: os.system("true"),
            "fork": os.fork, "popen": lambda: subprocess.Popen(["true"]), "socket": socket.socket, "frame": sys._getframe,
            "gc": gc.get_objects, "compile": lambda: compile("1", "x", "eval"), "exec": lambda: exec("1"),
            "code": lambda: (lambda: 0).__code__, "gi_frame": lambda: (i for i in []).gi_frame, "listdir": lambda: os.listdir("/"),
        }
        out = {}
        for name, probe in probes.items():
            w._GUARD["locked"] = True
            try:
                out[name] = attempt(probe)
            finally:
                w._GUARD["locked"] = False
        print(json.dumps(out))
    """)
    assert set(outcome.values()) == {"SandboxViolation"}, outcome


FAKE_WORKER = """
import json, os, resource, struct, sys, time
resource.setrlimit(resource.RLIMIT_CPU, (10, 10))  # as a real worker: never spins on after the test
r, w = int(sys.argv[1]), int(sys.argv[2])
def read(n):
    data = b""
    while len(data) < n:
        chunk = os.read(r, n - len(data))
        if not chunk:  # the parent closed the pipe: a real worker exits too
            os._exit(0)
        data += chunk
    return data
def recv():
    return json.loads(read(struct.unpack(">I", read(4))[0]))
def send_raw(body):
    os.write(w, struct.pack(">I", len(body)) + body)
recv()
send_raw(b'{"op": "ready", "seccomp": true}')  # claims its filter: the parent must not take its word for more
recv()
"""
HOSTILE = [
    ("unregistered-api-name", 'send_raw(b\'{"op": "call", "name": "system", "args": ["t", []], "kwargs": ["d", []]}\')'),
    ("pickle-instead-of-json", "import pickle; send_raw(pickle.dumps(print))"),
    ("oversized-frame", "os.write(w, struct.pack('>I', 2 ** 31))"),
    ("unknown-tag", 'send_raw(b\'{"op": "call", "name": "say", "args": ["t", [["o", "os.system"]]], "kwargs": ["d", []]}\')'),
    ("unhashable-set-member", 'send_raw(b\'{"op": "call", "name": "say", "args": ["t", [["s", [["l", []]]]]], "kwargs": ["d", []]}\')'),
    ("malformed-done", 'send_raw(b\'{"op": "done", "out": "not a list"}\')'),
    ("silent-hang", "time.sleep(60)"),
]


@pytest.mark.parametrize("behaviour", [pytest.param(h[1], id=h[0]) for h in HOSTILE])
def test_parent_survives_a_hostile_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, behaviour: str) -> None:
    """A worker that escaped completely can only send frames: the parent kills it and never runs unregistered calls."""
    robot = Robot()
    with SandboxExecutor({"say": robot.say}, SandboxLimits(wall_time=1.0), on_kill=robot.on_kill) as ex:
        fake = tmp_path / "fake_worker.py"
        fake.write_text(FAKE_WORKER + behaviour + "\ntime.sleep(60)\n")
        monkeypatch.setattr(sandbox, "WORKER_SCRIPT", fake)
        ex._worker.close()  # the next run starts the fake
        result = ex.run("say('hi')")
        monkeypatch.undo()
        assert result.killed and robot.kills == 1 and robot.said == [], result
        assert result.error_type in ("Killed", "Timeout") and result.error.endswith("; no robot motion was in progress")
        ex._worker.close()
        assert ex.run("1 + 1") == RunResult(outputs=["2"])


def test_an_api_function_named_like_a_forbidden_builtin_is_the_robots() -> None:
    """The household API's open() drives the fridge door; it never reaches the file system, and without
    such an API function open() stays forbidden."""
    calls: list[tuple] = []

    def robot_open(thing: str) -> str:
        calls.append(("open", thing))
        if thing != "fridge":
            raise ValueError(f"{thing!r} has no door or drawer")
        return "success"

    with SandboxExecutor({"open": robot_open}, SandboxLimits()) as ex:
        assert ex.run("open('fridge')").error is None
        run = ex.run(f"open('{SENTINEL}', 'w')")
        assert run.error_type == "TypeError"  # the robot's open takes one argument: no file was touched
        run = ex.run("open('/etc/passwd')")
        assert run.error == "ValueError: '/etc/passwd' has no door or drawer"
        assert ex.run("open = 3").error_type == "SandboxViolation"  # still not rebindable
    assert calls == [("open", "fridge"), ("open", "/etc/passwd")] and not Path(SENTINEL).exists()
    with SandboxExecutor({}, SandboxLimits()) as ex:
        assert ex.run("open('fridge')").error_type == "SandboxViolation"
