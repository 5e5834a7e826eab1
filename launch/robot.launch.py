"""ros2 launch teachbot robot.launch.py

A physical arm: the sim node is not started; the arm's drivers (e.g. ros2_control's
joint_trajectory_controller, a gripper driver) and a camera driver provide the topics named in the
robot profile (config/robots/panda_real.yaml). Everything else is as in sim.launch.py; `teachbot robot`
composes the same nodes in one process (both take them from teachbot.nodes.nodeset).

    ros2 launch teachbot robot.launch.py robot_profile:=panda_real [perception_backend:=owlv2]
        [console:=true] [llm_backend:=... llm_model:=... llm_base_url:=...] [memory:=/path/learned] [web:=true]
"""

from teachbot.nodes.launching import generate_launch_description as _generate


def generate_launch_description():  # noqa: ANN201 - launch.LaunchDescription (launch is imported lazily)
    """The robot node set of teachbot.nodes.nodeset as launch_ros Nodes."""
    return _generate("robot")
