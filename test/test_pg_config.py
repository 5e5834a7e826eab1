"""config/memory.yaml's store backend keys (memory.store.backend, dsn, robot_id, scope, spool_dir) and their errors."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from teachbot.errors import ConfigError
from teachbot.memory.config import MemoryConfig


def config(tmp_path: Path, **store: object) -> MemoryConfig:
    return MemoryConfig.from_mapping({"memory": {"store": {"learned_dir": "memory_store/learned", **store}}}, "test", base=tmp_path)


def test_shipped_config_is_the_file_store_with_documented_postgres_defaults() -> None:
    shipped = MemoryConfig.load()
    assert (shipped.backend, shipped.dsn, shipped.robot_id, shipped.scope) == ("files", "", "", "fleet")
    assert shipped.spool_path == shipped.learned_dir.parent / "pg_spool"
    assert shipped.robot_name == socket.gethostname()


def test_postgres_settings_are_read_and_resolved(tmp_path: Path) -> None:
    settings = config(tmp_path, backend="postgres", dsn=" host=db.local dbname=teachbot ", robot_id="arm-2", scope="robot",
                      spool_dir="spool")
    assert (settings.backend, settings.dsn, settings.robot_name, settings.scope) == ("postgres", "host=db.local dbname=teachbot",
                                                                                    "arm-2", "robot")
    assert settings.spool_path == tmp_path / "spool"
    assert config(tmp_path).spool_path == tmp_path / "memory_store" / "pg_spool"


@pytest.mark.parametrize(("store", "message"), [
    ({"backend": "sqlite"}, "backend must be one of files, postgres"),
    ({"backend": "postgres"}, "dsn is empty"),
    ({"backend": "postgres", "dsn": "host=x", "scope": "everyone"}, "scope must be one of fleet, robot"),
    ({"robot_id": "arm/2"}, "robot_id 'arm/2'"),
    ({"dsn": 5}, "dsn must be a string"),
])
def test_bad_store_settings_say_which_key(tmp_path: Path, store: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config(tmp_path, **store)
