"""A private PostgreSQL server for tests: initdb into a temporary directory, listen on a Unix socket there.

Two kinds of server binaries (``SERVER_KINDS``):

- ``debian``: the newest ``/usr/lib/postgresql/<major>/bin`` (``make setup`` installs Debian's postgresql
  when missing). It has no pgvector: the memory's postgres backend uses its in-process index then.
- ``pgvector``: the PostgreSQL that the ``pgserver`` wheel bundles (16, with pgvector's vector.so): the
  backend's HNSW path. The wheel is only used for its binaries; its Python API is not imported.

``initdb`` refuses to run as root, so as root (CI) the cluster belongs to ``nobody`` and its programs run
as that user (subprocess ``user=``/``group=``); as any other user they run as that user. The server
listens on nothing but ``<dir>/.s.PGSQL.<port>`` (``listen_addresses=''``), so parallel test processes
never share a port, and it trusts local connections (user ``postgres``). ``fsync`` is off unless asked for
(only an OS crash would need it); ``synchronous_commit`` stays on, so a killed server keeps every commit.

Use the fixtures ``pg_server`` (both kinds, module scope, parametrised), ``pg_debian`` or ``pg_vector``
from a test module: ``from pg_server import pg_server  # noqa: F401``. Each yields a :class:`PgServer`;
``server.fresh_dsn()`` gives a new, empty database on it for one test.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from timing import timeout

SERVER_KINDS = ("debian", "pgvector")
PORT = 5432  # names the socket file only: nothing listens on TCP
RUN_AS = "nobody"  # the cluster's owner when the tests run as root
START_TIMEOUT_S = timeout(30.0)  # seconds a server may take to start (test/timing.py's scale)
_databases = itertools.count(1)


def debian_bin_dir() -> Path | None:
    """The newest Debian PostgreSQL's bin directory with initdb, or None."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name)
                   if p.parent.parent.name.isdigit() else 0)
    return found[-1].parent if found else None


def pgvector_bin_dir() -> Path | None:
    """The bin directory of the PostgreSQL bundled by the ``pgserver`` wheel (with pgvector), or None."""
    spec = importlib.util.find_spec("pgserver")  # finds the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        bin_dir = Path(location) / "pginstall" / "bin"
        if (bin_dir / "initdb").is_file():
            return bin_dir
    return None


def bin_dir_for(kind: str) -> Path | None:
    """The server binaries of ``kind`` (one of SERVER_KINDS), or None when they are not installed here."""
    if kind not in SERVER_KINDS:
        raise ValueError(f"unknown PostgreSQL kind {kind!r}; use one of {SERVER_KINDS}")
    return debian_bin_dir() if kind == "debian" else pgvector_bin_dir()


