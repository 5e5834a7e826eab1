"""The scripted sessions the shipped bags (test/bags/) are recorded from: LLM answers, the person's
utterances and the scene, as data. tools/make_test_bags.py records them; test/test_replay.py replays
them. ROS-free."""

from __future__ import annotations

from dataclasses import dataclass, field

SCENE = """objects:
  - {category: block, color: red, position: [-0.1, -0.45]}
  - {category: block, color: green, position: [0.12, -0.6]}
  - {category: bowl, color: blue, position: [0.1, -0.35]}
  - {category: bowl, color: yellow, position: [-0.12, -0.62]}
"""

IMPROVED = """>>> wait_for_trigger()
{'type': 'dialog', 'text': 'put the block in the blue bowl'}
>>> put_first_on_second('green block', 'blue bowl')
'success'
>>> wait_for_trigger()"""


@dataclass(frozen=True)
class ScriptedSession:
    """One session: what the interaction LLM answers, what the person says, what the teacher LLM answers.

    The console itself runs the first wait_for_trigger(); the LLM's answers start after the first request."""

    name: str
    title: str
    interaction: tuple[str, ...]
    person: tuple[str, ...]
    improvement: tuple[str, ...] = ()
    scene_yaml: str = SCENE
    interaction_overrides: dict[str, object] = field(default_factory=lambda: {"dialog_timeout": 60.0})


SESSIONS: dict[str, ScriptedSession] = {s.name: s for s in (
    ScriptedSession(
        "plain_task", "a plain task: one instruction, done right",
        interaction=("put_first_on_second('red block', 'blue bowl')",
                     "say('The red block is in the blue bowl.')", "wait_for_trigger()"),
        person=("put the red block in the blue bowl",),
    ),
    ScriptedSession(
        "corrected_task", "a corrected task: the wrong bowl, the person corrects, the robot fixes it",
        interaction=("put_first_on_second('red block', 'yellow bowl')", "wait_for_trigger()",
                     "put_first_on_second('red block', 'blue bowl')", "wait_for_trigger()"),
        person=("put the red block in the blue bowl", "that is the yellow bowl; I said the blue one"),
    ),
    ScriptedSession(
        "learning_episode", "a learning episode followed by the improved behaviour on the next request",
        interaction=("put_first_on_second('red block', 'blue bowl')", "wait_for_trigger()",
                     "learn_from_interaction()", "wait_for_trigger()",
                     "put_first_on_second('green block', 'yellow bowl')", "wait_for_trigger()"),
        person=("put the block in the blue bowl", "No, I meant the green block. Remember that next time.",
                "put the block in the yellow bowl"),
        improvement=('The person wanted a different block.\n```json\n{"problem": true, "description": "The robot took the red '
                     'block, but the person meant the green block."}\n```',
                     "When the person says 'the block', take the green block.",
                     "Whenever the person does not say which block.",
                     IMPROVED),
    ),
)}
