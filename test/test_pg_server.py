"""test/pg_server.py itself: a private server of each kind starts in a temporary directory (as ``nobody``
when the tests run as root), keeps committed data over a restart and a kill -9, and leaves nothing behind."""

from __future__ import annotations

import os

import pytest
from pg_server import SERVER_KINDS, PgServer, bin_dir_for


@pytest.mark.parametrize("kind", SERVER_KINDS)
def test_server_starts_restarts_survives_a_kill_and_cleans_up(kind: str) -> None:
    bin_dir = bin_dir_for(kind)
    if bin_dir is None:
        pytest.skip(f"no {kind} PostgreSQL here")
    server = PgServer(bin_dir)
    try:
        server.start()
        owner = (server.data_dir / "postmaster.pid").stat().st_uid
        assert owner == (65534 if os.geteuid() == 0 else os.geteuid())  # initdb refuses root: nobody owns it then
        assert server.has_pgvector == (kind == "pgvector")
        available = server.psql("SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'")
        assert available == ("1" if kind == "pgvector" else "0")
        database = server.fresh_dsn().split("dbname=")[1].split()[0]
        server.psql("CREATE TABLE t (x int); INSERT INTO t VALUES (1)", database)
        server.restart()
        server.kill()
        assert not server.running
        server.start()
        assert server.psql("SELECT x FROM t", database) == "1"
        assert server.socket_dir.joinpath(".s.PGSQL.5432").exists() and len(str(server.socket_dir)) < 90
    finally:
        server.close()
    assert not server.root.exists() and not server.running
