"""The person's web page in a real browser (headless Debian chromium through its chromedriver, selenium) against the
simulated robot with scripted LLMs whose answers depend on their prompts (test/web_scripted.py).

A child process runs the stack (sim with its camera, skills, perception, memory on a temporary store, improvement,
the interaction manager with confirm-before-store switched on by the page, and the web node) on a ROS domain of its
own; this process drives the page like a person: types an instruction, sees the console transcript and the robot's
answer, finds the running episode's spans in the trace timeline (a click on a console line picks its statement and
the spans under it; a click on a statement's row marks its console line), confirms one lesson, rejects another,
and finds exactly the confirmed one in the store and in the lessons panel; the next request uses it; the camera
shows frames; the emergency stop and undo work.

    python test/test_web_browser.py serve DIR [SCREENSHOT]   (the child; prints URL <address> when the page is up)
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from timing import deadline, pytest_timeout, timeout

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
SCENE = """objects:
  - {category: block, color: red, position: [-0.1, -0.45]}
  - {category: block, color: green, position: [0.12, -0.6]}
  - {category: block, color: yellow, position: [0.0, -0.5]}
  - {category: bowl, color: blue, position: [0.1, -0.35]}
  - {category: bowl, color: yellow, position: [-0.12, -0.62]}
"""
GREEN = "When the person says 'the block', take the green block."
TIMELINE = """return Array.from(document.querySelectorAll('#timeline .span-row[data-id]')).map((row) => ({
  id: row.dataset.id, name: row.querySelector('.span-name').textContent, kind: row.dataset.kind,
  line: row.dataset.line === undefined ? null : Number(row.dataset.line),
  selected: row.classList.contains('selected'), under: row.classList.contains('in-selection')}));"""
CLICK_ROW = """const row = document.querySelector('#timeline .span-row[data-id="' + arguments[0] + '"]');
if (row) row.click();
return row !== null;"""

pytestmark = [pytest.mark.timeout(pytest_timeout(420)),
              pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="Debian's chromium and chromium-driver are not "
                                 "installed (make setup installs them when run as root: apt-get install chromium chromium-driver)")]


# ---------------------------------------------------------------------------------------------- the child: the robot
def serve(directory: str) -> None:
    """The stack and the page until stdin closes or SIGTERM; prints ``URL <address>``."""
    sys.path.insert(0, str(ROOT / "src"))
    import threading

    from teachbot.ros_env import configure_loopback

    configure_loopback()
    import rclpy
    from web_scripted import robot_model, teacher_model

    from teachbot.llm.scripted import ScriptedModel
    from teachbot.nodes.improvement_node import ImprovementNode
    from teachbot.nodes.interaction_manager_node import InteractionManagerNode
    from teachbot.nodes.nodeset import node_set
    from teachbot.nodes.stack import InProcessStack
    from teachbot.nodes.web_node import WebNode

    scene = Path(directory) / "scene.yaml"
    scene.write_text(SCENE)
    specs = node_set("sim", {"memory": str(Path(directory) / "learned"), "scene_file": str(scene), "real_time_factor": 2.0},
                     only=("sim", "skills", "perception", "memory"))
    rclpy.init()
    stack = InProcessStack.from_node_set(specs)
    stack.start(wait=timeout(120.0))
    stack.add_node(ImprovementNode(model=teacher_model(), mode="improve", distill=False))
    stack.add_node(InteractionManagerNode(interaction_model=robot_model(), function_model=ScriptedModel([]),
                                          dialog_timeout=120.0, examples_k=4, corrections=False))
    web = WebNode(port=0)
    stack.add_node(web)
    print(f"URL {web.url}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    stop.wait()
    stack.stop()


# ---------------------------------------------------------------------------------------------- the parent: a person
class Robot:
    """The child process serving the page."""

    def __init__(self, directory: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k != "ROS_DOMAIN_ID"}
        env["TEACHBOT_TRACE_DIR"] = str(directory / "traces")  # the stack's spans, read back by its page
        self.proc = subprocess.Popen([sys.executable, __file__, "serve", str(directory)], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.output: list[str] = []
        until = deadline(240)
        self.url = ""
        while time.monotonic() < until and not self.url:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.output.append(line)
            if line.startswith("URL "):
                self.url = line.split()[1]
        assert self.url, "the page did not come up:\n" + "".join(self.output[-40:])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=timeout(30))
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def browser():
    """Headless chromium through the system chromedriver (no selenium-manager download)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1500,1300",
                 "--disable-extensions", "--no-first-run"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)


