"""ros2 launch teachbot robot.launch.py robot_profile:=panda_real

A physical arm: only the skills node is started; the arm's own drivers (e.g. ros2_control's
joint_trajectory_controller, a gripper driver) and perception provide the topics named in the
profile (config/robots/panda_real.yaml). Nothing else differs from sim.launch.py.
"""

from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from launch import LaunchDescription


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription([
        DeclareLaunchArgument("robot_profile", default_value="panda_real", description="config/robots/<name>.yaml or a path"),
        Node(
            package="teachbot", executable="skills", name="skills", output="screen",
            parameters=[{"robot_profile": LaunchConfiguration("robot_profile")}],
        ),
    ])