class PgServer:
    """One PostgreSQL cluster in its own temporary directory; start(), stop(), kill(), restart()."""

    def __init__(self, bin_dir: Path, fsync: bool = False, settings: dict[str, str] | None = None) -> None:
        """``settings``: more server settings (name -> value), e.g. a benchmark's shared_buffers."""
        self.bin_dir = Path(bin_dir)
        self.fsync = fsync
        self.settings = dict(settings or {})
        self.as_root = os.geteuid() == 0
        # /tmp, not pytest's tmp_path: a Unix socket path has at most 107 bytes, and as root ``nobody`` must
        # be able to reach the directory (pytest's base directory is private to root)
        self.root = Path(tempfile.mkdtemp(prefix="teachbot-pg-"))
        self.data_dir = self.root / "data"
        self.log_path = self.root / "server.log"
        if self.as_root:
            user = pwd.getpwnam(RUN_AS)
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self._user: dict[str, object] = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
        else:
            self._user = {}
        self._run("initdb", "-D", str(self.data_dir), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C",
                  "--no-sync")

    @property
    def socket_dir(self) -> Path:
        return self.root

    @property
    def dsn(self) -> str:
        """libpq connection string of the ``postgres`` database."""
        return self.dsn_for("postgres")

    def dsn_for(self, database: str) -> str:
        return f"host={self.socket_dir} port={PORT} user=postgres dbname={database} connect_timeout=5"

    @property
    def has_pgvector(self) -> bool:
        """pgvector is installed for these binaries (its control file is in their share directory)."""
        share = subprocess.run([str(self.bin_dir / "pg_config"), "--sharedir"], capture_output=True, text=True, check=True)
        return (Path(share.stdout.strip()) / "extension" / "vector.control").is_file()

    @property
    def running(self) -> bool:
        return self._pid() is not None

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = " ".join([
            f"-c listen_addresses='' -c unix_socket_directories='{self.socket_dir}' -p {PORT}",
            "-c unix_socket_permissions=0777 -c max_connections=60 -c shared_buffers=32MB",
            # synchronous_commit stays on: a commit is in the kernel's page cache before it returns, so killing
            # the server (kill()) loses nothing committed; fsync=off only gives up surviving an OS crash
            "-c synchronous_commit=on " + ("-c fsync=on" if self.fsync else "-c fsync=off -c full_page_writes=off"),
            *(f"-c {name}={value}" for name, value in self.settings.items()),
        ])
        self._run("pg_ctl", "-D", str(self.data_dir), "-o", options, "-l", str(self.log_path), "-w",
                  "-t", str(int(START_TIMEOUT_S)), "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop it (``fast``: roll back open transactions, close connections); nothing if it is not running."""
        if self.running:
            self._run("pg_ctl", "-D", str(self.data_dir), "-m", mode, "-w", "stop")

    def kill(self) -> None:
        """SIGKILL the postmaster (a crash: the next start recovers from the WAL); waits until it and its
        backends, which exit on their own when it dies, are gone, so the next start finds no old process."""
        pid = self._pid()
        if pid is None:
            return
        children = _children(pid)
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + START_TIMEOUT_S
        while any(_alive(p) for p in [pid, *children]) and time.monotonic() < deadline:
            time.sleep(0.02)

    def restart(self) -> None:
        self.stop()
        self.start()

    def fresh_dsn(self) -> str:
        """A new empty database on this server (one per test, so tests share a server, not data)."""
        name = f"t{os.getpid()}_{next(_databases)}"
        self.psql(f"CREATE DATABASE {name}")
        return self.dsn_for(name)

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run SQL with the server's own psql (no Python client needed); returns its unaligned output."""
        result = subprocess.run([str(self.bin_dir / "psql"), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                                 "-d", self.dsn_for(database), "-c", sql], capture_output=True, text=True, timeout=timeout(60))
        if result.returncode != 0:
            raise RuntimeError(f"psql failed ({result.returncode}): {result.stderr.strip()}")
        return result.stdout.strip()

    def close(self) -> None:
        """Stop the server (killing it if a clean stop fails) and remove its directory."""
        try:
            self.stop("immediate")
        except (RuntimeError, subprocess.TimeoutExpired):
            self.kill()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def _pid(self) -> int | None:
        try:
            pid = int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) else None

    def _run(self, program: str, *args: str) -> None:
        result = subprocess.run([str(self.bin_dir / program), *args], capture_output=True, text=True, cwd=self.root,
                                timeout=START_TIMEOUT_S + 30, **self._user)  # type: ignore[call-overload]
        if result.returncode != 0:
            raise RuntimeError(f"{program} failed ({result.returncode}): {result.stderr.strip() or result.stdout.strip()}\n"
                               f"server log:\n{self.log_tail()}")


def _alive(pid: int) -> bool:
    """The process exists (a zombie not yet reaped too: the postmaster's pid check counts it as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (from /proc)."""
    found = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat_file.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat_file.parent.name))
    return found


@contextlib.contextmanager
def running_server(kind: str, fsync: bool = False) -> Iterator[PgServer]:
    """A started server of ``kind``; skips the test when those binaries are not installed here."""
    bin_dir = bin_dir_for(kind)
    if bin_dir is None:
        pytest.skip(f"no {kind} PostgreSQL here ({'make setup installs postgresql' if kind == 'debian' else 'pip install pgserver'})")
    server = PgServer(bin_dir, fsync=fsync)
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module", params=SERVER_KINDS)
def pg_server(request: pytest.FixtureRequest) -> Iterator[PgServer]:
    """Each kind of server in turn (Debian's without pgvector, pgserver's with it), one per test module."""
    with running_server(request.param) as server:
        yield server


@pytest.fixture(scope="module")
def pg_debian() -> Iterator[PgServer]:
    """Debian's PostgreSQL (no pgvector), one per test module."""
    with running_server("debian") as server:
        yield server


@pytest.fixture(scope="module")
def pg_vector() -> Iterator[PgServer]:
    """pgserver's bundled PostgreSQL with pgvector, one per test module."""
    with running_server("pgvector") as server:
        yield server
