"""Worker process of the robot-console sandbox, plus the source policy it shares with the parent
(teachbot.sandbox.executor imports this module; it uses only the standard library). Beside it, loaded by
path: the definition rule (_sandbox_defs), the wire codec (_sandbox_wire, which the parent imports too),
the output buffer (_sandbox_output) and the seccomp filter (_sandbox_seccomp).

Started as ``python -I -S _sandbox_worker.py RFD WFD``. Layers, outermost first:
0. the OS layer (teachbot.sandbox.os_layer, config/sandbox.yaml ``isolation:``): bubblewrap namespaces
   around the process where available, and a seccomp allow-list of system calls that it loads last
   in its setup (teachbot/sandbox/_sandbox_seccomp.py): no files, sockets, processes or signals;
1. its own process: uid nobody (when started by root), rlimits on memory, CPU, processes, files
   and file descriptors, an empty environment, a deleted working directory, and the parent's wall
   clock that SIGKILLs it;
2. an audit hook that, while user code runs, refuses every audited operation (imports, open,
   sockets, processes, ctypes, gc and frame introspection, compile, exec);
3. builtins reduced to a safe whitelist, the robot API as proxies that only send plain data;
4. check_source, the AST policy, applied by the parent before anything is sent and again here.
"""

from __future__ import annotations

import ast
import builtins
import importlib.util
import json
import math
import os
import resource
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterable
from typing import Any

MAX_SOURCE_CHARS = 100_000
NOBODY = 65534
EXIT_MEMORY, EXIT_BROKEN = 3, 4
FORBIDDEN_NAMES = frozenset({
    "eval", "exec", "compile", "open", "input", "breakpoint", "help", "globals", "locals", "vars", "dir", "getattr", "setattr",
    "delattr", "hasattr", "type", "object", "super", "classmethod", "staticmethod", "property", "memoryview", "id", "exit",
    "quit", "copyright", "credits", "license", "aiter", "anext",
})
MODULE_NAMES = frozenset({
    "os", "sys", "subprocess", "socket", "signal", "ctypes", "gc", "pickle", "marshal", "shutil", "pathlib", "builtins",
    "importlib", "inspect", "io", "time", "threading", "multiprocessing", "resource", "types", "code", "codecs", "posix",
    "traceback",
})
_SAFE_TYPES = (str, bytes, bytearray, list, tuple, dict, set, frozenset, int, float, complex, bool, range, slice, BaseException)
# Attribute names allowed after a dot: the public methods and fields of the builtin data types, minus the format
# methods, whose format strings can walk attributes ('{0.__class__}'); 'kind' is RobotError's.
ALLOWED_ATTRS = frozenset({n for t in _SAFE_TYPES for n in dir(t) if not n.startswith("_")} | {"kind"}) - {"format", "format_map"}
# Constructs the console refuses. Classes would bring user-defined dunder methods (__repr__, __eq__, __hash__) that
# the worker's own repr and encoding would run, plus metaclass and __class__-cell tricks; without them every value is
# a builtin type. Generator functions keep frames alive past the statement (generator expressions stay, with their
# frame attributes refused by ALLOWED_ATTRS); 'with' needs context-manager classes the console does not offer;
# 'match' class patterns read attributes by name (case int(__class__=c)); global/nonlocal and async are not needed.
BANNED_NODES: dict[type, str] = {
    ast.Import: "importing modules", ast.ImportFrom: "importing modules", ast.Global: "the 'global' statement",
    ast.Nonlocal: "the 'nonlocal' statement", ast.ClassDef: "defining classes", ast.AsyncFunctionDef: "async code",
    ast.Await: "async code", ast.AsyncFor: "async code", ast.AsyncWith: "async code",
    ast.Yield: "'yield' (a generator function)", ast.YieldFrom: "'yield' (a generator function)",
    ast.With: "a 'with' block", ast.Match: "a 'match' statement", ast.TryStar: "'except*'",
}
EXCEPTION_NAMES = [
    "ArithmeticError", "AssertionError", "AttributeError", "Exception", "IndexError", "KeyError", "LookupError", "MemoryError",
    "NameError", "NotImplementedError", "OverflowError", "RecursionError", "RuntimeError", "StopIteration", "TimeoutError",
    "TypeError", "ValueError", "ZeroDivisionError",
]
SAFE_BUILTINS = [
    "abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr", "complex", "dict", "divmod",
    "enumerate", "filter", "float", "format", "frozenset", "hash", "hex", "int", "isinstance", "iter", "len", "list", "map",
    "max", "min", "next", "oct", "ord", "pow", "print", "range", "repr", "reversed", "round", "set", "slice", "sorted", "str",
    "sum", "tuple", "zip",
] + EXCEPTION_NAMES  # print is replaced by one that captures the output
CONSOLE_BUILTINS = frozenset(SAFE_BUILTINS) | {"RobotError", "SandboxViolation", "True", "False", "None"}


