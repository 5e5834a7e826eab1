"""The README's picture of an episode's trace on the web page (docs/trace.png), made as the browser test drives it.

The simulated robot with scripted robot and teacher models (test/test_web_browser.py's child process, on loopback,
its spans in a temporary trace folder) serves the page; headless chromium types an instruction, corrects the robot
and keeps the lesson, then picks the robot's statement in the console, so the timeline shows the episode's spans
with that statement and what ran under it marked, and opens the learning span to show its verdict. The PNG is
reduced to 256 colours to stay small.

    source tools/loopback_env.sh && .venv/bin/python tools/screenshot_trace.py [OUT.png]   (default docs/trace.png)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "test"), str(ROOT / "src")]

from test_web_browser import CHROMIUM, DRIVER, GREEN, Person, Robot, browser  # noqa: E402 - the test's harness

MAX_BYTES = 300_000
OPEN_LEARNING = """for (const row of document.querySelectorAll('#timeline .span-row[data-id]')) {
  if (row.querySelector('.span-name').textContent !== 'learning') continue;
  row.querySelector('.span-toggle').click();
  const box = document.getElementById('timeline'), details = row.nextSibling;
  box.scrollTop = Math.max(0, details.offsetTop + details.offsetHeight - box.clientHeight + 4);
  return true;
}
return false;"""
WINDOW = (1500, 1400)


def shoot(out: Path) -> int:
    """Drive the page through one taught episode and save the screenshot at ``out``; its size in bytes."""
    with tempfile.TemporaryDirectory(prefix="teachbot-trace-shot-") as directory:
        robot = Robot(Path(directory))
        driver = None
        try:
            driver = browser()
            driver.set_window_size(*WINDOW)
            page = Person(driver, robot.url)
            page.until(lambda d: page.find("confirm").is_selected(), "confirm-before-store switched on")
            page.say("put the block in the blue bowl")
            page.robot_said("Done: the block is in the bowl.", "the robot's answer")
            page.say("No, I meant the green block. Remember that next time.")
            page.until(lambda d: page.find("pending").is_displayed(), "the lesson read back")
            page.find("keep").click()
            page.robot_said(f"Got it. Next time: {GREEN}", "the robot's confirmation")
            page.until(lambda d: page.text("lesson-count") == "1 lesson", "the lesson in the panel")
            page.until(lambda d: any(r["name"] == "memory.add" for r in page.timeline()), "the stored lesson's span in the timeline")
            page.until(lambda d: d.execute_script("return window.teachbot.camera.frames") >= 3, "camera frames")
            page.line("'success'").click()  # the robot's statement and the spans under it, marked
            opened = driver.execute_script(OPEN_LEARNING)  # the lesson's verdict and why (the rows are redrawn as spans come)
            assert opened, "no learning span in the timeline"
            driver.execute_script("window.scrollTo(0, 0)")
            raw = Path(directory) / "shot.png"
            driver.save_screenshot(str(raw))
        finally:
            if driver is not None:
                driver.quit()
            robot.close()
        image = Image.open(raw).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
        out.parent.mkdir(parents=True, exist_ok=True)
        image.save(out, optimize=True)
    size = out.stat().st_size
    if size > MAX_BYTES:
        raise SystemExit(f"{out} is {size} bytes, over {MAX_BYTES}: make the window smaller")
    return size


def main(argv: list[str] | None = None) -> int:
    """``tools/screenshot_trace.py [OUT.png]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=str(ROOT / "docs" / "trace.png"))
    args = parser.parse_args(argv)
    if not (CHROMIUM and DRIVER):
        print("chromium and chromedriver are needed (apt-get install chromium chromium-driver)", file=sys.stderr)
        return 2
    size = shoot(Path(args.out))
    print(f"wrote {args.out} ({size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
