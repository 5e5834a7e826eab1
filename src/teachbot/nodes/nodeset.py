"""Which nodes make up the robot, with which parameters: one declarative description for every launcher.

``ros2 launch teachbot sim.launch.py`` (launch/*.py through teachbot.nodes.launching) and ``teachbot sim``
(teachbot.nodes.stack.InProcessStack) both call :func:`node_set`, so the processes a ROS 2 install
starts and the nodes the CLI composes in one process can never drift apart.

Pure data and plain Python: no rclpy or launch import, so launch files, the CLI and tests can all read it.

    mode      nodes
    sim       sim, skills, perception, memory [+ issue_detection, improvement, interaction_manager with an LLM]
              [+ recorder] [+ web]
    robot     skills, perception, memory [+ issue_detection, improvement, interaction_manager with an LLM]
              [+ recorder] [+ web]
              (the arm's own drivers provide the profile's controller and camera topics)
    replay    the sim stack of a recorded session, improvement and interaction_manager answering from the
              recorded completions (llm_backend scripted, llm_model the recording), plus the replay node
              that plays the recorded person and checks the outcome

Arguments (:data:`ARGUMENTS`) are strings on the ``ros2 launch`` command line and typed values in
Python; an empty value means "as config/<node>.yaml says", so the YAML files stay the one source of
defaults and an argument only overrides what it names.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from teachbot.errors import ConfigError
from teachbot.llm.factory import load_llm_config
from teachbot.robot_profile import RobotProfile

MODES = ("sim", "robot", "replay")
PACKAGE = "teachbot"
DEFAULT_PROFILE = {"sim": "panda_sim", "robot": "panda_real", "replay": "panda_sim"}
WORLDS = ("tabletop", "household")
HOUSEHOLD_PROFILE = "household_sim"  # the robot of world:=household unless robot_profile names another
HOUSEHOLD_PERCEPTION = "perception_household"  # its perception config (observe: world_state)


@dataclass(frozen=True)
class Argument:
    """One launch argument / CLI option. ``kind`` converts the launch string; ``default`` is a string."""

    name: str
    kind: type
    default: str
    description: str
    modes: tuple[str, ...] = MODES

    def default_for(self, mode: str) -> str:
        """The default as ``ros2 launch`` shows it (the robot profile depends on the mode)."""
        return DEFAULT_PROFILE[mode] if self.name == "robot_profile" else self.default

    def convert(self, value: object) -> object:
        """A launch string (or an already typed value) as ``kind``; "" stays "" (= use the config file)."""
        if value is None or value == "":
            return ""
        if self.kind is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("true", "1", "yes", "on"):
                return True
            if text in ("false", "0", "no", "off"):
                return False
            raise ConfigError(f"argument {self.name}: expected true or false, got {value!r}")
        try:
            return self.kind(value)
        except (TypeError, ValueError):
            raise ConfigError(f"argument {self.name}: expected {self.kind.__name__}, got {value!r}") from None


ARGUMENTS: tuple[Argument, ...] = (
    Argument("world", str, "tabletop", "tabletop | household: the world, its default robot profile and robot API", ("sim", "replay")),
    Argument("robot_profile", str, "", "robot profile: config/robots/<name>.yaml or a path"),
    Argument("seed", int, "", "seed of the random tabletop scene (default: config/sim.yaml)", ("sim", "replay")),
    Argument("scene_file", str, "", "scene YAML; overrides seed (see config/scenes/example.yaml)", ("sim", "replay")),
    Argument("real_time_factor", float, "", "simulated seconds per wall second; 0 = as fast as possible", ("sim", "replay")),
    Argument("gui", bool, "false", "open the PyBullet window (needs a display)", ("sim", "replay")),
    Argument("camera", bool, "", "render and publish the RGB-D camera (default: config/sim.yaml)", ("sim", "replay")),
    Argument("console", bool, "false", "run the interaction manager (the LLM console) even without llm_* arguments"),
    Argument("llm_backend", str, "", "openai | transformers | scripted for every LLM role (default: config/llm.yaml)"),
    Argument("llm_model", str, "", "model the endpoint serves (openai), model folder (transformers), replay bag or file (scripted)"),
    Argument("llm_base_url", str, "", "OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 (vLLM), :11434/v1 (Ollama)"),
    Argument("llm_config", str, "", "LLM config file (default config/llm.yaml)"),
    Argument("memory", str, "", "directory of learned examples (default: memory.store.learned_dir of config/memory.yaml)"),
    Argument("perception_backend", str, "", "detector: sim_ground_truth | yolo_world | owlv2 (default: config/perception.yaml)"),
    Argument("record", str, "", "record the session into this directory (empty: do not record)"),
    Argument("web", bool, "false", "also serve the person's web page (config/web.yaml: 127.0.0.1:8765 unless it says "
             "otherwise)", ("sim", "robot")),
    Argument("recording", str, "", "the recorded session to replay", ("replay",)),
    Argument("check", bool, "true", "compare the replay with the recording (replay/result; the replay node exits 1 "
             "on a divergence); false: only play it", ("replay",)),
)
_BY_NAME = {a.name: a for a in ARGUMENTS}


@dataclass(frozen=True)
class NodeSpec:
    """One node: how ``ros2 launch`` starts it (``executable``) and how the CLI builds it (``cls``).

    ``parameters`` are ROS parameters under launch and keyword arguments of ``cls`` in one process;
    every node class accepts each of its ROS parameters as a keyword argument of the same name.
    ``provided_by`` names the part of the project a node comes from when it may not be installed
    yet (recording and replay); such a node is started only when that part is present.
    """

    name: str
    executable: str
    cls: str
    parameters: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    provided_by: str = ""

    @property
    def module(self) -> str:
        return self.cls.partition(":")[0]

    def load_class(self) -> type:
        """Import the node class (this imports rclpy and the node's dependencies)."""
        module, _, name = self.cls.partition(":")
        return getattr(importlib.import_module(module), name)

    def available(self) -> bool:
        """Whether the node's module can be found (a part of the project still being written may not be)."""
        return importlib.util.find_spec(self.module) is not None

    def create(self, **extra: Any) -> Any:
        """Instantiate the node in this process (rclpy must be initialised)."""
        return self.load_class()(**{**self.parameters, **extra})


# node name -> (executable, class, what it does); executables are console_scripts of setup.py
NODES: dict[str, tuple[str, str, str]] = {
    "sim": ("sim", "teachbot.nodes.sim_node:SimNode", "PyBullet world behind controller and camera topics"),
    "skills": ("skills", "teachbot.nodes.skills_node:SkillsNode", "one action per skill, safety limits, e-stop"),
    "perception": ("perception", "teachbot.nodes.perception_node:PerceptionNode", "object list from the camera"),
    "memory": ("memory", "teachbot.nodes.memory_node:MemoryNode", "episodic examples and retrieval"),
    "issue_detection": ("issue_detection", "teachbot.nodes.issue_detection_node:IssueDetectionNode",
                        "RAIDER: issues with an action before acting"),
    "improvement": ("improvement", "teachbot.nodes.improvement_node:ImprovementNode", "learn_from_interaction()"),
    "interaction_manager": ("interaction_manager", "teachbot.nodes.interaction_manager_node:InteractionManagerNode",
                            "the LLM console"),
    "recorder": ("recorder", "teachbot.nodes.recorder_node:RecorderNode", "records the session"),
    "replay": ("replay", "teachbot.nodes.replay_node:ReplayNode", "plays a recorded session back"),
    "web": ("web", "teachbot.nodes.web_node:WebNode", "the person's web page"),
}
# nodes from parts of the project that may not be installed yet: started only when their module exists
PROVIDED_BY = {"perception": "perception", "recorder": "recording", "replay": "recording"}


def arguments(mode: str) -> list[Argument]:
    """The arguments ``mode`` takes, in the order launch files declare them."""
    _check_mode(mode)
    return [a for a in ARGUMENTS if mode in a.modes]


def parse_arguments(mode: str, values: Mapping[str, object] | None = None) -> dict[str, object]:
    """Every argument of ``mode`` typed and defaulted; an unknown name or a bad value is a ConfigError."""
    values = dict(values or {})
    known = {a.name: a for a in arguments(mode)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ConfigError(f"unknown argument(s) for mode {mode}: {', '.join(unknown)}; known: {', '.join(known)}")
    parsed: dict[str, object] = {}
    for name, arg in known.items():
        value = values.get(name)
        parsed[name] = arg.convert(arg.default_for(mode) if value is None or value == "" else value)
    return parsed


def wants_llm(args: Mapping[str, object]) -> bool:
    """The LLM nodes (interaction manager, improvement, issue detection) run when asked for or when an LLM is named."""
    return bool(args.get("console")) or any(args.get(k) for k in ("llm_backend", "llm_model", "llm_base_url", "llm_config"))


def node_set(
    mode: str,
    values: Mapping[str, object] | None = None,
    *,
    only: Iterable[str] | None = None,
    extra_parameters: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[NodeSpec]:
    """The nodes of ``mode`` for these argument ``values``, in start order.

    ``only`` keeps the named nodes (e.g. ``("sim", "skills")`` for a bare robot); ``extra_parameters``
    adds parameters per node name beyond the launch arguments (the CLI's ``camera_rate`` and such).
    """
    args = parse_arguments(mode, values)
    if mode == "replay" and not args["recording"]:
        raise ConfigError("replay needs a recording: set recording:=<directory> (ros2 launch) or pass it to teachbot replay")
    profile = str(args["robot_profile"])
    world = str(args.get("world") or "tabletop")
    if world not in WORLDS:
        raise ConfigError(f"argument world: expected one of {', '.join(WORLDS)}, got {world!r}")
    if world == "household" and profile == DEFAULT_PROFILE[mode]:
        profile = HOUSEHOLD_PROFILE
    household = world == "household" or _profile_world(profile) == "household"
    if mode == "replay":
        args.update(replay_llm(args))
    llm = _pick(args, llm_backend="llm_backend", llm_model="llm_model", llm_base_url="llm_base_url", llm_config="llm_config")
    params: dict[str, dict[str, Any]] = {}
    if mode in ("sim", "replay"):
        params["sim"] = {"robot_profile": profile, "gui": bool(args["gui"]),
                         **_pick(args, seed="seed", scene_file="scene_file", real_time_factor="real_time_factor",
                                 camera_enabled="camera")}
    params["skills"] = {"robot_profile": profile}
    params["perception"] = _pick(args, backend="perception_backend")
    if household:  # the kitchen's objects and states from the simulator's ground truth, the camera for what is in view
        params["perception"]["config"] = HOUSEHOLD_PERCEPTION
    elif mode == "robot":  # no simulator to ask for ground truth
        params["perception"]["world_state_service"] = ""
    params["memory"] = _pick(args, learned_dir="memory")
    if wants_llm(args):
        params["issue_detection"] = {**llm, "world": "household" if household else "tabletop"}
        params["improvement"] = dict(llm)
        params["interaction_manager"] = {**llm, **_pick(args, memory="memory")}  # its local fallback reads this store
        if household:
            params["interaction_manager"]["api_profile"] = "household"
    if args["record"]:
        params["recorder"] = {"output": str(args["record"]), "robot_profile": profile}
    if args.get("web"):
        params["web"] = {"robot_profile": profile}
    if mode == "replay":
        params["replay"] = {"recording": str(args["recording"]), "check": bool(args["check"])}

    keep = set(only) if only is not None else None
    if keep is not None and keep - set(NODES):
        raise ConfigError(f"unknown node(s) {', '.join(sorted(keep - set(NODES)))}; nodes: {', '.join(NODES)}")
    extra = {name: dict(p) for name, p in (extra_parameters or {}).items()}
    specs = []
    for name, parameters in params.items():
        if keep is not None and name not in keep:
            continue
        executable, cls, description = NODES[name]
        specs.append(NodeSpec(name, executable, cls, {**parameters, **extra.pop(name, {})}, description,
                              PROVIDED_BY.get(name, "")))
    if extra and keep is None:
        raise ConfigError(f"parameters for node(s) not in the {mode} set: {', '.join(sorted(extra))}")
    return specs


def _profile_world(profile: str) -> str:
    """The world a robot profile belongs to ('tabletop' when it cannot be read here)."""

    try:
        return RobotProfile.load(profile).world
    except ConfigError:
        return "tabletop"


def replay_llm(args: Mapping[str, object]) -> dict[str, object]:
    """The LLM arguments of a replay: the recorded completions answer (scripted backend, the recording as
    its replay source). Arguments that name another LLM are kept (e.g. a live model on the recorded
    conversation); a scripted backend without a model gets the recording."""
    named = {key: args.get(key, "") for key in ("llm_backend", "llm_model", "llm_base_url", "llm_config")}
    if not any(named.values()):
        return {"llm_backend": "scripted", "llm_model": str(args["recording"])}
    if named["llm_backend"] == "scripted" and not named["llm_model"]:
        return {"llm_model": str(args["recording"])}
    return {}


def _pick(args: Mapping[str, object], **names: str) -> dict[str, object]:
    """Parameter name -> argument value, for the arguments that were set (not "")."""
    return {param: args[arg] for param, arg in names.items() if args.get(arg) != ""}


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ConfigError(f"unknown mode {mode!r}; modes: {', '.join(MODES)}")


LLM_PARAMETERS = ("llm_config", "llm_backend", "llm_model", "llm_base_url")


def llm_settings(llm_config: str = "", llm_backend: str = "", llm_model: str = "", llm_base_url: str = "") -> dict[str, Any]:
    """The parsed LLM config (``llm_config`` or config/llm.yaml) with the llm_* arguments applied (the LLM nodes' parameters)."""

    return apply_llm_arguments(load_llm_config(llm_config or None), llm_backend, llm_model, llm_base_url)


def apply_llm_arguments(raw: dict[str, Any], backend: str = "", model: str = "", base_url: str = "") -> dict[str, Any]:
    """config/llm.yaml (parsed) with the node set's llm_* arguments applied to every role; a new dict.

    ``model`` is the served model name for openai, the model folder for transformers and the replay
    source for scripted (a session bag, or JSON Lines of recorded completions).
    """
    if not (backend or model or base_url):
        return raw
    out = copy.deepcopy(raw)
    section = out.setdefault("llm", {}) if "llm" in out or not out else out
    defaults = section.setdefault("defaults", {})
    roles = section.get("roles") or {}
    layers = [defaults, *(r for r in roles.values() if isinstance(r, dict))]
    if backend:
        for layer in layers:
            layer.pop("backend", None)
        defaults["backend"] = backend
    chosen = backend or str(defaults.get("backend", "openai"))
    key = {"openai": "model", "transformers": "model_path", "scripted": "replay"}.get(chosen)
    if key is None:
        raise ConfigError(f"llm backend must be one of openai, transformers, scripted; got {chosen!r}")
    setters: list[tuple[str, str]] = [(key, model)] if model else []
    if base_url:
        if chosen != "openai":
            raise ConfigError(f"llm_base_url applies to the openai backend only, not {chosen!r}")
        setters.append(("base_url", base_url))
    for name, value in setters:
        for layer in layers:
            layer.pop(name, None)
        defaults[name] = value
    return out


def describe(specs: Iterable[NodeSpec], fmt: Callable[[NodeSpec], str] | None = None) -> str:
    """One line per node, e.g. for ``teachbot sim --dry-run``."""
    fmt = fmt or (lambda s: f"{s.name:<20} {', '.join(f'{k}={v}' for k, v in s.parameters.items()) or '(config defaults)'}")
    return "\n".join(fmt(s) for s in specs)