class Person:
    """What a person does on the page, with waits on what it shows."""

    def __init__(self, driver, url: str) -> None:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        self.driver, self.by = driver, By
        self.wait = lambda seconds=60: WebDriverWait(driver, timeout(seconds), poll_frequency=0.05)
        driver.get(url)
        self.until(lambda d: self.text("connection") == "connected", "the page to connect")

    def find(self, element_id: str):
        return self.driver.find_element(self.by.ID, element_id)

    def text(self, element_id: str) -> str:
        return self.find(element_id).text

    def until(self, check, what: str, seconds: float = 90):
        try:
            return self.wait(seconds).until(check)
        except Exception:
            raise AssertionError(f"the page did not show {what}; dialog:\n{self.text('dialog')}\nconsole:\n"
                                 f"{self.text('transcript')}\nnote: {self.text('note')}") from None

    def say(self, words: str) -> None:
        box = self.find("say")
        box.send_keys(words)
        box.submit()

    def timeline(self) -> list[dict]:
        """The trace timeline's rows, read at once (the page redraws them as spans come): id, name, kind, the
        statement's console line (None for other spans), whether picked (``selected``) or under the picked span."""
        return self.driver.execute_script(TIMELINE)

    def click_row(self, span_id: str) -> None:
        """Click the row of a span (found and clicked at once: the row may have been redrawn since it was read)."""
        assert self.driver.execute_script(CLICK_ROW, span_id), f"no row for span {span_id}"

    def line(self, text: str):
        """The newest console line that reads ``text``."""
        return [line for line in self.driver.find_elements(self.by.CSS_SELECTOR, "#transcript .line") if line.text == text][-1]

    def line_at(self, index: int):
        """Line ``index`` of the newest episode's console transcript (numbered as the console numbers them)."""
        return self.driver.find_element(self.by.CSS_SELECTOR, f'#transcript .episode:last-child .line[data-index="{index}"]')

    def robot_said(self, words: str, what: str, times: int = 1) -> None:
        """Wait until the robot said ``words`` (in one of its turns) ``times`` times in all."""
        self.until(lambda d: sum(words in turn.text for turn in d.find_elements(self.by.CSS_SELECTOR, ".turn.robot")) >= times,
                   what)


