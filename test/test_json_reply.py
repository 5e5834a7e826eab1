"""The one reader of JSON in model answers (teachbot.language.json_reply)."""

from teachbot.language.json_reply import bracketed, json_values, read_json


def test_nested_objects_are_read_whole():
    answer = 'Sure. {"correct": true, "why": {"object": "cup", "notes": ["a", "b"]}} done'
    assert read_json(answer, ("correct",)) == {"correct": True, "why": {"object": "cup", "notes": ["a", "b"]}}


def test_python_literals_and_json_names_in_any_case():
    assert read_json("{'Problem': TRUE, 'description': None}", ("problem",)) == {"problem": True, "description": None}


def test_reasoning_blocks_are_left_out():
    answer = '<think>maybe {"correct": false}</think>\n```json\n{"correct": true}\n```'
    assert read_json(answer, ("correct",)) == {"correct": True}


def test_the_first_object_with_a_wanted_key_wins():
    answer = '{"note": 1} then {"level": "plan", "correction": "x"}'
    assert read_json(answer, ("correction",)) == {"level": "plan", "correction": "x"}
    assert read_json(answer) == {"note": 1}
    assert read_json("no json here", ("correction",)) is None


def test_lists_and_quoted_brackets():
    assert next(json_values("indices: [0, 2, [5]] and [7]", list)) == [0, 2, [5]]
    assert list(bracketed('{"a": "}{"} {"b": 1}')) == ['{"a": "}{"}', '{"b": 1}']


def test_an_answer_cut_short_gives_the_complete_objects_only():
    assert list(json_values('[{"kind": "a"}, {"kind": "b", "x": [1, 2')) == [{"kind": "a"}]
