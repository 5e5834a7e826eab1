"""ros2 launch teachbot replay.launch.py

A recorded session played back: the simulated stack in the recorded scene plus the replay node
that feeds it the recording (no LLM, no person needed). `teachbot replay` does the same in one
process; both take the nodes from teachbot.nodeset.

    ros2 launch teachbot replay.launch.py recording:=/path/to/recording [gui:=true] [real_time_factor:=0]
"""

from teachbot.launching import generate_launch_description as _generate


def generate_launch_description():  # noqa: ANN201 - launch.LaunchDescription (launch is imported lazily)
    """The replay node set of teachbot.nodeset as launch_ros Nodes."""
    return _generate("replay")
