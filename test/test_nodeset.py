"""The declarative node set (teachbot.nodes.nodeset) that both ``ros2 launch`` and the CLI build from.

launch and launch_ros are not installable here, so the launch files are checked twice: statically
(ast), and by running their generate_launch_description against small stand-ins for the launch API
injected into sys.modules, which record what the launch file builds.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from timing import pytest_timeout

from teachbot.errors import ConfigError
from teachbot.llm.factory import ROLES, role_settings
from teachbot.nodes.nodeset import ARGUMENTS, MODES, NODES, apply_llm_arguments, arguments, llm_settings, node_set, parse_arguments

ROOT = Path(__file__).resolve().parents[1]
LAUNCH_FILES = {mode: ROOT / "launch" / f"{mode}.launch.py" for mode in MODES}


def console_scripts() -> dict[str, str]:
    """setup.py's console_scripts, read statically."""
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "entry_points":
            specs = ast.literal_eval(node.value)["console_scripts"]
            return dict(tuple(part.strip() for part in spec.split("=", 1)) for spec in specs)
    raise AssertionError("setup.py has no entry_points")


def every_spec() -> list[Any]:
    """One spec of every node any mode can start (replay with a recording, recording on, LLM on)."""
    specs = {}
    for mode in MODES:
        values = {"console": True, "record": "/tmp/rec"} | ({"recording": "/tmp/rec"} if mode == "replay" else {})
        for spec in node_set(mode, values):
            specs[spec.name] = spec
    return list(specs.values())


@pytest.mark.parametrize("spec", every_spec(), ids=lambda s: s.name)
def test_every_node_has_its_entry_point_and_main(spec: Any) -> None:
    """`ros2 run teachbot <executable>` must reach the module whose class the CLI composes."""
    if spec.provided_by and not spec.available():
        pytest.skip(f"{spec.module} does not exist yet (part '{spec.provided_by}' is being written)")
    scripts = console_scripts()
    assert spec.executable in scripts, f"setup.py has no console script {spec.executable!r}"
    assert scripts[spec.executable] == f"{spec.module}:main"
    cls = spec.load_class()
    assert cls.__module__ == spec.module
    assert callable(sys.modules[spec.module].main)


def test_sim_and_robot_modes_differ_only_in_the_simulator() -> None:
    """robot.launch.py swaps the sim node for the real drivers and nothing else changes (DESIGN §2)."""
    sim = {s.name: s for s in node_set("sim", {"console": True})}
    robot = {s.name: s for s in node_set("robot", {"console": True})}
    assert list(sim) == ["sim", "skills", "perception", "memory", "issue_detection", "improvement", "interaction_manager"]
    assert list(robot) == ["skills", "perception", "memory", "issue_detection", "improvement", "interaction_manager"]
    assert sim["skills"].parameters == {"robot_profile": "panda_sim"}
    assert robot["skills"].parameters == {"robot_profile": "panda_real"}
    assert robot["perception"].parameters == {"world_state_service": ""}  # no simulator ground truth
    for name in robot:
        if name not in ("skills", "perception"):
            assert sim[name].parameters == robot[name].parameters, name
    assert sim["sim"].parameters == {"robot_profile": "panda_sim", "gui": False}


def test_llm_nodes_run_only_when_an_llm_is_asked_for() -> None:
    """Without an LLM the improvement and interaction manager nodes would fail for want of a key."""
    bare = [s.name for s in node_set("sim")]
    assert bare == ["sim", "skills", "perception", "memory"]
    for values in ({"console": "true"}, {"llm_backend": "openai"}, {"llm_model": "llama3"},
                   {"llm_base_url": "http://127.0.0.1:11434/v1"}, {"llm_config": "my_llm.yaml"}):
        names = [s.name for s in node_set("sim", values)]
        assert names[-2:] == ["improvement", "interaction_manager"], values
    im = {s.name: s for s in node_set("robot", {"llm_model": "qwen", "llm_base_url": "http://127.0.0.1:8000/v1"})}
    assert im["interaction_manager"].parameters == {"llm_model": "qwen", "llm_base_url": "http://127.0.0.1:8000/v1"}
    assert im["improvement"].parameters == im["interaction_manager"].parameters


