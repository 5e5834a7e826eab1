#!/usr/bin/env python3
"""The person's web page: from words typed in the page to the first console transcript line shown, and the
camera stream's frame rate and latency. Headless Debian chromium (selenium on the system chromedriver).

utterance_to_transcript  The page's own clock: from the moment the person presses Enter (the form's submit
                         handler) to the frame after the first transcript line holding their words is in the page.
                         The path: page -> websocket -> web node -> dialog/user -> interaction manager -> the
                         console's wait_for_trigger() in the sandbox -> interaction/transcript -> web node ->
                         websocket -> page. The model is excluded: the line is the console's output of the wait,
                         written before any LLM call (the scripted model answers the next wait_for_trigger() at once).
camera                   A publisher in this process sends 640x480 rgb8 images at --camera-rate Hz with the wall
                         clock in their stamps; the page draws each frame it gets. Frame rate shown by the page (the
                         web node sends at most config/web.yaml camera_fps, newest image only), latency from the
                         bridge's receipt to the frame drawn, and end to end from the image's stamp.

Goal: utterance_to_transcript median at most 100 ms.   Usage: python bench/web.py [--runs 30] [--camera-seconds 10] [--smoke]
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import _common as C

C.setup()

GOAL_MS = 100.0
PAUSE = 0.3  # seconds between utterances: the console is back in its wait_for_trigger()


def image_publisher(node, rate: float, stop: threading.Event) -> threading.Thread:
    """640x480 rgb8 images on camera/color/image_raw at ``rate`` Hz, stamped with the wall clock."""
    import numpy as np
    from sensor_msgs.msg import Image

    from teachbot.nodes.common import SENSOR_QOS

    publisher = node.create_publisher(Image, "camera/color/image_raw", SENSOR_QOS)
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 255, (480, 640, 3), dtype=np.uint8).tobytes() for _ in range(4)]

    def run() -> None:
        i = 0
        while not stop.wait(1.0 / rate):
            now = time.time()
            msg = Image(height=480, width=640, encoding="rgb8", step=640 * 3, data=frames[i % 4])
            msg.header.stamp.sec, msg.header.stamp.nanosec = int(now), int((now % 1) * 1e9)
            publisher.publish(msg)
            i += 1

    thread = threading.Thread(target=run, daemon=True, name="bench-camera")
    thread.start()
    return thread


def main() -> int:
    parser = C.parser("web page: typed words to the transcript line shown; camera frame rate and latency", runs=30,
                      smoke={"runs": 2, "camera_seconds": 1.0})
    parser.add_argument("--camera-seconds", type=float, default=10.0, help="how long to watch the camera (default 10)")
    parser.add_argument("--camera-rate", type=float, default=15.0, help="images published per second (default 15)")
    args = parser.parse_args()
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver_path):
        C.say("chromium and chromedriver are not installed (make setup installs them as root); nothing measured")
        C.emit({"benchmark": "web", "skipped": "chromium or chromedriver missing"})
        return 0
    import rclpy
    from rclpy.executors import MultiThreadedExecutor
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from teachbot.llm.scripted import ScriptedModel
    from teachbot.nodes.interaction_manager_node import InteractionManagerNode
    from teachbot.nodes.web_node import WebNode

    rclpy.init()
    workdir = Path(tempfile.mkdtemp(prefix="bench_web_"))
    manager = InteractionManagerNode(interaction_model=ScriptedModel(respond=lambda _prompt: "wait_for_trigger()"),
                                     function_model=ScriptedModel([]), examples_k=0, corrections=False, knowledge=False,
                                     memory=str(workdir / "learned"), dialog_timeout=600.0)
    web = WebNode(port=0, confirm_lessons="false")
    camera_node = rclpy.create_node("bench_camera")
    executor = MultiThreadedExecutor(num_threads=2)
    for node in (manager, web, camera_node):
        executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    stop = threading.Event()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        wait = WebDriverWait(driver, 60, poll_frequency=0.01)
        driver.get(web.url)
        wait.until(lambda d: d.find_element(By.ID, "connection").text == "connected")
        box = driver.find_element(By.ID, "say")
        for i in range(args.runs + 3):  # three to warm up (the sandbox worker, the page's first layout)
            words = f"bench utterance number {i}"
            box.send_keys(words)
            box.submit()
            wait.until(lambda d, n=i: d.execute_script("return window.teachbot.timings.shown.length") > n)
            time.sleep(PAUSE)
        shown = driver.execute_script("return window.teachbot.timings.shown")[3:]
        typed = summary_ms(shown)
        C.say(f"typed -> first transcript line shown: median {typed['median']:.1f} ms, p90 {typed.get('p90', 0):.1f} ms, "
              f"max {typed['max']:.1f} ms over {typed['n']} utterances (goal <= {GOAL_MS:g} ms: "
              f"{'met' if typed['median'] <= GOAL_MS else 'MISSED'})")

        image_publisher(camera_node, args.camera_rate, stop)
        wait.until(lambda d: d.execute_script("return window.teachbot.camera.frames") > 2)
        start_frames = driver.execute_script("return window.teachbot.camera.frames")
        started = time.time()
        time.sleep(args.camera_seconds)
        camera = driver.execute_script("return window.teachbot.camera")
        frames = camera["frames"] - start_frames
        shown_at = [t for t in camera["shownAt"] if t >= started]
        fps = (len(shown_at) - 1) / (shown_at[-1] - shown_at[0]) if len(shown_at) > 1 else 0.0
        latencies = summary_ms([1000.0 * s for s in camera["latencies"][-len(shown_at):]])
        end_to_end = summary_ms([1000.0 * s for s in camera["fromStamp"][-len(shown_at):]])
        C.say(f"camera: {frames} frames in {args.camera_seconds:g} s shown, {fps:.2f} fps (web.camera_fps "
              f"{web.settings.camera_fps:g}, images at {args.camera_rate:g} Hz); bridge receipt -> drawn: median "
              f"{latencies['median']:.1f} ms, p90 {latencies.get('p90', 0):.1f} ms; published -> drawn: median "
              f"{end_to_end['median']:.1f} ms")
        C.emit({
            "benchmark": "web", "unit": "ms", "runs": len(shown), "median": typed["median"], **C.goal_fields(typed["median"], GOAL_MS),
            "utterance_to_transcript_ms": typed,
            "camera": {"fps": round(fps, 2), "configured_fps": web.settings.camera_fps, "published_hz": args.camera_rate,
                       "frames": frames, "seconds": args.camera_seconds, "latency_ms": latencies,
                       "published_to_drawn_ms": end_to_end,
                       "width": web.settings.camera_width, "jpeg_quality": web.settings.jpeg_quality},
            "machine": C.machine(),
        })
    finally:
        stop.set()
        driver.quit()
        executor.shutdown(timeout_sec=2.0)
        spinner.join(timeout=5.0)
        for node in (web, manager, camera_node):
            getattr(node, "close", lambda: None)()
            node.destroy_node()
        rclpy.shutdown()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def summary_ms(values: list[float]) -> dict:
    """C.summary of milliseconds, to 0.01 ms."""
    return C.summary(values, digits=2)


if __name__ == "__main__":
    sys.exit(main())
