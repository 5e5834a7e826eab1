"""ros2 launch teachbot sim.launch.py [robot_profile:=panda_sim] [seed:=0] [scene_file:=...]
[real_time_factor:=1.0] [gui:=false] [camera:=true]

The simulated robot: the sim node (PyBullet world behind controller and camera topics) and the
skills node (one action per skill), as separate processes. Where `launch` is not installed,
`teachbot sim` composes the same two nodes in one process.
"""

from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue

from launch import LaunchDescription


def generate_launch_description() -> LaunchDescription:
    args = {
        "robot_profile": ("panda_sim", "config/robots/<name>.yaml or a path"),
        "seed": ("0", "seed of the random tabletop scene"),
        "scene_file": ("", "explicit scene YAML; overrides seed"),
        "real_time_factor": ("1.0", "simulated seconds per wall second; 0 = as fast as possible"),
        "gui": ("false", "open the PyBullet window"),
        "camera": ("true", "render and publish the RGB-D camera"),
    }
    cfg = {name: LaunchConfiguration(name) for name in args}
    return LaunchDescription(
        [DeclareLaunchArgument(name, default_value=default, description=text) for name, (default, text) in args.items()]
        + [
            Node(
                package="teachbot", executable="sim", name="sim", output="screen",
                parameters=[{
                    "robot_profile": cfg["robot_profile"],
                    "seed": ParameterValue(cfg["seed"], value_type=int),
                    "scene_file": cfg["scene_file"],
                    "real_time_factor": ParameterValue(cfg["real_time_factor"], value_type=float),
                    "gui": ParameterValue(cfg["gui"], value_type=bool),
                    "camera_enabled": ParameterValue(cfg["camera"], value_type=bool),
                }],
            ),
            Node(
                package="teachbot", executable="skills", name="skills", output="screen",
                parameters=[{"robot_profile": cfg["robot_profile"]}],
            ),
        ]
    )
