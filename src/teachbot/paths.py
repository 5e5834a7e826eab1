"""Where the package's data lives: the source tree in development, the ament share dir when installed."""

from __future__ import annotations

import os
from pathlib import Path

_SOURCE_ROOT = Path(__file__).resolve().parents[2]


def share_dir() -> Path:
    """Directory holding config/, prompts/, memory_store/ and launch/.

    TEACHBOT_SHARE overrides; otherwise the source checkout (editable install) wins over the ament
    index, so a developer's edits to config/ take effect without reinstalling.
    """
    override = os.environ.get("TEACHBOT_SHARE")
    if override:
        return Path(override)
    if (_SOURCE_ROOT / "config").is_dir() and (_SOURCE_ROOT / "package.xml").is_file():
        return _SOURCE_ROOT
    try:
        from ament_index_python.packages import get_package_share_directory  # deferred: optional (a ROS install)

        return Path(get_package_share_directory("teachbot"))
    except Exception:  # noqa: BLE001 - ament index absent or package not registered
        return _SOURCE_ROOT


def config_path(*parts: str) -> Path:
    """Path of a file under config/."""
    return share_dir().joinpath("config", *parts)
