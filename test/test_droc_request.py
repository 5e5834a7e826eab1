"""The DROC interaction double's reading of a request (teachbot.evaluation.droc_request) and the extraction
double's facts: they decide from the words they are shown, never from a task's file."""

from __future__ import annotations

import inspect

from teachbot.evaluation.droc_doubles import InteractionDouble
from teachbot.evaluation.droc_extraction_double import facts
from teachbot.evaluation.droc_request import RequestReader, is_a, ruled_out
from teachbot.evaluation.droc_tasks import Call

LISTED = "list_objects()"
PLACES = ["table", "counter", "sink", "fridge", "cupboard", "shelf", "workbench", "person"]


def read(request: str, objects: list[str], hints: tuple[str, ...] = (), **looks: list[str]) -> tuple[Call, ...] | str:
    seen = {LISTED: objects, **{(k if k == "list_locations()" else f"list_objects({k!r})"): v for k, v in looks.items()}}
    return RequestReader("household", seen, hints, lambda words, candidates: candidates[-1]).plan(request)


def calls(plan: tuple[Call, ...] | str) -> list[tuple[str, dict]]:
    assert not isinstance(plan, str), plan
    return [(c.skill, dict(c.fields)) for c in plan]


def test_the_double_is_handed_nothing_but_its_prompts() -> None:
    double = InteractionDouble()
    assert not hasattr(double, "begin") and not hasattr(double, "variant") and not hasattr(double, "task")
    assert list(inspect.signature(double.answer).parameters) == ["prompt"]


def test_it_looks_before_it_plans() -> None:
    assert RequestReader("household", {}).plan("bring me my cup") == LISTED
    assert RequestReader("tabletop", {}).plan("put the block in the blue bowl") == "get_obj_names()"
    assert read("clear the table", ["pear"]) == "list_objects('table')"
    assert read("put the apple away", ["apple"]) == "list_locations()"  # where it goes is not said: look where things can go


def test_which_thing_a_request_means() -> None:
    cups = ["red cup", "blue cup"]
    assert calls(read("bring me my cup", cups)) == [("grasp", {"object_name": "blue cup"}), ("handover_object_to_human", {})]
    hint = ("When the person says 'bring me my cup', they mean the red cup, not the blue cup.",)
    assert calls(read("bring me my cup", cups, hint))[0] == ("grasp", {"object_name": "red cup"})
    # the newest correction weighs more than the knowledge
    assert calls(read("bring me my cup", cups, ("I meant the blue cup.", *hint)))[0][1]["object_name"] == "blue cup"
    # a kind of thing ("a drink") and what the person rules out
    drinks = ["milk", "apple juice", "sponge"]
    assert calls(read("bring me something to drink", drinks, ("The person does not drink apple juice.",)))[0][1] == {"object_name": "milk"}
    assert calls(read("bring me a drink", drinks, ("No, not the milk.",)))[0][1] == {"object_name": "apple juice"}
    assert is_a("pear", "fruit") and is_a("red cup", "cups") and not is_a("sponge", "drink")
    assert ruled_out("I don't drink milk", "milk") and not ruled_out("I meant the milk", "milk")


def test_where_a_thing_goes_and_what_comes_first() -> None:
    plan = read("put the apple away", ["apple"], ("Fruit goes on the counter.",))
    assert calls(plan) == [("grasp", {"object_name": "apple"}), ("place_object", {"location": "counter"})]
    guessed = read("put the apple away", ["apple"], (), **{"list_locations()": PLACES})
    assert calls(guessed)[1] == ("place_object", {"location": "workbench"})  # a guess (here: the last place but the person)
    cleared = read("clear the table", ["pear", "banana", "mug"], ("Fruit goes on the counter.",), table=["pear", "banana"])
    assert calls(cleared) == [("grasp", {"object_name": "pear"}), ("place_object", {"location": "counter"}),
                              ("grasp", {"object_name": "banana"}), ("place_object", {"location": "counter"})]
    full = ("The shelf is full. Put it on the workbench instead.",)
    assert calls(read("the glass goes on the shelf", ["glass"]))[1] == ("place_object", {"location": "shelf"})
    assert calls(read("the glass goes on the shelf", ["glass"], full))[1] == ("place_object", {"location": "workbench"})
    first = ("Things in the fridge can be taken out only after opening it: open the fridge first.",)
    assert read("bring me the milk", ["milk"], first) == "list_objects('fridge')"
    assert calls(read("bring me the milk", ["milk"], first, fridge=["milk"]))[0] == ("open", {"thing": "fridge"})
    assert calls(read("bring me the milk", ["milk"], first, fridge=[]))[0] == ("grasp", {"object_name": "milk"})


def test_the_extraction_double_states_what_a_correction_says() -> None:
    said = facts("No, not the milk. I don't drink milk, I meant the orange juice.", "bring me a drink")
    assert [(f["kind"], f["scope"]) for f in said] == [("constraint", "task"), ("preference", "always")]
    assert "they mean the orange juice, not the milk" in said[0]["text"] and said[1]["text"] == "The person does not drink milk."
    [fridge] = facts("The fridge is closed, you cannot take anything out of it like that. Open the fridge first.", "x")
    assert fridge["kind"] == "robot_constraint" and "open the fridge first" in fridge["text"]
    [fruit] = facts("Not there. Fruit goes on the counter.", "put the apple away")
    assert (fruit["kind"], fruit["text"]) == ("preference", "Fruit goes on the counter.")
    [shelf] = facts("The shelf is full, nothing more fits on it. Put it on the workbench instead.", "x")
    assert shelf["kind"] == "object_state" and shelf["object"] == "shelf" and "workbench instead" in shelf["text"]
    assert facts("You did not get it. Please try again.", "x") == []


def test_the_person_answers_a_question_from_what_they_want() -> None:
    from teachbot.evaluation.droc_tasks import load_tasks

    tasks = {t.id: t for t in load_tasks()}
    cup = tasks["my_cup"].iteration(1)[0]
    assert tasks["my_cup"].answer(cup, "Which cup do you mean, the red cup or the blue cup?") == "I mean the blue cup."
    apple = tasks["fruit_on_the_counter"].iteration(1)[0]
    assert tasks["fruit_on_the_counter"].answer(apple, "Where should I put the apple?") == "On the counter."
    block = tasks["the_block_i_mean"].iteration(1)[0]
    assert tasks["the_block_i_mean"].answer(block, "Where does it go?") == "In the blue bowl."
    assert tasks["the_block_i_mean"].answer(block, "Which block?") == "I mean the green block."
    assert tasks["my_cup"].answer(cup, "Shall I go now?") == "Please bring me my cup."  # nothing more to say
