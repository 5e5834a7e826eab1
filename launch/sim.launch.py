"""ros2 launch teachbot sim.launch.py

The simulated robot: the PyBullet sim node behind the controller and camera topics, skills,
perception, memory, and with an LLM (console:=true or llm_* arguments) improvement and the interaction
manager, each a process. Without `launch` (pip installs), `teachbot sim` composes the same nodes in one
process: both take the node list from teachbot.nodes.nodeset.

    ros2 launch teachbot sim.launch.py [seed:=3] [gui:=true] [real_time_factor:=0] [console:=true]
        [llm_backend:=openai llm_model:=gpt-4o-mini llm_base_url:=http://127.0.0.1:8000/v1]
        [memory:=/path/learned] [perception_backend:=sim_ground_truth] [robot_profile:=panda_sim]
        [web:=true]   (the person's web page on 127.0.0.1:8765, config/web.yaml)

`ros2 launch teachbot sim.launch.py --show-args` lists every argument.
"""

from teachbot.nodes.launching import generate_launch_description as _generate


def generate_launch_description():  # noqa: ANN201 - launch.LaunchDescription (launch is imported lazily)
    """The sim node set of teachbot.nodes.nodeset as launch_ros Nodes."""
    return _generate("sim")
