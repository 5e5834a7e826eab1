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

# the household kitchen (config/household/scenes/kitchen.yaml) as the sessions' explicit scene
KITCHEN = """objects:
  - {name: apple juice, type: apple_juice, at: counter, offset: [-0.08, 0.36]}
  - {name: orange juice, type: orange_juice, at: counter, offset: [-0.08, 0.2]}
  - {name: red cup, type: cup, color: red, at: counter, offset: [-0.08, -0.2]}
  - {name: blue cup, type: cup, color: blue, at: counter, offset: [-0.08, -0.36]}
  - {name: sponge, type: sponge, at: sink, offset: [-0.06, 0.0]}
  - {name: knife, type: knife, at: workbench, offset: [-0.1, 0.25]}
states:
  table: {clean: false}
"""
HOUSEHOLD = {"api_profile": "household", "dialog_timeout": 60.0}

SLOW_LESSON = """>>> wait_for_trigger()
{'type': 'dialog', 'text': 'go to the counter'}
>>> move_to('counter', speed_factor=0.2)
'success'
>>> wait_for_trigger()"""

# DROC's correction handler answers as chat models do: a sentence of reasoning, then the JSON object
WRONG_BOWL = ('The robot used the wrong bowl: that changes what the plan does, not how a skill moves.\n'
              '{"correction": true, "level": "plan", "history": "initial", "skill": "", "object": "", "parameter": "", '
              '"direction": "", "amount": "", "value": null, "absolute": false, '
              '"constraint": "Put the red block in the blue bowl, not the yellow one."}')
WRONG_BLOCK = ('```json\n{"correction": true, "level": "plan", "history": "initial", "skill": "", "object": "", '
               '"parameter": "", "direction": "", "amount": "", "value": null, "absolute": false, '
               '"constraint": "When the person says the block, use the green block."}\n```')
TOO_FAST = ('The person finds the drive too fast: that is the speed of move_to, a skill parameter, by a lot.\n```json\n'
            '{"correction": true, "level": "skill", "history": "last", "skill": "move_to", "object": "counter", '
            '"parameter": "speed_factor", "direction": "-", "amount": "large", "value": null, "absolute": false, '
            '"constraint": ""}\n```')
NEW_REQUEST = ('<think>The person asks for something new; nothing about the last drive is wrong.</think>\n'
               '{"correction": false, "level": "none", "history": "none", "skill": "", "object": "", "parameter": "", '
               '"direction": "", "amount": "", "value": null, "absolute": false, "constraint": ""}')
# and before each of those, its first step: what the correction depends on, from the words alone (prompts/droc_dependence.txt)
ON_THE_REQUEST, ON_THE_LAST, ON_NOTHING = "(b) Initial interaction.", "<think>'That' is the last drive.</think>\n(a)", "(c)"
# and the extraction answers (the improvement model distils knowledge after the chain, or alone at the end of a task)
BOWL_RULE = ('```json\n[{"kind": "constraint", "text": "Use the bowl the person names by its colour.", "object": "", '
             '"skill": "", "parameters": {}, "scope": "task"}]\n```')
BLOCK_RULE = ('The person corrected which block was meant.\n[{"kind": "preference", "text": "When the person says the block '
              'without a colour, they mean the green block.", "object": "green block", "skill": "", "parameters": {}, '
              '"scope": "always"}]')
# the extractor's skill prompt (after the corrected move_to), answered as the prompt asks: reasoning, then one object
SLOW_SKILL = ('Reasoning: the person wanted the drive to the counter slower. The re-run call move_to(\'counter\', '
              'speed_factor=0.2222) succeeded, so speed_factor 0.2222 worked for the counter.\n'
              '{"skill": "move_to", "object": "counter", "parameters": {"speed_factor": 0.2222}, "object_state": ""}')
SLOW_RULE = ('[{"kind": "preference", "text": "The person wants the robot to drive slowly to the counter.", "object": "", '
             '"skill": "", "parameters": {}, "scope": "always"}]')

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
    correction: tuple[str, ...] = ()  # the correction handler's answers (DROC)
    scene_yaml: str = SCENE
    interaction_overrides: dict[str, object] = field(default_factory=lambda: {"dialog_timeout": 60.0})
    robot_profile: str = "panda_sim"


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
        correction=(ON_THE_REQUEST, WRONG_BOWL), improvement=(BOWL_RULE,),
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
                     IMPROVED, BLOCK_RULE),
        correction=(ON_THE_REQUEST, WRONG_BLOCK),
    ),
    # the core paper's household demonstrations (issue 11)
    ScriptedSession(
        "household_bring_juice", "household: bring me some juice (fetch from the counter and hand it over)",
        interaction=("list_objects()", "grasp('apple juice')", "move_to('person')", "handover_object_to_human()",
                     "say('Here is your apple juice.')", "wait_for_trigger()"),
        person=("bring me some juice",),
        scene_yaml=KITCHEN, interaction_overrides=HOUSEHOLD, robot_profile="household_sim",
    ),
    ScriptedSession(
        "household_clean_table", "household: clean the table with the sponge and put it back",
        interaction=("grasp('sponge')", "wipe('table')", "get_object_state('table')", "place_object('sink')",
                     "say('The table is clean and the sponge is back in the sink.')", "wait_for_trigger()"),
        person=("clean the table",),
        scene_yaml=KITCHEN, interaction_overrides=HOUSEHOLD, robot_profile="household_sim",
    ),
    ScriptedSession(
        "household_slowly_to_counter", "household: go to the counter, but slowly, learned with its scope",
        interaction=("move_to('counter')", "wait_for_trigger()", "learn_from_interaction()",
                     "say('I will go slowly when I go to the counter.')", "wait_for_trigger()",
                     "move_to('table')", "wait_for_trigger()",
                     "move_to('counter', speed_factor=0.2)", "wait_for_trigger()"),
        person=("go to the counter", "that was too fast. Go slowly to the counter, remember that next time.",
                "go to the table", "now go to the counter"),
        improvement=('The robot drove too fast.\n```json\n{"problem": true, "description": "The robot went to the counter at '
                     'the default speed; the person wants it to go there slowly."}\n```',
                     "When going to the counter, use speed_factor=0.2.",
                     "Only when the destination is the counter; other routes keep their speed.",
                     SLOW_LESSON, SLOW_SKILL, SLOW_RULE),
        correction=(ON_THE_LAST, TOO_FAST, ON_NOTHING, NEW_REQUEST, ON_NOTHING, NEW_REQUEST),
        scene_yaml=KITCHEN, interaction_overrides=HOUSEHOLD, robot_profile="household_sim",
    ),
)}
