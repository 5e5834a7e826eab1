"""``ros2 launch`` glue: turn the node set of a mode (teachbot.nodes.nodeset) into launch_ros Nodes.

launch/sim.launch.py, robot.launch.py and replay.launch.py are three lines each around
:func:`generate_launch_description`. The launch packages are imported here, inside the functions,
so this module (and the node set) stay importable where launch is not installed.
"""

from __future__ import annotations

from typing import Any

from teachbot.nodes.nodeset import PACKAGE, NodeSpec, arguments, node_set
from teachbot.nodes.supervisor import RESPAWN_DELAY


def generate_launch_description(mode: str) -> Any:
    """A LaunchDescription: one DeclareLaunchArgument per node-set argument, then the nodes.

    The nodes are chosen at launch time (an OpaqueFunction) from the resolved argument values, so
    conditions such as "the interaction manager runs when an LLM is named" are the node set's own.
    """
    from launch.actions import DeclareLaunchArgument, OpaqueFunction  # deferred: launch (optional)

    from launch import LaunchDescription  # deferred: launch (optional)

    declared = [DeclareLaunchArgument(a.name, default_value=a.default_for(mode), description=a.description)
                for a in arguments(mode)]
    return LaunchDescription([*declared, OpaqueFunction(function=lambda context: launch_nodes(mode, context))])


def launch_nodes(mode: str, context: Any) -> list[Any]:
    """The launch_ros Nodes of ``mode`` for the argument values in the launch ``context``."""
    from launch.actions import LogInfo  # deferred: launch (optional)
    from launch.substitutions import LaunchConfiguration  # deferred: launch (optional)
    from launch_ros.actions import Node  # deferred: launch_ros (optional)

    values = {a.name: LaunchConfiguration(a.name).perform(context) for a in arguments(mode)}
    actions: list[Any] = []
    for spec in node_set(mode, values):
        if spec.provided_by and not spec.available():
            actions.append(LogInfo(msg=f"teachbot: {spec.name} node not installed (part '{spec.provided_by}'); skipped"))
            continue
        actions.append(Node(**node_arguments(spec)))
    return actions


def node_arguments(spec: NodeSpec) -> dict[str, Any]:
    """The keyword arguments of launch_ros's Node for ``spec``: a node that dies (kill -9, a crash) is
    started again after teachbot.nodes.supervisor.RESPAWN_DELAY seconds, as ``teachbot sim --processes`` does."""
    return {"package": PACKAGE, "executable": spec.executable, "name": spec.name, "output": "screen",
            "parameters": [dict(spec.parameters)], "respawn": True, "respawn_delay": RESPAWN_DELAY}