def test_teaching_the_robot_through_the_page(tmp_path):
    from teachbot.memory import MemoryStore

    robot = Robot(tmp_path)
    driver = None
    try:
        driver = browser()
        page = Person(driver, robot.url)
        page.until(lambda d: page.find("confirm").is_selected(), "confirm-before-store switched on")
        page.say("put the block in the blue bowl")
        page.until(lambda d: "put_first_on_second('red block', 'blue bowl')" in page.text("transcript"), "the robot's statement")
        page.until(lambda d: "'success'" in page.text("transcript"), "the statement's result")
        page.robot_said("Done: the block is in the bowl.", "the robot's answer")
        assert "{'type': 'dialog', 'text': 'put the block in the blue bowl'}" in page.text("transcript")
        highlighted = driver.find_elements(page.by.CSS_SELECTOR, "#transcript .line span.n")  # Pygments' name class
        assert any(span.text == "put_first_on_second" for span in highlighted)
        check_the_timeline(page)

        page.say("No, I meant the green block. Remember that next time.")
        page.until(lambda d: page.find("pending").is_displayed(), "the lesson read back")
        assert page.text("pending-sentence") == GREEN
        page.find("keep").click()
        page.robot_said(f"Got it. Next time: {GREEN}", "the robot's confirmation")
        page.until(lambda d: page.text("lesson-count") == "1 lesson", "the lesson in the panel")
        assert GREEN in page.text("lessons")

        page.say("put the block in the yellow bowl")  # the confirmed lesson is in the prompt now
        page.until(lambda d: "put_first_on_second('green block', 'yellow bowl')" in page.text("transcript"), "the lesson used")
        page.robot_said("Done", "the second answer", times=2)
        page.say("No, I meant the yellow block. Remember that next time.")
        page.until(lambda d: page.find("pending").is_displayed() and "yellow" in page.text("pending-sentence"),
                   "the second lesson read back")
        page.until(lambda d: d.execute_script("return window.teachbot.camera.frames") >= 3, "camera frames")
        screenshot = os.environ.get("TEACHBOT_WEB_SCREENSHOT")  # the README's picture: a lesson waiting for the person
        if screenshot:
            driver.save_screenshot(screenshot)
        page.find("reject").click()
        page.robot_said("All right, I will not remember that.", "the rejection")
        page.until(lambda d: "'nothing learned: the person rejected the lesson'" in page.text("transcript"), "the console line")
        assert not page.find("pending").is_displayed()
        stored = MemoryStore(tmp_path / "learned", tmp_path / "none").list(source="learned")
        assert [e.improvement for e in stored] == [GREEN]  # exactly the confirmed one
        assert page.text("lesson-count") == "1 lesson"

        assert page.find("camera").size["width"] > 100

        page.find("estop").click()
        page.until(lambda d: page.find("resume").is_displayed(), "the stop engaged")
        page.find("resume").click()
        page.until(lambda d: page.find("estop").is_displayed(), "the stop released")
        page.find("end").click()
        page.until(lambda d: "conversation ended" in page.text("note"), "the conversation ended")
        page.find("undo").click()
        page.until(lambda d: page.text("lesson-count") == "0 lessons", "the undone lesson gone from the panel")
        assert MemoryStore(tmp_path / "learned", tmp_path / "none").list(source="learned") == []
    finally:
        if driver is not None:
            driver.quit()
        robot.close()


def check_the_timeline(page: Person) -> None:
    """The running episode's spans in the timeline; a console line picks its statement and what ran under it."""
    page.until(lambda d: {(r["name"], r["line"]) for r in page.timeline()} >= {("statement", 0), ("statement", 2), ("skill.goal", None)},
               "the statement's spans in the timeline")
    assert "running" in page.text("trace-info") or "ended" in page.text("trace-info")
    statement = page.line(">>> put_first_on_second('red block', 'blue bowl')")
    assert statement.get_attribute("data-index") == "2" and page.line_at(0).text == ">>> wait_for_trigger()"
    page.line("'success'").click()  # an output line belongs to the statement before it
    rows = page.timeline()
    assert [(r["name"], r["line"]) for r in rows if r["selected"]] == [("statement", 2)], rows
    under = [r for r in rows if r["under"]]
    assert {"skill.goal", "skill.execute"} <= {r["name"] for r in under}, rows
    assert all(r["line"] is None for r in under), rows  # no other statement is under it
    assert "picked" in statement.get_attribute("class") and "picked" not in page.line_at(0).get_attribute("class")
    page.click_row(next(r["id"] for r in rows if r["line"] == 0))  # a statement's row marks its console line
    page.until(lambda d: "picked" in page.line_at(0).get_attribute("class"), "the statement's line marked")
    assert "picked" not in statement.get_attribute("class")
    assert [r["line"] for r in page.timeline() if r["selected"]] == [0]


if __name__ == "__main__" and len(sys.argv) >= 3 and sys.argv[1] == "serve":
    serve(sys.argv[2])
