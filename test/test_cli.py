"""The ``teachbot`` command: argument parsing onto the node set, the memory subcommands end to end on a
temporary store, and ``teachbot sim`` as a real process stopped with SIGTERM."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from timing import deadline, pytest_timeout, timeout

from teachbot.cli import COMMANDS, build_parser, main
from teachbot.commands._args import node_set_values
from teachbot.memory import InteractionExample, MemoryStore
from teachbot.nodes.nodeset import describe, node_set

ROOT = Path(__file__).resolve().parents[1]
TEACHBOT = Path(sys.executable).parent / "teachbot"
TRANSCRIPT = """>>> wait_for_trigger()
{'type': 'dialog', 'text': 'put the red block in the blue bowl'}
>>> put_first_on_second('red block', 'blue bowl')
'success'
"""


# --------------------------------------------------------------------------- parsing
def test_every_documented_command_is_registered() -> None:
    assert {"sim", "robot", "chat", "memory", "demo"} <= set(COMMANDS)
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(COMMANDS) == set(sub.choices)


def test_sim_options_become_node_set_arguments(tmp_path: Path) -> None:
    args = build_parser().parse_args([
        "sim", "--seed", "3", "--no-camera", "--real-time-factor", "0", "--llm-model", "llama3.1",
        "--llm-base-url", "http://127.0.0.1:11434/v1", "--memory", str(tmp_path), "--perception-backend", "owlv2",
    ])
    values = node_set_values(args, "sim")
    assert values == {"world": "tabletop", "robot_profile": "panda_sim", "seed": 3, "camera": False, "real_time_factor": 0.0, "gui": False,
                      "console": False, "llm_model": "llama3.1", "llm_base_url": "http://127.0.0.1:11434/v1",
                      "memory": str(tmp_path.resolve()), "perception_backend": "owlv2"}
    specs = {s.name: s for s in node_set("sim", values)}
    assert specs["sim"].parameters["camera_enabled"] is False
    assert "interaction_manager" in specs  # naming a model asks for the LLM console
    household = build_parser().parse_args(["sim", "--world", "household", "--console"])
    specs = {s.name: s for s in node_set("sim", node_set_values(household, "sim"))}
    assert specs["skills"].parameters["robot_profile"] == "household_sim"
    assert specs["interaction_manager"].parameters["api_profile"] == "household"


def test_robot_defaults_to_the_real_arm_profile() -> None:
    args = build_parser().parse_args(["robot", "--console"])
    assert node_set_values(args, "robot") == {"robot_profile": "panda_real", "console": True}
    with pytest.raises(SystemExit):
        build_parser().parse_args(["robot", "--seed", "3"])  # a real arm has no simulated scene


def test_dry_run_prints_the_node_set(capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI starts exactly what the node set (and so ros2 launch) names."""
    assert main(["sim", "--dry-run", "--console", "--seed", "5", "--gui"]) == 0
    expected = describe(node_set("sim", {"console": True, "seed": 5, "gui": True}))
    assert capsys.readouterr().out.strip() == expected
    assert main(["robot", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("skills") and "sim " not in out


def test_bad_values_fail_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["sim", "--seed", "three"])
    assert exc.value.code == 2
    assert "invalid int value: 'three'" in capsys.readouterr().err
    assert main(["robot", "--robot-profile", "no_such_arm", "--dry-run"]) == 2
    assert "no_such_arm" in capsys.readouterr().err


# --------------------------------------------------------------------------- memory
@pytest.fixture()
def store_config(tmp_path: Path) -> Path:
    """A memory config whose seeds and learned examples live under tmp_path: one seed, one learned."""
    seeds = tmp_path / "seeds" / "tabletop"
    seeds.mkdir(parents=True)
    (seeds / "red_in_blue.txt").write_text(TRANSCRIPT)
    config = tmp_path / "memory.yaml"
    raw = yaml.safe_load((ROOT / "config" / "memory.yaml").read_text())
    raw["memory"]["store"] = {"seeds_dir": str(tmp_path / "seeds"), "learned_dir": str(tmp_path / "learned")}
    config.write_text(yaml.safe_dump(raw))
    MemoryStore(tmp_path / "learned", tmp_path / "seeds").add(InteractionExample(
        id="lesson-1", profile="tabletop", transcript=TRANSCRIPT.replace("blue bowl", "green bowl"),
        problem="The robot used the wrong bowl.", improvement="Use the bowl the person names.",
        scope="whenever a bowl is named", author_model="improvement:scripted"))
    return config


def run_cli(*argv: str) -> tuple[int, str, str]:
    """``teachbot ARGV`` as a separate process: exit status, stdout, stderr."""
    done = subprocess.run([str(TEACHBOT), *argv], capture_output=True, text=True, timeout=pytest_timeout(120), check=False)
    return done.returncode, done.stdout, done.stderr


def test_memory_list_and_show(store_config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli("memory", "list", "--config", str(store_config))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["ID", "SOURCE", "PROFILE", "CREATED", "FIRST", "INSTRUCTION"]
    assert lines[1].split()[:3] == ["seed:tabletop/red_in_blue", "seed", "tabletop"]
    assert lines[2].split()[:3] == ["lesson-1", "learned", "tabletop"]
    assert lines[2].endswith("put the red block in the green bowl")
    assert "2 examples (1 seed, 1 learned)" in out

    assert main(["memory", "list", "--config", str(store_config), "--source", "learned"]) == 0
    out = capsys.readouterr().out
    assert "lesson-1" in out and "seed:tabletop" not in out

    assert main(["memory", "show", "lesson-1", "--config", str(store_config)]) == 0
    out = capsys.readouterr().out
    assert "problem:         The robot used the wrong bowl." in out
    assert "scope:           whenever a bowl is named" in out
    assert out.rstrip().endswith(">>> put_first_on_second('red block', 'green bowl')\n'success'")
    assert main(["memory", "show", "lesson-2", "--config", str(store_config)]) == 2
    assert "no example with id 'lesson-2'" in capsys.readouterr().err


def test_memory_export_import_remove(store_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    export = tmp_path / "out" / "lessons.jsonl"
    assert main(["memory", "export", str(export), "--config", str(store_config)]) == 0
    assert "exported 1 example to" in capsys.readouterr().out
    records = [json.loads(line) for line in export.read_text().splitlines()]
    assert [r["id"] for r in records] == ["lesson-1"]

    other = tmp_path / "other_robot"
    assert main(["memory", "import", str(export), "--config", str(store_config), "--memory", str(other)]) == 0
    assert f"imported 1 example into {other}" in capsys.readouterr().out
    assert MemoryStore(other).get("lesson-1").problem == "The robot used the wrong bowl."
    assert main(["memory", "import", str(export), "--config", str(store_config), "--memory", str(other)]) == 0
    assert "imported 0 examples" in capsys.readouterr().out

    code, out, err = run_cli("memory", "remove", "lesson-1", "seed:tabletop/red_in_blue", "nope", "--config", str(store_config))
    assert code == 1
    assert out.strip() == "removed lesson-1"
    assert "read-only" in err and "no learned example with id 'nope'" in err
    assert [e.id for e in MemoryStore(tmp_path / "learned", tmp_path / "seeds").list()] == ["seed:tabletop/red_in_blue"]
    assert (other / "lesson-1.json").is_file()  # the other store is untouched


def test_memory_errors_name_the_fix(tmp_path: Path) -> None:
    code, _, err = run_cli("memory", "list", "--config", str(tmp_path / "missing.yaml"))
    assert code == 2
    assert err.startswith("error: config file not found")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    code, _, err = run_cli("memory", "import", str(bad), "--memory", str(tmp_path / "learned"))
    assert code == 2 and f"{bad}:1: not JSON" in err


# --------------------------------------------------------------------------- teachbot sim as a process
def test_sim_runs_until_sigterm(tmp_path: Path) -> None:
    """The one-line status appears when every node is up; SIGTERM stops it cleanly with status 0."""
    env = {k: v for k, v in os.environ.items() if k != "ROS_DOMAIN_ID"}  # it reserves its own domain
    proc = subprocess.Popen(
        [str(TEACHBOT), "sim", "--real-time-factor", "0", "--no-camera", "--memory", str(tmp_path / "learned")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    out: list[str] = []
    try:
        selector = selectors.DefaultSelector()
        selector.register(proc.stdout, selectors.EVENT_READ)
        until = deadline(120)
        while not any("ready" in line for line in out) and time.monotonic() < until and proc.poll() is None:
            if selector.select(timeout=1.0):
                out.append(proc.stdout.readline())
        ready = next((line for line in out if "ready" in line), None)
        assert ready is not None, "".join(out) + proc.stderr.read() if proc.poll() is not None else "".join(out)
        assert ready.startswith("teachbot sim ready in ")
        assert ": sim, skills, perception, memory on ROS_DOMAIN_ID=" in ready
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=timeout(60))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert rest.splitlines()[-2:] == ["stopping ...", "stopped"]
    assert "Traceback" not in err


def test_the_demo_finds_its_shipped_session():
    """`make demo` replays test/bags/learning_episode when no LLM is configured; the path follows the module."""
    from teachbot.nodes.demo_session import SHIPPED_SESSION

    assert Path(__file__).resolve().parent / "bags" / "learning_episode" == SHIPPED_SESSION
    assert (SHIPPED_SESSION / "metadata.yaml").is_file()
