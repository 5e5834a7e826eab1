"""ros2 launch teachbot replay.launch.py

A recorded session played back: the simulated stack with the interaction manager and improvement
node answering from the recording's LLM completions, plus the replay node that plays the recorded
person, compares the outcome with the recording (result on replay/result) and exits 0 on a match,
1 on a divergence; the launch shuts down when it has. `teachbot replay` does the same in one process;
both take the nodes from teachbot.nodes.nodeset.

    ros2 launch teachbot replay.launch.py recording:=/path/to/recording [check:=false] [gui:=true] [real_time_factor:=0]
"""

from pathlib import Path

from teachbot.nodes.launching import generate_launch_description as _generate

REPLAY_EXECUTABLE = "replay"  # teachbot.nodes.nodeset.NODES["replay"]


def generate_launch_description():  # noqa: ANN201 - launch.LaunchDescription (launch is imported lazily)
    """The replay node set of teachbot.nodes.nodeset as launch_ros Nodes; the replay node's exit ends the launch."""
    from launch.actions import RegisterEventHandler
    from launch.event_handlers import OnProcessExit

    description = _generate("replay")
    description.add_action(RegisterEventHandler(OnProcessExit(on_exit=end_with_the_replay)))
    return description


def end_with_the_replay(event, context):  # noqa: ANN001, ANN201 - launch's ProcessExited, LaunchContext -> actions
    """Shut the launch down once the replay node has exited (its exit code is the verdict); other exits pass."""
    from launch.actions import EmitEvent
    from launch.events import Shutdown

    if Path(str(event.cmd[0])).name != REPLAY_EXECUTABLE:
        return None
    verdict = {0: "the replay matches the recording", 1: "the replay diverged"}.get(event.returncode, "the replay node failed")
    return [EmitEvent(event=Shutdown(reason=f"{verdict} (exit code {event.returncode})"))]