def test_arguments_map_onto_node_parameters() -> None:
    specs = {s.name: s for s in node_set("sim", {
        "seed": "7", "scene_file": "/s.yaml", "real_time_factor": "0", "gui": "true", "camera": "false",
        "memory": "/data/learned", "perception_backend": "owlv2", "robot_profile": "my_arm",
    })}
    assert specs["sim"].parameters == {"robot_profile": "my_arm", "gui": True, "seed": 7, "scene_file": "/s.yaml",
                                       "real_time_factor": 0.0, "camera_enabled": False}
    assert specs["memory"].parameters == {"learned_dir": "/data/learned"}
    assert specs["perception"].parameters == {"backend": "owlv2"}
    robot = {s.name: s for s in node_set("robot", {"perception_backend": "yolo_world"})}
    assert robot["perception"].parameters == {"backend": "yolo_world", "world_state_service": ""}
    assert specs["skills"].parameters == {"robot_profile": "my_arm"}


def test_recording_and_replay_entries() -> None:
    assert "recorder" not in [s.name for s in node_set("sim")]
    recorder = node_set("sim", {"record": "out/rec"})[-1]
    assert (recorder.name, recorder.provided_by) == ("recorder", "recording")
    assert recorder.parameters == {"output": "out/rec", "robot_profile": "panda_sim"}  # whose skills it records
    replay = {s.name: s for s in node_set("replay", {"recording": "out/rec", "real_time_factor": 0})}
    assert list(replay) == ["sim", "skills", "perception", "memory", "issue_detection", "improvement", "interaction_manager",
                            "replay"]
    assert replay["replay"].parameters == {"recording": "out/rec", "check": True}
    assert node_set("replay", {"recording": "out/rec", "check": "false"})[-1].parameters["check"] is False
    # the LLM nodes answer from the recording's completions ...
    for name in ("improvement", "interaction_manager"):
        assert replay[name].parameters == {"llm_backend": "scripted", "llm_model": "out/rec"}, name
    settings = llm_settings(**replay["interaction_manager"].parameters)
    assert {(role_settings(settings, r)["backend"], role_settings(settings, r)["replay"]) for r in ROLES} == {("scripted", "out/rec")}
    # ... unless the command line names another LLM
    live = {s.name: s for s in node_set("replay", {"recording": "out/rec", "llm_model": "qwen", "llm_base_url": "http://h/v1"})}
    assert live["interaction_manager"].parameters == {"llm_model": "qwen", "llm_base_url": "http://h/v1"}
    with pytest.raises(ConfigError, match="replay needs a recording"):
        node_set("replay")


def test_replay_node_is_the_replay_modes_node(ros_context: None) -> None:
    """The replay mode's last node is a real ReplayNode whose ROS parameters are the spec's (no skip)."""
    spec = node_set("replay", {"recording": str(ROOT / "test" / "bags" / "plain_task"), "check": "false"})[-1]
    assert spec.available()
    node = spec.create()
    try:
        assert type(node).__name__ == "ReplayNode" and node.get_name() == "replay"
        assert {name: node.get_parameter(name).value for name in spec.parameters} == spec.parameters
        assert node.recorded.user == ["put the red block in the blue bowl"]
    finally:
        node.close()
        node.destroy_node()


def test_argument_errors_say_what_is_wrong() -> None:
    with pytest.raises(ConfigError, match="seed: expected int"):
        node_set("sim", {"seed": "three"})
    with pytest.raises(ConfigError, match="gui: expected true or false"):
        node_set("sim", {"gui": "maybe"})
    with pytest.raises(ConfigError, match="unknown argument.*scene_file"):
        node_set("robot", {"scene_file": "x.yaml"})  # a real arm has no simulated scene
    with pytest.raises(ConfigError, match="unknown mode"):
        node_set("hardware")
    with pytest.raises(ConfigError, match="parameters for node"):
        node_set("robot", extra_parameters={"sim": {"gui": True}})


def test_defaults_come_from_the_config_files() -> None:
    """An empty argument passes no parameter, so config/*.yaml decides; the profile defaults per mode."""
    assert parse_arguments("sim")["robot_profile"] == "panda_sim"
    assert parse_arguments("robot")["robot_profile"] == "panda_real"
    assert parse_arguments("sim", {"robot_profile": ""})["robot_profile"] == "panda_sim"
    assert node_set("sim", {"seed": "", "real_time_factor": None})[0].parameters == {"robot_profile": "panda_sim", "gui": False}
    assert {a.name for a in arguments("robot")} == {a.name for a in ARGUMENTS if "robot" in a.modes}