class SandboxViolation(Exception):
    """Code that tried something the robot console does not allow; the message names it."""


class RobotError(Exception):
    """An error the robot API reported whose class is not a builtin; ``kind`` is its class name."""

    def __init__(self, message: str = "", kind: str = "RobotError") -> None:
        super().__init__(message)
        self.kind = kind


def _sibling(name: str) -> Any:
    """The module ``name``.py beside this file, loaded by path, as -I -S puts no package on sys.path."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    if (spec := importlib.util.spec_from_file_location(name, path)) is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    spec.loader.exec_module(module := importlib.util.module_from_spec(spec))
    return module


_DEFS = _sibling("_sandbox_defs")  # defining a function runs nothing: literal defaults, no decorators
_WIRE = _sibling("_sandbox_wire")  # the codec and frames, shared with the parent
NotPlainData, PLAIN, decode, encode = _WIRE.NotPlainData, _WIRE.PLAIN, _WIRE.decode, _WIRE.encode
read_frame, write_frame = _WIRE.read_frame, _WIRE.write_frame
Output = _sibling("_sandbox_output").Output


def _violation(what: str, hint: str = "") -> SandboxViolation:
    return SandboxViolation(f"{what} is not allowed in the robot console" + (f"; {hint}" if hint else ""))


def _check_name(name: str, store: bool, api_names: frozenset[str] | set[str]) -> None:
    if name.startswith("_") and name != "_":
        raise _violation(f"access to '{name}'")
    if name in FORBIDDEN_NAMES and name not in api_names:  # the household API's open() is the robot's, not the file one
        raise _violation(f"the built-in '{name}'")
    if store and name in api_names:
        raise _violation(f"redefining the robot API function '{name}'")


def check_source(source: str, api_names: Iterable[str] = ()) -> ast.Module:
    """Parse console code and enforce the AST policy; raise SyntaxError or SandboxViolation, run nothing."""
    if len(source) > MAX_SOURCE_CHARS:
        raise _violation(f"code longer than {MAX_SOURCE_CHARS} characters")
    api = frozenset(api_names)
    tree = ast.parse(source, "<console>", "exec")
    nodes = list(ast.walk(tree))
    for node in nodes:  # constructs first, then names and attributes in reading order (a.b.c: a.b first)
        what = BANNED_NODES.get(type(node))
        if what:
            raise _violation(what)
    ends = {id(n): (getattr(n, "end_lineno", 0) or 0, getattr(n, "end_col_offset", 0) or 0) for n in nodes}
    for node in sorted(nodes, key=lambda n: ends[id(n)]):
        if isinstance(node, ast.Name):
            _check_name(node.id, not isinstance(node.ctx, ast.Load), api)
        elif isinstance(node, ast.Attribute):
            if node.attr.startswith("_"):
                raise _violation(f"access to '{node.attr}'")
            if not isinstance(node.ctx, ast.Load):
                raise _violation("setting or deleting attributes")
            if isinstance(node.value, ast.Name) and node.value.id in MODULE_NAMES:
                raise _violation(f"the module '{node.value.id}'")
            if node.attr not in ALLOWED_ATTRS:
                hint = "use an f-string instead" if node.attr in ("format", "format_map") else ""
                raise _violation(f"the attribute '.{node.attr}'", hint)
        elif isinstance(node, (ast.FunctionDef, ast.ExceptHandler)) and node.name:
            _check_name(node.name, True, api)
        elif isinstance(node, (ast.arg, ast.keyword)) and node.arg and node.arg.startswith("_"):
            raise _violation(f"access to '{node.arg}'")
        if problem := _DEFS.definition_problem(node):
            raise _violation(*problem)
    return tree


def called_names(tree: ast.AST) -> set[str]:
    """Names that the code calls directly (``name(...)``): candidates for function generation."""
    return {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}


def error_line(exc: BaseException, memory_mb: int = 0, max_chars: int = 2000) -> tuple[str, str]:
    """(type name, one-line 'Type: message') for an exception, as the console shows it."""
    kind = exc.kind if isinstance(exc, RobotError) else type(exc).__name__
    if isinstance(exc, SyntaxError):
        message = f"{exc.msg} (line {exc.lineno})"
    else:
        try:
            message = str(exc)
        except Exception:  # noqa: BLE001 - e.g. an int too large to print
            message = "(message could not be shown)"
    if isinstance(exc, MemoryError) and not message:
        message = f"the code needed more than {memory_mb} MB of memory" if memory_mb else "out of memory"
    message = " ".join(message[: max_chars + 1].splitlines())
    line = f"{kind}: {message}" if message else kind
    return kind, line if len(line) <= max_chars else line[:max_chars] + "... [truncated]"


# --- the worker itself ---
_GUARD = {"locked": False, "exec": False}
_AUDIT_TOPICS = {
    "import": "importing modules", "open": "opening files", "socket": "network access", "ctypes": "native code",
    "subprocess": "starting processes", "os": "operating-system access", "gc": "garbage-collector introspection",
    "sys": "interpreter introspection", "object": "code and frame introspection", "exec": "running generated code",
    "compile": "running generated code",
}


def _audit(event: str, args: tuple[Any, ...]) -> None:
    """While user code runs, refuse every audited operation except the one exec that starts it."""
    if not _GUARD["locked"]:
        return
    if event == "exec" and _GUARD["exec"]:
        _GUARD["exec"] = False
        return
    raise _violation(_AUDIT_TOPICS.get(event.split(".")[0], f"the operation '{event}'"))


def harden(rfd: int, wfd: int, memory_mb: int, seccomp: bool = False) -> dict[str, Any]:
    """Move the pipe to fds 3/4, drop root, set rlimits, and last load the seccomp filter; returns what was applied."""
    report: dict[str, Any] = {}
    seccomp_filter = None
    if seccomp:  # built while files can still be opened (the library, the module); loaded at the end
        try:
            seccomp_filter = _sibling("_sandbox_seccomp").Filter()
        except (OSError, ImportError, AttributeError) as exc:
            report["seccomp_error"] = str(exc)
    r, w = os.dup(rfd), os.dup(wfd)
    os.dup2(r, 3)
    os.dup2(w, 4)
    os.closerange(5, 1 << 16)
    empty = tempfile.mkdtemp(prefix="teachbot-sandbox-")
    os.chdir(empty)
    os.rmdir(empty)  # the working directory no longer exists: nothing can be created relative to it
    os.environ.clear()
    if os.geteuid() == 0:
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        except OSError as exc:
            report["setuid_error"] = str(exc)
    limits = {"RLIMIT_CORE": 0, "RLIMIT_FSIZE": 0, "RLIMIT_NPROC": 0, "RLIMIT_NOFILE": 5, "RLIMIT_MEMLOCK": 0,
              "RLIMIT_AS": memory_mb << 20}
    for name, value in limits.items():
        resource.setrlimit(getattr(resource, name), (value, value))
    report.update(uid=os.getuid(), gid=os.getgid(), rlimits=limits)
    if seccomp_filter is not None:
        try:
            seccomp_filter.load()
            report["seccomp"] = True
        except OSError as exc:
            report["seccomp_error"] = str(exc)
    return report


class Worker:
    """The namespace, the robot API proxies and the request loop of one worker process."""

    def __init__(self, rfd: int, wfd: int, api_names: list[str], limits: dict[str, Any]) -> None:
        self.rfd, self.wfd, self.limits = rfd, wfd, limits
        self.api_names = frozenset(api_names)
        self.out = Output(limits["max_output_chars"], limits["max_output_lines"])
        self.restoring = False
        self.calls = 0
        table = {name: getattr(builtins, name) for name in SAFE_BUILTINS}
        table.update(print=self._make_print(), RobotError=RobotError, SandboxViolation=SandboxViolation)  # after: print captured
        table.update({name: self._make_proxy(name) for name in api_names})
        self.builtins = table
        self.reset()

    def reset(self) -> None:
        self.ns: dict[str, Any] = {"__builtins__": self.builtins}
        self.defs: dict[str, tuple[str, Any, set[str]]] = {}  # name -> (source, function object, names it calls)
        self.sent: dict[str, str | None] = {}  # name -> state text last reported to the parent

    def _make_print(self) -> Callable[..., None]:
        def print(*args: Any, sep: str | None = " ", end: str | None = "\n", file: Any = None, flush: bool = False) -> None:
            sep, end = " " if sep is None else sep, "\n" if end is None else end
            if type(sep) is not str or type(end) is not str:
                raise TypeError("print(): sep and end must be strings")
            for i, arg in enumerate(args):
                if i:
                    self.out.write(sep)
                self.out.write(str(arg))
            self.out.write(end)

        print.__qualname__ = "print"
        return print

    def _make_proxy(self, name: str) -> Callable[..., Any]:
        call = self._call

        def proxy(*args: Any, **kwargs: Any) -> Any:
            return call(name, args, kwargs)

        proxy.__name__ = proxy.__qualname__ = name
        return proxy

    def _call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self.calls += 1
        if self.restoring:
            raise RuntimeError("robot API calls are not replayed when the console is restored")
        try:
            message = {"op": "call", "name": name, "args": encode(args), "kwargs": encode(kwargs)}
        except NotPlainData as exc:
            raise TypeError(f"{name}() takes plain data only ({PLAIN}); got {exc.type_name}") from None
        except ValueError as exc:
            raise ValueError(f"{name}(): {exc}") from None
        message["out"] = self.out.take()
        depth = sys.getrecursionlimit()
        sys.setrecursionlimit(depth + 100)  # user code at its recursion limit must not split a call from its reply
        try:
            self.send(message)
            try:
                reply = self.recv()
            except BaseException:  # noqa: BLE001 - the reply would stay in the pipe: this worker is out of step
                os._exit(EXIT_BROKEN)
        finally:
            sys.setrecursionlimit(depth)
        if reply.get("op") == "ret":
            return decode(reply.get("value"))
        kind, text = str(reply.get("type")), str(reply.get("msg"))
        cls = SandboxViolation if kind == "SandboxViolation" else getattr(builtins, kind) if kind in EXCEPTION_NAMES else None
        if cls is None:
            raise RobotError(text, kind)
        try:
            args = decode(reply["args"])
            exc = cls(*args) if type(args) is tuple else cls(text)
        except (KeyError, ValueError, TypeError):
            exc = cls(text)
        raise exc

    def display(self, value: Any) -> None:
        """sys.displayhook: the console shows the repr of each top-level expression statement."""
        self.out.show(value)

    def send(self, message: dict[str, Any]) -> None:
        try:
            write_frame(self.wfd, message)
        except MemoryError:
            os._exit(EXIT_MEMORY)
        except BaseException:  # noqa: BLE001 - a half-written frame: the parent must restart us
            os._exit(EXIT_BROKEN)

    def recv(self) -> dict[str, Any]:
        """The next message; a parse error is raised (the frame was consumed, the pipe stays in step)."""
        try:
            body = read_frame(self.rfd)
        except EOFError:
            os._exit(0)
        except BaseException:  # noqa: BLE001
            os._exit(EXIT_BROKEN)
        message = json.loads(body)
        if type(message) is not dict:
            raise ValueError("malformed message from the robot")
        return message

    def _set_cpu_limit(self) -> None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        soft = math.ceil(usage.ru_utime + usage.ru_stime + self.limits["cpu_time"])
        resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))

    def _execute(self, code: Any) -> None:
        _GUARD["exec"] = _GUARD["locked"] = True
        try:
            exec(code, self.ns)
        finally:
            _GUARD["exec"] = _GUARD["locked"] = False

    def run(self, source: str) -> dict[str, Any]:
        """Run a snippet statement by statement like a console; stop at the first exception."""
        self.out = Output(self.limits["max_output_chars"], self.limits["max_output_lines"])
        self.calls = 0
        result: dict[str, Any] = {"op": "done", "error": None, "etype": None, "undef": None}
        statements: list[tuple[ast.stmt, Any]] = []
        try:
            tree = check_source(source, self.api_names)
            statements = [(s, compile(ast.Interactive(body=[s], type_ignores=[]), "<console>", "single")) for s in tree.body]
        except BaseException as exc:  # noqa: BLE001 - SyntaxError, SandboxViolation, RecursionError in the compiler
            result["etype"], result["error"] = self._describe(exc)
        self._set_cpu_limit()
        for stmt, code in statements:
            before = self.calls
            try:
                self._execute(code)
            except BaseException as exc:  # noqa: BLE001 - everything user code raises becomes an error line
                result["etype"], result["error"] = self._describe(exc)
                called = called_names(tree).union(*(d[2] for d in self.defs.values()))
                if isinstance(exc, NameError) and exc.name in called:
                    result["undef"] = exc.name
                break
            if isinstance(stmt, ast.FunctionDef) and self.calls == before:
                self.defs[stmt.name] = (ast.unparse(stmt), self.ns.get(stmt.name), called_names(stmt))
        result["out"] = self.out.take(final=True)
        return {**result, **self.snapshot()}

    def _describe(self, exc: BaseException) -> tuple[str, str]:
        return error_line(exc, self.limits["memory_mb"], self.limits["max_output_chars"])

    def snapshot(self) -> dict[str, Any]:
        """Names, plain-data variables that changed (as JSON text; None = not restorable) and live defs."""
        names = sorted(k for k in self.ns if not k.startswith("_"))
        changes: dict[str, str | None] = {}
        total = 0
        for name in names:
            text: str | None
            try:
                text = json.dumps(encode(self.ns[name], max_size=64 << 10), separators=(",", ":"))
                total += len(text)
            except (TypeError, ValueError, RecursionError, MemoryError):
                text = None
            if total > 1 << 20:
                text = None
            if self.sent.get(name, "") != text:
                changes[name] = self.sent[name] = text
        for name in [n for n in self.sent if n not in self.ns]:
            changes[name] = None
            del self.sent[name]
        defs = [src for name, (src, fn, _) in self.defs.items() if self.ns.get(name) is fn]
        return {"names": names, "state": changes, "defs": defs}

    def restore(self, defs: list[str], state: dict[str, str]) -> dict[str, Any]:
        """Replay def statements and reload plain variables into a fresh worker (no robot API calls)."""
        self.restoring = True
        self._set_cpu_limit()
        try:
            for source in defs:
                try:
                    tree = check_source(source, self.api_names)
                    if len(tree.body) == 1 and isinstance(tree.body[0], ast.FunctionDef):
                        self._execute(compile(tree, "<console>", "exec"))
                        name = tree.body[0].name
                        self.defs[name] = (source, self.ns.get(name), called_names(tree))
                except BaseException:  # noqa: BLE001 - a def that cannot come back is reported as lost by the parent
                    pass
            for name, text in state.items():
                try:
                    _check_name(name, True, self.api_names)
                    if name.isidentifier() and type(text) is str:
                        self.ns[name] = decode(json.loads(text))
                except (TypeError, ValueError, RecursionError, SandboxViolation):
                    pass
        finally:
            self.restoring = False
        return {"op": "restored", **self.snapshot()}

    def serve(self) -> None:
        while True:
            message = self.recv()
            op = message.get("op")
            try:
                if op == "run":
                    reply = self.run(str(message.get("src")))
                elif op == "restore":
                    reply = self.restore(list(message.get("defs") or []), dict(message.get("state") or {}))
                elif op == "reset":
                    self.reset()
                    reply = {"op": "reset"}
                else:
                    os._exit(EXIT_BROKEN)
            except MemoryError:
                os._exit(EXIT_MEMORY)
            self.send(reply)


def main(argv: list[str]) -> None:
    """Entry point: read the init message, harden the process, say ready, then serve requests."""
    init = json.loads(read_frame(int(argv[1])))
    limits = init["limits"]
    for codec in ("ascii", "latin-1", "utf-16", "utf-32"):
        "".encode(codec)  # load the common codecs now: no imports are possible once hardened
    report = harden(int(argv[1]), int(argv[2]), int(limits["memory_mb"]), seccomp=init.get("seccomp") is True)
    worker = Worker(3, 4, list(init["api"]), limits)
    warnings.simplefilter("ignore")
    sys.setrecursionlimit(int(limits["recursion_limit"]) + 30)
    sys.displayhook = worker.display
    sys.addaudithook(_audit)
    worker.send({"op": "ready", **report})
    worker.serve()


if __name__ == "__main__":
    main(sys.argv)
