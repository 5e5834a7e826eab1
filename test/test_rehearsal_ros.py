"""Rehearsal through the ROS path: the improvement node reads the two scenes of improvement/improve (JSON), tries the
improved lesson in a copy of the tabletop built from the first and stores it through memory/add only when it ends at
the second."""

from __future__ import annotations

import time

import pytest
import rclpy
from teachbot_interfaces.srv import Improve
from test_improvement_node import IMPROVED, SCENE, Graph, SlowTeacher
from timing import pytest_timeout, timeout

from teachbot.simrobot.snapshot import SceneObject, scene_to_json

pytestmark = pytest.mark.timeout(pytest_timeout(120))

# the robot's mistake, the person's correction carried out (the red block moved away as well), then the learning call
CORRECTED = """>>> wait_for_trigger()
{'type': 'dialog', 'text': 'put the block in the blue bowl'}
>>> put_first_on_second('red block', 'blue bowl')
'success'
>>> wait_for_trigger()
{'type': 'dialog', 'text': 'no, I meant the green block'}
>>> put_first_on_second('red block', 'top left corner')
'success'
>>> put_first_on_second('green block', 'blue bowl')
'success'
>>> wait_for_trigger()
{'type': 'dialog', 'text': 'good, remember that next time'}
>>> learn_from_interaction()"""
RED, GREEN, BLUE, YELLOW = (0.1, -0.45, 0.02), (-0.15, -0.45, 0.02), (0.0, -0.62, 0.0), (0.2, -0.7, 0.0)
INITIAL = (SceneObject("red block", "block", "red", RED), SceneObject("green block", "block", "green", GREEN),
           SceneObject("blue bowl", "bowl", "blue", BLUE), SceneObject("yellow bowl", "bowl", "yellow", YELLOW))


def accepted(red: tuple[float, float, float]) -> tuple[SceneObject, ...]:
    return (SceneObject("red block", "block", "red", red), SceneObject("green block", "block", "green", (0.0, -0.62, 0.026)),
            *INITIAL[2:])


def improve(g: Graph, end: tuple[SceneObject, ...]) -> Improve.Response:
    request = Improve.Request(profile="tabletop", episode_id="e1", transcript=CORRECTED, scene_objects=SCENE,
                              initial_scene=scene_to_json(INITIAL), accepted_scene=scene_to_json(end))
    wall = time.time() + timeout(60.0)
    request.deadline.sec, request.deadline.nanosec = int(wall), int((wall % 1) * 1e9)
    future = g.client.call_async(request)
    rclpy.spin_until_future_complete(g.caller, future, timeout_sec=timeout(60.0))
    assert future.done(), "the improvement service never answered"
    return future.result()


def test_the_improvement_node_stores_only_a_lesson_whose_replay_ends_where_the_person_accepted(ros_context):
    g = Graph(SlowTeacher(), "rehearsal_ros")
    try:
        # the person accepted the red block where it began: the lesson (green block into the blue bowl) ends there
        kept = improve(g, accepted(RED))
        assert kept.stored, kept.message
        assert len(g.added) == 1 and g.added[0].example.transcript == IMPROVED
        # the person accepted the red block at the top left corner: the lesson never moves it there
        rejected = improve(g, accepted((-0.25, -0.25, 0.02)))
        assert not rejected.stored and len(g.added) == 1
        assert rejected.message == ("I did not keep that lesson: replayed from the start it left the red block near the "
                                    "middle, not near the top left corner where you accepted it.")
        assert rejected.improved_transcript == IMPROVED  # what was tried is still in the answer
    finally:
        g.close()


def test_a_deferred_lesson_is_pending_and_keep_lesson_stores_it_only_when_it_ends_where_the_person_accepted(ros_context):
    """improvement/improve with defer: the lesson comes back pending and nothing is stored; improvement/keep_lesson
    with the table the person accepted replays it and stores it through memory/add only when it ends there."""
    from teachbot_interfaces.srv import KeepLesson

    g = Graph(SlowTeacher(), "rehearsal_keep")
    try:
        request = Improve.Request(profile="tabletop", episode_id="e2", transcript=CORRECTED, scene_objects=SCENE,
                                  initial_scene=scene_to_json(INITIAL), defer=True)
        future = g.client.call_async(request)
        rclpy.spin_until_future_complete(g.caller, future, timeout_sec=timeout(60.0))
        pending = future.result()
        assert pending.pending and not pending.stored and g.added == [] and pending.example.transcript == IMPROVED
        keeper = g.caller.create_client(KeepLesson, "/improvement/keep_lesson")
        assert keeper.wait_for_service(timeout_sec=timeout(10.0))
        answers = []
        for end in (accepted((-0.25, -0.25, 0.02)), accepted(RED)):  # the red block moved away: not the lesson's end
            future = keeper.call_async(KeepLesson.Request(example=pending.example, initial_scene=scene_to_json(INITIAL),
                                                          accepted_scene=scene_to_json(end)))
            rclpy.spin_until_future_complete(g.caller, future, timeout_sec=timeout(60.0))
            answers.append(future.result())
        rejected, kept = answers
        assert not rejected.stored and rejected.rehearsal == "rejected" and rejected.message.startswith("I did not keep")
        assert kept.stored and kept.rehearsal == "kept" and len(g.added) == 1 and g.added[0].example.transcript == IMPROVED
    finally:
        g.close()