def test_llm_arguments_override_every_role() -> None:
    raw = {"llm": {"defaults": {"backend": "openai", "model": "gpt-4o-mini", "base_url": ""},
                   "roles": {"improvement": {"model": "gpt-4o", "max_tokens": 2048}, "interaction": {}}}}
    out = apply_llm_arguments(raw, "", "llama3.1", "http://127.0.0.1:11434/v1")
    for role in ROLES:
        settings = role_settings(out, role)
        assert (settings["model"], settings["base_url"]) == ("llama3.1", "http://127.0.0.1:11434/v1"), role
    assert role_settings(out, "improvement")["max_tokens"] == 2048
    assert raw["llm"]["roles"]["improvement"]["model"] == "gpt-4o"  # the input is not changed
    local = apply_llm_arguments(raw, "transformers", "/models/qwen", "")
    assert {role_settings(local, r)["backend"] for r in ROLES} == {"transformers"}
    assert role_settings(local, "interaction")["model_path"] == "/models/qwen"
    assert apply_llm_arguments(raw) is raw
    with pytest.raises(ConfigError, match="openai backend only"):
        apply_llm_arguments(raw, "scripted", "", "http://127.0.0.1:1/v1")


# --------------------------------------------------------------------------- launch files
def test_launch_files_use_the_node_set() -> None:
    """Each launch file is the node set of its own mode and declares nothing by hand."""
    assert set(LAUNCH_FILES) == set(MODES)
    for mode, path in LAUNCH_FILES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imports = {(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        assert ("teachbot.nodes.launching", "generate_launch_description") in imports, path
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
        modes = [c.args[0].value for c in calls if c.args and isinstance(c.args[0], ast.Constant)]
        assert modes == [mode], path
        assert not any(isinstance(c.func, ast.Name) and c.func.id in ("Node", "DeclareLaunchArgument") for c in calls)


class _Recorded:
    """Stand-in for a launch action: keeps its arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs


class _LaunchConfiguration:
    def __init__(self, name: str) -> None:
        self.name = name

    def perform(self, context: Any) -> str:
        return context.launch_configurations[self.name]


class _LaunchDescription(_Recorded):
    def add_action(self, action: Any) -> None:
        self.args[0].append(action)


def _fake_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    modules = {name: types.ModuleType(name) for name in ("launch", "launch.actions", "launch.substitutions",
                                                         "launch.event_handlers", "launch.events",
                                                         "launch_ros", "launch_ros.actions")}
    modules["launch"].LaunchDescription = _LaunchDescription
    for name in ("DeclareLaunchArgument", "OpaqueFunction", "LogInfo", "RegisterEventHandler", "EmitEvent"):
        setattr(modules["launch.actions"], name, type(name, (_Recorded,), {}))
    modules["launch.event_handlers"].OnProcessExit = type("OnProcessExit", (_Recorded,), {})
    modules["launch.events"].Shutdown = type("Shutdown", (_Recorded,), {})
    modules["launch.substitutions"].LaunchConfiguration = _LaunchConfiguration
    modules["launch_ros.actions"].Node = type("Node", (_Recorded,), {})
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)


@pytest.mark.parametrize(("mode", "values"), [
    ("sim", {}),
    ("sim", {"console": "true", "seed": "4", "llm_base_url": "http://127.0.0.1:8000/v1", "record": "/tmp/r"}),
    ("robot", {"robot_profile": "panda_real", "perception_backend": "owlv2", "memory": "/var/teachbot"}),
    ("replay", {"recording": "/tmp/session", "gui": "true"}),
])
def test_launch_file_builds_the_node_set(mode: str, values: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the launch file against stand-ins of launch/launch_ros: same arguments, same nodes, same parameters."""
    _fake_launch(monkeypatch)
    spec = importlib.util.spec_from_file_location(f"_launch_{mode}", LAUNCH_FILES[mode])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    description = module.generate_launch_description()
    entities = description.args[0]
    declared = {e.args[0]: e.kwargs["default_value"] for e in entities if type(e).__name__ == "DeclareLaunchArgument"}
    assert declared == {a.name: a.default_for(mode) for a in arguments(mode)}
    assert all(e.kwargs["description"] for e in entities if type(e).__name__ == "DeclareLaunchArgument")
    (opaque,) = [e for e in entities if type(e).__name__ == "OpaqueFunction"]
    context = types.SimpleNamespace(launch_configurations={**declared, **values})
    actions = opaque.kwargs["function"](context)

    expected = [s for s in node_set(mode, values) if not s.provided_by or s.available()]
    nodes = [a.kwargs for a in actions if type(a).__name__ == "Node"]
    assert [(n["executable"], n["name"], n["parameters"]) for n in nodes] == [
        (s.executable, s.name, [s.parameters]) for s in expected]
    assert all(n["package"] == "teachbot" for n in nodes)
    skipped = [a.kwargs["msg"] for a in actions if type(a).__name__ == "LogInfo"]
    assert len(skipped) == len(node_set(mode, values)) - len(expected)

    handlers = [e.args[0] for e in entities if type(e).__name__ == "RegisterEventHandler"]
    if mode != "replay":
        assert handlers == []
        return
    # the replay node's exit (its verdict) shuts the launch down; another node's exit does not
    (on_exit,) = [h.kwargs["on_exit"] for h in handlers if type(h).__name__ == "OnProcessExit"]
    exited = lambda executable, code: types.SimpleNamespace(cmd=[f"/opt/lib/teachbot/{executable}", "--ros-args"], returncode=code)
    assert on_exit(exited("sim", 0), context) is None
    for code, reason in ((0, "matches"), (1, "diverged")):
        (emit,) = on_exit(exited("replay", code), context)
        assert reason in emit.kwargs["event"].kwargs["reason"] and f"exit code {code}" in emit.kwargs["event"].kwargs["reason"]


# --------------------------------------------------------------------------- building the nodes
def _build_sim_set_and_check(learned: str) -> None:
    """Body of the test below; runs in a child process (see there)."""
    from teachbot.nodes.stack import InProcessStack
    from teachbot.ros_env import configure_loopback

    configure_loopback()
    specs = node_set("sim", {"real_time_factor": 0, "camera": False, "seed": 3, "memory": learned,
                             "llm_backend": "scripted", "perception_backend": "sim_ground_truth"})
    assert len(specs) == 7
    stack = InProcessStack.from_node_set(specs)
    stack.start()
    try:
        assert not stack.skipped, stack.skipped
        assert [n.get_name() for n in stack.nodes] == [s.name for s in specs]
        for spec in specs:
            node = stack.node(spec.name)
            for name, value in spec.parameters.items():
                assert node.get_parameter(name).value == value, (spec.name, name)
        assert stack.node("interaction_manager").core.model.name == "interaction:scripted"
        assert stack.node("memory").memory.store.learned_dir == Path(learned).resolve()
        # the console's own fallback for retrieval reads the memory node's store
        assert stack.node("interaction_manager").core.prompts.examples.local.learned_dir == learned
        assert stack.client.world_state().seed == 3
    finally:
        stack.stop()
    assert stack.nodes == []


def test_every_node_class_takes_its_parameters_in_process(tmp_path: Path) -> None:
    """The CLI's builder: every node of the sim set (LLM on, scripted) starts from its spec, and its
    ROS parameters hold the spec's values, so the same dict works as launch parameters.

    In a child process on a domain of its own: this test session's shared stack already runs a
    /sim and a /skills node, and a second one refuses to start next to it (as it should)."""
    env = {k: v for k, v in os.environ.items() if k != "ROS_DOMAIN_ID"}
    code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import test_nodeset as t; " \
           f"t._build_sim_set_and_check({str(tmp_path / 'learned')!r})"
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=pytest_timeout(240))
    assert run.returncode == 0, run.stderr[-4000:]


def test_bare_stack_is_the_sim_and_skills_of_the_node_set() -> None:
    """InProcessStack's old signature still means the sim and skills nodes, overrides on the sim node."""
    from teachbot.nodes.stack import InProcessStack

    stack = InProcessStack("panda_sim", real_time_factor=0.0, camera_enabled=False)
    assert [(s.name, s.parameters) for s in stack.specs] == [
        ("sim", {"robot_profile": "panda_sim", "gui": False, "real_time_factor": 0.0, "camera_enabled": False}),
        ("skills", {"robot_profile": "panda_sim"}),
    ]
    assert stack.with_sim
    arm_only = InProcessStack("panda_real", sim=False)
    assert [(s.name, s.parameters) for s in arm_only.specs] == [("skills", {"robot_profile": "panda_real"})]
    assert not arm_only.with_sim
    assert set(NODES) >= {s.name for s in every_spec()}
