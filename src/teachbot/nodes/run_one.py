"""Run one node of a node set in this process: ``python -m teachbot.nodes.run_one '<spec as JSON>'``.

The supervisor (teachbot.nodes.supervisor) starts each node of ``teachbot sim --processes`` this way, so a
node gets exactly the keyword arguments the in-process stack would give it (NodeSpec.parameters),
without turning them into ROS parameters and back.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from teachbot.nodes.nodeset import NodeSpec


def spec_to_json(spec: NodeSpec) -> str:
    """``spec`` as the single command-line argument of this module."""
    return json.dumps({"name": spec.name, "executable": spec.executable, "cls": spec.cls,
                       "parameters": dict(spec.parameters), "description": spec.description,
                       "provided_by": spec.provided_by})


def spec_from_json(text: str) -> NodeSpec:
    """The NodeSpec that :func:`spec_to_json` wrote."""
    data: dict[str, Any] = json.loads(text)
    return NodeSpec(**data)


def main(argv: list[str] | None = None) -> int:
    """Build the node of the JSON spec in ``argv[0]`` and spin it until SIGINT/SIGTERM (teachbot.nodes.common.run_nodes)."""
    from teachbot.nodes.common import run_nodes  # deferred: rclpy

    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m teachbot.nodes.run_one '<node spec as JSON>'", file=sys.stderr)
        return 2
    spec = spec_from_json(argv[0])
    return run_nodes([spec.create], [])


if __name__ == "__main__":
    raise SystemExit(main())
