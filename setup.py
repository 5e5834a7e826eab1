"""ament_python package teachbot: the pure-Python core under src/teachbot plus thin ROS 2 nodes."""

from glob import glob

from setuptools import find_packages, setup

PACKAGE = "teachbot"


def data(pattern: str) -> list[str]:
    return sorted(p for p in glob(pattern, recursive=True) if not p.endswith("/"))


setup(
    name=PACKAGE,
    version="0.1.0",
    package_dir={"": "src"},
    packages=find_packages("src"),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", data("launch/*.py")),
        (f"share/{PACKAGE}/config", data("config/*.yaml") + data("config/*.xml")),
        (f"share/{PACKAGE}/config/robots", data("config/robots/*.yaml")),
        (f"share/{PACKAGE}/config/scenes", data("config/scenes/*.yaml")),
        (f"share/{PACKAGE}/config/robot_api", data("config/robot_api/*.yaml")),
        (f"share/{PACKAGE}/config/benchmarks", data("config/benchmarks/*.yaml")),
        (f"share/{PACKAGE}/config/benchmarks/raider", data("config/benchmarks/raider/*.yaml")),
        (f"share/{PACKAGE}/config/benchmarks/droc", data("config/benchmarks/droc/*.yaml")),
        (f"share/{PACKAGE}/config/benchmarks/multitask", data("config/benchmarks/multitask/*.yaml")),
        (f"share/{PACKAGE}/config/benchmarks/multitask/scenes", data("config/benchmarks/multitask/scenes/*.yaml")),
        (f"share/{PACKAGE}/config/household", data("config/household/*.yaml")),
        (f"share/{PACKAGE}/config/household/scenes", data("config/household/scenes/*.yaml")),
        (f"share/{PACKAGE}/prompts", data("prompts/*.txt") + data("prompts/*.yaml") + data("prompts/*.md")),
        (f"share/{PACKAGE}/prompts/raider", data("prompts/raider/*.txt")),
        (f"share/{PACKAGE}/memory_store", data("memory_store/*.md")),
        *[(f"share/{PACKAGE}/memory_store/{p}", data(f"memory_store/{p}/*.txt")) for p in ("tabletop", "household")],
    ],
    package_data={"teachbot.web": ["static/*"]},  # the page's HTML, JavaScript and CSS
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="teachbot developers",
    maintainer_email="teachbot-dev@users.noreply.github.com",
    description="LLM-orchestrated ROS 2 robot stack that learns from natural-language corrections.",
    license="Apache-2.0",
    extras_require={"test": ["pytest"]},
    entry_points={
        "console_scripts": [
            "sim = teachbot.nodes.sim_node:main",
            "skills = teachbot.nodes.skills_node:main",
            "interaction_manager = teachbot.nodes.interaction_manager_node:main",
            "memory = teachbot.nodes.memory_node:main",
            "improvement = teachbot.nodes.improvement_node:main",
            "perception = teachbot.nodes.perception_node:main",
            "issue_detection = teachbot.nodes.issue_detection_node:main",
            "recorder = teachbot.nodes.recorder_node:main",
            "replay = teachbot.nodes.replay_node:main",
            "web = teachbot.nodes.web_node:main",
            "teachbot = teachbot.cli:main",
        ],
    },
)
