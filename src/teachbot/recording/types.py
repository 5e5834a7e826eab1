"""The rosbags type store of a teachbot bag: ROS 2 Kilted's standard messages plus teachbot_interfaces.

The custom types are parsed from the package's own .msg/.srv/.action files, so every connection of a
bag carries a proper ``ros2msg`` schema that ``ros2 bag``, Foxglove and the ``mcap`` tools can decode.
An action adds the types its introspection events use (``Pick_SendGoal_Event``, ``Pick_GetResult_Event``)
and its feedback message, exactly as rosidl generates them. ROS-free.
"""

from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path

from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

from teachbot.errors import ConfigError

PACKAGE = "teachbot_interfaces"
_SOURCE = Path(__file__).resolve().parents[3] / PACKAGE


def interfaces_dir() -> Path:
    """Where teachbot_interfaces' .msg files are: the source checkout, else the installed share dir."""
    for candidate in (_SOURCE, Path(sys.prefix) / "share" / PACKAGE):
        if (candidate / "msg").is_dir():
            return candidate
    raise ConfigError(f"cannot find the {PACKAGE} interface files (looked in {_SOURCE} and {sys.prefix}/share)")


def _sections(text: str) -> list[str]:
    """The parts of a .srv/.action file between ``---`` lines."""
    parts, current = [], []
    for line in text.splitlines():
        if line.strip() == "---":
            parts.append("\n".join(current))
            current = []
        else:
            current.append(line)
    parts.append("\n".join(current))
    return parts


def _qualify(text: str, kind: str) -> str:
    """Same-package field types (``SkillResult``) spelled out, so a definition parses under any subfolder."""
    lines = []
    for line in text.splitlines():
        body = line.split("#", 1)[0].strip()
        if body and "=" not in body.split()[0] and "/" not in body.split()[0] and body.split()[0][0].isupper():
            line = f"{PACKAGE}/{kind}/{line.strip()}"
        lines.append(line)
    return "\n".join(lines)


def interface_definitions(root: Path | None = None) -> dict[str, str]:
    """Full type name -> .msg-syntax definition for every message, service part and action part."""
    root = root or interfaces_dir()
    defs: dict[str, str] = {}
    for path in sorted((root / "msg").glob("*.msg")):
        defs[f"{PACKAGE}/msg/{path.stem}"] = _qualify(path.read_text(), "msg")
    for path in sorted((root / "srv").glob("*.srv")):
        request, response = _sections(path.read_text())
        defs[f"{PACKAGE}/srv/{path.stem}_Request"] = _qualify(request, "msg")
        defs[f"{PACKAGE}/srv/{path.stem}_Response"] = _qualify(response, "msg")
    for path in sorted((root / "action").glob("*.action")):
        goal, result, feedback = _sections(path.read_text())
        # nested parts are filed under msg/ as well: a ros2msg schema names dependencies "pkg/Type"
        # (rosbags can only spell msg/ types that way); the layout is the one rosidl generates
        name, nested = path.stem, f"{PACKAGE}/msg/{path.stem}"
        parts = {
            "Goal": _qualify(goal, "msg"),
            "Result": _qualify(result, "msg"),
            "Feedback": _qualify(feedback, "msg"),
            "SendGoal_Request": f"unique_identifier_msgs/UUID goal_id\n{nested}_Goal goal",
            "SendGoal_Response": "bool accepted\nbuiltin_interfaces/Time stamp",
            "GetResult_Request": "unique_identifier_msgs/UUID goal_id",
            "GetResult_Response": f"int8 status\n{nested}_Result result",
            "FeedbackMessage": f"unique_identifier_msgs/UUID goal_id\n{nested}_Feedback feedback",
        }
        for service in ("SendGoal", "GetResult"):
            parts[f"{service}_Event"] = (
                f"service_msgs/ServiceEventInfo info\n{nested}_{service}_Request[<=1] request\n"
                f"{nested}_{service}_Response[<=1] response"
            )
        for part, text in parts.items():
            defs[f"{PACKAGE}/action/{name}_{part}"] = text
            defs[f"{nested}_{part}"] = text
    return defs


@lru_cache(maxsize=1)
def typestore() -> Typestore:
    """Kilted's standard types plus every teachbot_interfaces type (built once per process)."""
    store = get_typestore(Stores.ROS2_KILTED)
    types = {}
    for name, text in interface_definitions().items():
        # rosbags files every non-action type under msg/; service parts keep their srv/ name
        types.update({key.replace("/srv/msg/", "/srv/"): value for key, value in get_types_from_msg(text, name).items()})
    store.register(types)
    return store


def action_names(root: Path | None = None) -> list[str]:
    """The action types of teachbot_interfaces (``Pick``, ``Place``, ...)."""
    return sorted(p.stem for p in ((root or interfaces_dir()) / "action").glob("*.action"))
