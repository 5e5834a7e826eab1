"""Recording: the bag is a standard rosbag2 (MCAP with the ros2 profile and ros2msg schemas, or sqlite3),
readable by rosbags and the mcap reader, with the session's dialog, transcript, completions (prompt
digests), skill goals and results, joint states, object lists, scene record and world states."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest
from timing import pytest_timeout

from teachbot.llm.base import SYSTEM_END, prompt_digest
from teachbot.recording.bag import SESSION_TOPIC, WORLD_STATE_TOPIC, BagError, BagWriter, RecordedSession, SessionSpec, TopicSpec
from teachbot.recording.types import interface_definitions, typestore

BAGS = Path(__file__).parent / "bags"
SHIPPED = sorted(p.name for p in BAGS.iterdir() if (p / "metadata.yaml").is_file())

pytestmark = pytest.mark.timeout(pytest_timeout(240))


def test_every_interface_type_is_in_the_typestore_with_a_schema():
    store = typestore()
    for name, text in interface_definitions().items():
        msgdef, _ = store.generate_msgdef(name, ros_version=2)
        has_fields = any(line.split("#")[0].strip() for line in text.splitlines())
        assert bool(msgdef.strip()) == has_fields, name
    text, _ = store.generate_msgdef("teachbot_interfaces/action/Pick_SendGoal_Event", ros_version=2)
    assert "MSG: teachbot_interfaces/Pick_SendGoal_Request" in text and "MSG: service_msgs/ServiceEventInfo" in text


def test_rclpy_messages_decode_with_the_rosbags_typestore():
    """What the recorder writes (rclpy's CDR) is what rosbags reads back, custom and action types included."""
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import JointState
    from teachbot_interfaces.action import PutFirstOnSecond
    from teachbot_interfaces.msg import LlmCompletion, ObjectList, ObjectState
    from teachbot_interfaces.srv import GetWorldState

    store = typestore()
    msg = LlmCompletion(role="interaction", prompt_digest=prompt_digest("p"), prompt="p", completion="go_home()")
    back = store.deserialize_cdr(serialize_message(msg), "teachbot_interfaces/msg/LlmCompletion")
    assert (back.role, back.prompt_digest, back.completion) == ("interaction", prompt_digest("p"), "go_home()")
    # (as the sim sends it: with joints; Fast-CDR pads an empty float64 sequence where rosbags does not)
    joints = JointState(name=["j1"], position=[0.1], velocity=[0.0], effort=[0.0])
    world = GetWorldState.Response(objects=[ObjectState(name="red block", supported_by="blue bowl", inside=True)], joints=joints,
                                   seed=3, sim_time=1.5)
    back = store.deserialize_cdr(serialize_message(world), "teachbot_interfaces/srv/GetWorldState_Response")
    assert back.objects[0].supported_by == "blue bowl" and back.seed == 3 and back.sim_time == 1.5
    event = PutFirstOnSecond.Impl.SendGoalService.Event()
    event.request.append(PutFirstOnSecond.Impl.SendGoalService.Request())
    event.request[0].goal.object_name = "red block"
    back = store.deserialize_cdr(serialize_message(event), "teachbot_interfaces/action/PutFirstOnSecond_SendGoal_Event")
    assert back.request[0].goal.object_name == "red block" and len(back.response) == 0
    assert store.deserialize_cdr(serialize_message(ObjectList()), "teachbot_interfaces/msg/ObjectList").objects == []


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_writer_round_trip(tmp_path, storage):
    writer = BagWriter(tmp_path / "bag", storage)
    writer.write_string(SESSION_TOPIC, SessionSpec(seed=7, title="t").to_json(), 1_000)
    writer.close()
    session = RecordedSession.load(tmp_path / "bag")
    assert session.spec.seed == 7 and session.spec.title == "t" and session.storage == storage
    with pytest.raises(BagError, match="exists already"):
        BagWriter(tmp_path / "bag")


def test_a_bag_without_a_session_record_is_refused(tmp_path):
    writer = BagWriter(tmp_path / "bag")
    writer.add_topic(TopicSpec("/x", "std_msgs/msg/String"))
    writer.close()
    with pytest.raises(BagError, match="no /teachbot/session record"):
        RecordedSession.load(tmp_path / "bag")


def test_shipped_bags_exist():
    assert {"plain_task", "corrected_task", "learning_episode"} <= set(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_bag_is_a_ros2_mcap_with_the_session(name):
    from mcap.reader import make_reader

    (path,) = glob.glob(str(BAGS / name / "*.mcap"))
    with open(path, "rb") as f:
        reader = make_reader(f)
        assert reader.get_header().profile == "ros2"
        summary = reader.get_summary()
        schemas = summary.schemas
        channels = {c.topic: c for c in summary.channels.values()}
        counts = summary.statistics.channel_message_counts
    assert all(s.encoding == "ros2msg" for s in schemas.values())
    assert all(c.message_encoding == "cdr" for c in channels.values())
    for topic in ("/dialog/user", "/interaction/transcript", "/interaction/completions", "/joint_states",
                  "/sim/objects", SESSION_TOPIC, WORLD_STATE_TOPIC):
        assert counts.get(channels[topic].id, 0) > 0, topic
    # the skills the session called: each goal and each result (the tabletop's or the household robot's actions)
    for event in ("send_goal", "get_result"):
        called = [t for t in channels if t.startswith("/skills/") and t.endswith(f"/_action/{event}/_service_event")
                  and counts.get(channels[t].id, 0) > 0]
        assert called, f"no skill {event} events"
    if name.startswith("household_"):
        assert counts.get(channels["/sim/states"].id, 0) > 0
    assert schemas[channels["/interaction/completions"].schema_id].name == "teachbot_interfaces/msg/LlmCompletion"


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_bag_reads_back_with_rosbags(name):
    from rosbags.rosbag2 import Reader

    session = RecordedSession.load(BAGS / name)
    assert session.spec.scene_yaml and session.spec.memory
    assert session.transcript[0] == ">>> wait_for_trigger()" and session.transcript[-1].startswith("SessionEnded")
    assert all(c.prompt_digest == prompt_digest(c.prompt) for c in session.completions)
    assert len(session.world_states) == 2 and session.final_world is not None
    store = typestore()
    with Reader(BAGS / name) as reader:
        conns = [c for c in reader.connections if c.topic.startswith("/skills/") and c.topic.endswith("/_action/get_result/_service_event")]
        results = [store.deserialize_cdr(raw, c.msgtype) for c, _, raw in reader.messages(connections=conns)]
    responses = [r.response[0] for r in results if len(r.response)]
    assert responses and all(r.result.result.success for r in responses)


def test_learning_bag_holds_the_improvement_chain_and_the_lesson_in_the_next_prompt():
    session = RecordedSession.load(BAGS / "learning_episode")
    teacher = session.completions_for("improvement")  # the chain's four answers, then the distilled knowledge
    assert len(teacher) == 5 and teacher[3].text.startswith(">>> wait_for_trigger()") and '"kind": "preference"' in teacher[4].text
    # the person's "No, I meant the green block": first what it depends on (the words alone), then plan level
    dependence, handler = session.completions_for("correction")
    assert dependence.text.startswith("(b)") and 'Correction: "No, I meant the green block.' in dependence.prompt
    assert '"level": "plan"' in handler.text and "No, I meant the green block" in handler.prompt
    robot = session.completions_for("interaction")
    last_prompt = robot[-2].prompt  # the one answered with the improved behaviour
    assert "# learned lesson, applies" in last_prompt and teacher[3].text in last_prompt
    shown = last_prompt.split(SYSTEM_END, 1)[1]
    assert "# What I know:\n# - When the person says the block without a colour, they mean the green block." in shown
    assert "# learned lesson" not in robot[1].prompt and "# What I know" not in robot[1].prompt.split(SYSTEM_END, 1)[1]
    assert "# correction: plan-level, about the initial request: When the person says the block" in robot[2].prompt
    world = session.final_world.by_name()
    assert world["green block"].supported_by == "yellow bowl" and world["red block"].supported_by == "blue bowl"


def test_household_bag_holds_a_skill_level_correction_and_the_distilled_parameter():
    """'That was too fast': the handler re-ran the drive slower, the parameter was distilled, and the next
    prompts about the counter (not the one about the table) show it."""
    session = RecordedSession.load(BAGS / "household_slowly_to_counter")
    lines = session.transcript
    note = next(line for line in lines if line.startswith("# correction: "))
    assert note == "# correction: skill-level, about the last action: move_to('counter') again with speed_factor=0.2222 (was 0.5)"
    assert lines[lines.index(note) + 1] == ">>> move_to('counter', speed_factor=0.2222)"
    calls = session.completions_for("correction")  # the correction, then two new requests that are none; each in two steps
    dependence, handler = calls[0::2], calls[1::2]
    assert [d.text[-3:] for d in dependence] == ["(a)", "(c)", "(c)"] and all('Correction: "' in d.prompt for d in dependence)
    assert len(handler) == 3 and '"level": "skill"' in handler[0].text and all('"correction": false' in c.text for c in handler[1:])
    improvement = session.completions_for("improvement")  # the chain's four answers, then the distilled knowledge:
    assert len(improvement) == 6  # the skill prompt's (after the corrected drive), then the plan prompt's
    assert "The skill: move_to" in improvement[4].prompt and '"speed_factor": 0.2222' in improvement[4].text
    blocks = {c.prompt.split("'text': ")[-1].split("'")[1]: c.prompt.split(SYSTEM_END, 1)[1].split("# Example", 1)[0]
              for c in session.completions_for("interaction")}
    learned = "# - Drive to the counter with speed_factor=0.2222 (learned from: 'that was too fast."
    assert learned in blocks["now go to the counter"] and learned not in blocks["go to the table"]
    assert "# - The person wants the robot to drive slowly to the counter." in blocks["go to the table"]  # a preference: always


def test_recording_a_running_stack(stack, client, tmp_path):
    """start_recording on the shared test stack: the spec names its scene, skill goals are recorded."""
    from teachbot.nodes.session_recording import start_recording

    client.reset(scene_yaml="objects:\n  - {category: block, color: red, position: [-0.1, -0.45]}\n")
    recording = start_recording(stack, tmp_path / "bag", storage="sqlite3")
    try:
        assert client.call("wait", duration=0.1).success
    finally:
        path = recording.stop()
    session = RecordedSession.load(path)
    assert session.storage == "sqlite3"
    assert "red block" in session.spec.scene_yaml
    assert session.topics["/skills/wait/_action/send_goal/_service_event"][1] >= 1
    assert session.final_world.by_name()["red block"].supported_by == ""
