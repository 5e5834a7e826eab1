"""The household object catalog (config/household/objects.yaml) and the state rules: pure Python, no physics."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from teachbot.errors import ConfigError, InvalidArgumentError, SceneSpecError, UnknownObjectError
from teachbot.paths import config_path
from teachbot.world.household_objects import (
    MAX_GRASP_WIDTH,
    PROPERTIES,
    Catalog,
    ObjectStates,
    StateError,
    StateRules,
    Thing,
    tint,
)

REQUIRED_TYPES = {
    "cup", "glass", "apple_juice", "orange_juice", "milk", "apple", "banana", "pear", "orange", "sponge", "knife",
    "bowl", "plate", "box", "cube", "ball", "bread",
}  # fmt: skip


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.load()


@pytest.fixture
def rules(catalog: Catalog) -> StateRules:
    """A small kitchen: places registered as things next to catalog objects."""
    return StateRules(
        [
            Thing("fridge", {"openable", "container"}),
            Thing("drawer", ["openable", "container"]),
            Thing("table", ["cleanable"], {"clean": False}),
            Thing("counter", ["cleanable"]),
            Thing("stove", ["togglable"]),
            catalog.make("red cup", "cup", color="red"),
            catalog.make("apple", "apple"),
            catalog.make("knife", "knife"),
            catalog.make("sponge", "sponge"),
            catalog.make("milk", "milk"),
            catalog.make("box", "box"),
            catalog.make("lamp", "lamp"),
        ],
        liquids=catalog.liquids,
    )


def _cause(exc_info: pytest.ExceptionInfo[StateError]) -> tuple[str, str]:
    return exc_info.value.cause, str(exc_info.value)


# ---- catalog ---------------------------------------------------------------------------------------------


def test_catalog_loads_the_required_types_with_sane_geometry(catalog: Catalog) -> None:
    assert catalog.source == config_path("household", "objects.yaml")
    assert set(catalog.names()) >= REQUIRED_TYPES
    assert catalog.types_with("togglable"), "a lamp or kettle must be togglable"
    for name in catalog.names():
        t = catalog.type(name)
        assert len(t.size) == {"box": 3, "cylinder": 2, "sphere": 1}[t.shape], name
        assert t.mass > 0 and all(0 <= c <= 1 for c in t.rgb), name
        assert t.properties <= set(PROPERTIES), name


def test_every_pickable_type_fits_the_gripper(catalog: Catalog) -> None:
    pickable = catalog.types_with("pickable")
    assert {"cup", "apple", "knife", "sponge", "cube", "milk", "bread"} <= set(pickable)
    for name in pickable:
        t = catalog.type(name)
        assert t.grasp_width <= MAX_GRASP_WIDTH == 0.07, f"{name} is {t.grasp_width} m wide"
    assert catalog.type("cube").size == (0.04, 0.04, 0.04)
    assert catalog.type("banana").grasp_width == pytest.approx(0.035)  # a box's shorter horizontal side


def test_catalog_properties_and_default_states(catalog: Catalog) -> None:
    assert catalog.type("box").has("openable") and not catalog.type("cup").has("openable")
    assert set(catalog.types_with("sliceable")) >= {"apple", "banana", "pear", "orange", "bread"}
    assert "knife" in catalog.types_with("tool") and "sponge" in catalog.types_with("tool")
    assert catalog.type("cup").default_states == {"filled": False, "clean": True}
    assert catalog.type("apple juice") is catalog.type("apple_juice")  # people's spelling works too
    with pytest.raises(InvalidArgumentError, match="unknown property 'shiny'"):
        catalog.types_with("shiny")
    for name in ("red", "green", "blue", "yellow"):
        assert len(catalog.colors[name]) == 3


def test_unknown_type_lists_the_known_ones(catalog: Catalog) -> None:
    with pytest.raises(SceneSpecError) as exc_info:
        catalog.type("spatula")
    message = str(exc_info.value)
    assert "unknown object type 'spatula'" in message
    assert all(name in message for name in ("apple", "cup", "knife", "sponge"))


def test_make_gives_a_thing_in_its_default_states_and_colour(catalog: Catalog) -> None:
    cup = catalog.make("red cup", "cup", color="red")
    assert cup.kind == "cup" and cup.rgb == catalog.colors["red"] and cup.has("fillable")
    assert cup.states.to_dict() == {"clean": True, "filled": False, "held": False}
    assert cup.states.describe() == "clean, empty"
    milk = catalog.make("milk", "milk")
    assert milk.states.to_dict() == {"filled": True, "held": False, "contents": "milk"}
    assert milk.states.describe() == "filled with milk"
    assert catalog.make("box", "box").states.describe() == "closed"
    assert catalog.make("blue cube", "cube", "blue").states.describe() == ""
    with pytest.raises(SceneSpecError, match="unknown colour 'mauve'.*red"):
        catalog.make("mauve cup", "cup", "mauve")


def test_things_for_places_take_default_states() -> None:
    fridge = Thing("fridge", ["openable"])
    assert fridge.states.to_dict() == {"open": False} and fridge.kind == "fridge"
    table = Thing("table", ["cleanable"], {"clean": False})
    assert table.states.describe() == "dirty"
    assert Thing("counter", ["cleanable"]).states.describe() == "clean"  # clean unless told otherwise
    assert ObjectStates.for_properties(["togglable", "sliceable"]).to_dict() == {"on": False, "sliced": False}
    with pytest.raises(SceneSpecError, match="thing 'sofa': unknown property 'comfy'"):
        Thing("sofa", ["comfy"])


# ---- state rules -----------------------------------------------------------------------------------------


def test_open_and_close(rules: StateRules) -> None:
    rules.open("fridge")
    assert rules.thing("fridge").states.open is True
    with pytest.raises(StateError) as exc_info:
        rules.open("fridge")
    assert _cause(exc_info) == ("already_open", "the fridge is already open")
    rules.close("fridge")
    with pytest.raises(StateError) as exc_info:
        rules.close("fridge")
    assert _cause(exc_info) == ("already_closed", "the fridge is already closed")
    rules.open("box")
    assert rules.thing("box").states.describe() == "open"


def test_opening_what_is_not_openable_names_what_is(rules: StateRules) -> None:
    with pytest.raises(StateError) as exc_info:
        rules.open("red cup")
    assert _cause(exc_info) == ("not_openable", "cannot open 'red cup': it is not openable (openable here: fridge, drawer, box)")
    assert rules.thing("red cup").states.open is None
    empty = StateRules([Thing("table", ["cleanable"])])
    with pytest.raises(StateError, match=r"cannot close 'table': it is not openable \(nothing here is openable\)"):
        empty.close("table")


def test_toggle_and_switch(rules: StateRules) -> None:
    assert rules.toggle("lamp") is True and rules.thing("lamp").states.describe() == "on"
    assert rules.toggle("lamp") is False
    rules.switch("stove", on=True)
    with pytest.raises(StateError) as exc_info:
        rules.switch("stove", on=True)
    assert _cause(exc_info) == ("already_on", "the stove is already on")
    with pytest.raises(StateError) as exc_info:
        rules.toggle("apple")
    assert _cause(exc_info) == ("not_togglable", "cannot toggle 'apple': it is not togglable (togglable here: stove, lamp)")


def test_slicing_needs_a_knife(rules: StateRules, catalog: Catalog) -> None:
    with pytest.raises(StateError) as exc_info:
        rules.slice("apple", None)
    assert _cause(exc_info) == ("needs_tool", "cannot slice 'apple': hold a knife first: grasp('knife')")
    with pytest.raises(StateError) as exc_info:
        rules.slice("apple", "sponge")
    assert _cause(exc_info) == ("needs_tool", "cannot slice 'apple': put the sponge down, then hold a knife first: grasp('knife')")
    assert rules.thing("apple").states.sliced is False
    rules.slice("apple", "knife")
    assert rules.thing("apple").states.describe() == "sliced"
    with pytest.raises(StateError) as exc_info:
        rules.slice("apple", rules.thing("knife"))
    assert _cause(exc_info) == ("already_sliced", "the apple is already sliced")
    with pytest.raises(StateError, match="cannot slice 'red cup': it is not sliceable"):
        rules.slice("red cup", "knife")
    # a knife registered under another name is recognised by its type, and suggested by its name
    kitchen = StateRules([catalog.make("pear", "pear"), catalog.make("big knife", "knife")])
    with pytest.raises(StateError, match=r"grasp\('big knife'\)"):
        kitchen.slice("pear", None)
    kitchen.slice("pear", "big knife")
    assert kitchen.thing("pear").states.sliced is True


def test_wiping_needs_a_sponge(rules: StateRules) -> None:
    with pytest.raises(StateError) as exc_info:
        rules.wipe("table", None)
    assert _cause(exc_info) == ("needs_tool", "cannot wipe 'table': hold a sponge first: grasp('sponge')")
    with pytest.raises(StateError, match="put the knife down, then hold a sponge first"):
        rules.wipe("table", "knife")
    assert rules.thing("table").states.clean is False
    rules.wipe("table", "sponge")
    assert rules.thing("table").states.describe() == "clean"
    with pytest.raises(StateError) as exc_info:
        rules.wipe("table", "sponge")
    assert _cause(exc_info) == ("already_clean", "the table is already clean")
    rules.soil("red cup")
    assert rules.thing("red cup").states.describe() == "dirty, empty"
    rules.wipe("red cup", "sponge")
    with pytest.raises(StateError, match=r"cannot wipe 'apple': it is not cleanable \(cleanable here: table, counter, red cup\)"):
        rules.wipe("apple", "sponge")


def test_fill_and_empty(rules: StateRules) -> None:
    rules.fill("red cup", "apple juice")
    cup = rules.thing("red cup").states
    assert cup.filled is True and cup.contents == "apple_juice" and cup.describe() == "clean, filled with apple juice"
    with pytest.raises(StateError) as exc_info:
        rules.fill("red cup", "milk")
    assert _cause(exc_info) == ("already_filled", "the red cup is already filled with apple juice; empty('red cup') first")
    rules.empty("red cup")
    assert cup.filled is False and cup.contents is None
    with pytest.raises(StateError) as exc_info:
        rules.empty("red cup")
    assert _cause(exc_info) == ("already_empty", "the red cup is already empty")
    with pytest.raises(StateError) as exc_info:
        rules.fill("red cup", "beer")
    assert exc_info.value.cause == "unknown_liquid" and "milk" in str(exc_info.value)
    with pytest.raises(StateError, match="cannot fill 'apple': it is not fillable"):
        rules.fill("apple", "water")
    rules.empty("milk")
    assert rules.thing("milk").states.describe() == "empty"


def test_unknown_and_duplicate_names(rules: StateRules, catalog: Catalog) -> None:
    with pytest.raises(UnknownObjectError, match="unknown object or place 'sofa'; known: .*fridge"):
        rules.open("sofa")
    with pytest.raises(SceneSpecError, match="two things are called 'apple'"):
        rules.register(catalog.make("apple", "apple"))
    assert rules.names_with("openable") == ["fridge", "drawer", "box"]


# ---- tints -----------------------------------------------------------------------------------------------


def test_tints_follow_the_states(catalog: Catalog) -> None:
    base = catalog.type("plate").rgb
    clean = tint(base, {"clean": True}, catalog.tints)
    dirty = tint(base, {"clean": False}, catalog.tints)
    assert clean == (*base, 1.0)
    assert dirty != clean and sum(dirty[:3]) < sum(clean[:3]) - 0.3  # darker
    assert dirty[0] > dirty[2]  # brownish: more red than blue
    apple = catalog.type("apple").rgb
    assert sum(tint(apple, {"sliced": True}, catalog.tints)[:3]) > sum(apple) + 0.3  # lighter
    lamp = catalog.type("lamp").rgb
    assert sum(tint(lamp, {"on": True}, catalog.tints)[:3]) > sum(tint(lamp, {"on": False}, catalog.tints)[:3])
    cup = catalog.make("cup", "cup").states
    empty = tint(catalog.type("cup").rgb, cup, catalog.tints, catalog.liquids)
    cup.filled, cup.contents = True, "coffee"
    coffee = tint(catalog.type("cup").rgb, cup, catalog.tints, catalog.liquids)
    cup.contents = "milk"
    milk = tint(catalog.type("cup").rgb, cup, catalog.tints, catalog.liquids)
    assert sum(coffee[:3]) < sum(empty[:3]) - 0.5 and coffee != milk
    assert tint(base, {}, catalog.tints) == (*base, 1.0)  # a flag the thing lacks changes nothing


# ---- YAML errors -----------------------------------------------------------------------------------------


def _write(tmp_path: Path, mutate: Callable[[dict[str, Any]], object]) -> Path:
    data = yaml.safe_load(config_path("household", "objects.yaml").read_text())
    mutate(data)
    path = tmp_path / "objects.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d["types"]["cup"]["properties"].append("flyable"), "type 'cup': unknown property 'flyable'"),
        (lambda d: d["types"]["cup"].update(shape="pyramid"), "type 'cup': shape 'pyramid' is not one of box, cylinder, sphere"),
        (lambda d: d["types"]["cup"].update(size=[0.06]), "type 'cup': a cylinder needs size of 2 positive numbers"),
        (lambda d: d["types"]["cup"].update(size=[0.09, 0.1]), "type 'cup': pickable but 0.090 m wide"),
        (lambda d: d["types"]["apple"]["states"].update(filled=True), "type 'apple': state 'filled' needs the property 'fillable'"),
        (lambda d: d["types"]["lamp"].update(states={True: False}), "type 'lamp': state key True is a YAML boolean; quote it"),
        (lambda d: d["types"]["knife"].pop("mass"), "type 'knife': missing key 'mass'"),
        (lambda d: d["types"]["milk"].update(contents="beer"), "type 'milk': contents 'beer' is not a liquid"),
        (lambda d: d["colors"].update(red=[255, 0, 0]), "colors.red must be [r, g, b] with each in 0..1"),
        (lambda d: d["state_tints"].update(smelly={"amount": 0.1}), "state_tints.smelly: expected a state word"),
    ],
)
def test_yaml_errors_name_the_file_and_the_type(tmp_path: Path, mutate: Callable[[dict[str, Any]], object], expected: str) -> None:
    path = _write(tmp_path, mutate)
    with pytest.raises(ConfigError) as exc_info:
        Catalog.load(path)
    assert str(exc_info.value).startswith(str(path))
    assert expected in str(exc_info.value)


def test_a_bare_on_key_in_yaml_is_caught(tmp_path: Path) -> None:
    path = tmp_path / "objects.yaml"
    path.write_text("colors: {red: [1, 0, 0]}\ntypes:\n  lamp: {shape: sphere, size: [0.1], mass: 1, color: w, rgb: [1, 1, 1],"
                    " properties: [togglable], states: {on: false}}\n")  # fmt: skip
    with pytest.raises(ConfigError, match="type 'lamp': state key True is a YAML boolean"):
        Catalog.load(path)
    with pytest.raises(ConfigError, match="config file not found"):
        Catalog.load(tmp_path / "missing.yaml")
