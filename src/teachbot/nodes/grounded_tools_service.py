"""RAIDER's grounded tools over ROS: the perception node's service ``perception/grounded_tool``.

The perception node attaches :class:`GroundedToolsService`; each request runs one tool of
:class:`teachbot.raider.tools.GroundedTools` over the node's own scene queries, so an issue-detection
agent in another process (the issue_detection node, through :class:`teachbot.nodes.raider_ros.RemoteTools`)
asks exactly what an in-process agent would. Tabletop: the arm's reach of ``raider.reach.tabletop``.
Household: the reach of ``raider.reach.household`` for a mobile robot, with the layout's places to
drive to. What the hand holds comes from the scene model's states (GroundedTools' default).
"""

from __future__ import annotations

from typing import Any

from rclpy.node import Node
from teachbot_interfaces.srv import GroundedTool

from teachbot.errors import ConfigError
from teachbot.raider.config import RaiderConfig
from teachbot.raider.tools import GroundedTools, ToolError

SERVICE = "perception/grounded_tool"


class GroundedToolsService:
    """Serves ``perception/grounded_tool`` for a perception node (its ``queries`` and ``household``).

    Give the callback group the node's scene-model updates run in, so a tool never reads a model
    halfway through an update."""

    def __init__(self, node: Node, callback_group: Any = None, config: RaiderConfig | None = None) -> None:
        self.node = node
        self._config = config
        self.service = node.create_service(GroundedTool, SERVICE, self.on_request, callback_group=callback_group)

    def config(self) -> RaiderConfig:
        """config/raider.yaml, read at the first request (a bad file is each answer's error, not a crash)."""
        if self._config is None:
            self._config = RaiderConfig.load()
        return self._config

    def tools(self) -> GroundedTools:
        """The six tools over the node's scene as it is now, in the style of config/raider.yaml's profile."""
        node: Any = self.node
        household, config = getattr(node, "household", None), self.config()
        if household is not None:
            return GroundedTools(node.queries, config.reach_for("household"), layout=household.layout, style=config.tool_style)
        return GroundedTools(node.queries, config.reach_for("tabletop"), style=config.tool_style)

    def answer(self, tool: str, args: list[str]) -> tuple[bool, str]:
        """(success, the tool's answer or the error)."""
        try:
            return True, self.tools().call(tool, list(args))
        except (ToolError, ConfigError) as exc:
            return False, str(exc)
        except Exception as exc:  # noqa: BLE001 - a scene the tools cannot read is an answer, not a crashed node
            return False, f"{tool}() failed: {type(exc).__name__}: {exc}"

    def on_request(self, request: GroundedTool.Request, response: GroundedTool.Response) -> GroundedTool.Response:
        response.success, text = self.answer(request.tool, list(request.args))
        if response.success:
            response.answer = text
        else:
            response.message = text
        return response
