#!/usr/bin/env python3
"""Physics steps per second of TabletopWorld itself (pure PyBullet, no ROS).

Scene generate_scene(0), the arm holding still at home. Two measurements, each repeated --runs times:

  physics only   N steps timed back to back
  with camera    the same N steps, rendering the configured camera (config/sim.yaml: 640x480 at
                 5 Hz of simulated time -> one render every 48 steps at 240 Hz) as the sim node does

Reports median steps/s, the real-time factor they imply (steps/s * time_step) and the median
milliseconds per render. Goal (headline): real-time factor >= 1 with the camera on, i.e. the default
sim configuration (real_time_factor 1.0, camera on) can keep up with the wall clock.

Usage: python bench/sim_rate.py [--runs 5] [--steps 2400] [--smoke]
"""

from __future__ import annotations

import time

import _common as C

C.ensure_importable()  # no ROS here: configure_loopback is not needed

GOAL_RTF = 1.0


def main() -> int:
    p = C.parser(__doc__.splitlines()[0], runs=5, smoke={"runs": 1, "steps": 240})
    p.add_argument("--steps", type=int, default=2400, help="steps per repeat (default 2400 = 10 s simulated)")
    args = p.parse_args()
    machine = C.machine()

    from teachbot.config import load_yaml, resolve_config
    from teachbot.robot_profile import RobotProfile
    from teachbot.sim.camera import CameraSpec
    from teachbot.sim.world import TabletopWorld
    from teachbot.world.scene import TabletopConfig, generate_scene

    cfg = load_yaml(resolve_config("sim"))
    sim_cfg, cam_cfg = cfg.get("sim", {}), cfg.get("camera", {})
    time_step = float(sim_cfg.get("time_step", 1 / 240))
    camera = CameraSpec.from_config(cam_cfg)
    render_every = max(1, round(1.0 / (camera.rate * time_step)))
    table = TabletopConfig.load()
    world = TabletopWorld(RobotProfile.load("panda_sim"), table, time_step=time_step)
    try:
        world.reset(generate_scene(0, table))
        C.say(f"scene 0: {len(world.object_names())} objects; time_step {time_step:.6f} s "
              f"({1 / time_step:.0f} Hz); camera {camera.width}x{camera.height} at {camera.rate:g} Hz "
              f"-> one render every {render_every} steps; {args.steps} steps x {args.runs} runs")
        world.step(240)  # warm-up
        world.render(camera)

        physics, with_camera, render_ms = [], [], []
        for run in range(args.runs):
            t0 = time.perf_counter()
            world.step(args.steps)
            dt = time.perf_counter() - t0
            physics.append(args.steps / dt)

            renders = []
            t0 = time.perf_counter()
            for i in range(args.steps):
                world.step(1)
                if i % render_every == 0:
                    r0 = time.perf_counter()
                    world.render(camera)
                    renders.append(time.perf_counter() - r0)
            dt_cam = time.perf_counter() - t0
            with_camera.append(args.steps / dt_cam)
            render_ms.extend(1e3 * r for r in renders)
            C.say(f"  run {run}: physics {physics[-1]:8.0f} steps/s (RTF {physics[-1] * time_step:5.2f}); "
                  f"with camera {with_camera[-1]:8.0f} steps/s (RTF {with_camera[-1] * time_step:5.2f}), "
                  f"{len(renders)} renders, median {C.statistics.median(renders) * 1e3:.1f} ms")
        moved = world.moving
    finally:
        world.close()

    phys, cam, rend = C.summary(physics, 1), C.summary(with_camera, 1), C.summary(render_ms, 2)
    rtf_phys = round(phys["median"] * time_step, 3)
    rtf_cam = round(cam["median"] * time_step, 3)
    # what the camera alone costs per simulated second, and the rate it alone would allow
    camera_ms_per_sim_s = rend["median"] * camera.rate
    C.say("")
    C.say(f"physics only : median {phys['median']:.0f} steps/s  -> real-time factor {rtf_phys:.2f}")
    C.say(f"with camera  : median {cam['median']:.0f} steps/s  -> real-time factor {rtf_cam:.2f}")
    C.say(f"render       : median {rend['median']:.1f} ms per {camera.width}x{camera.height} frame "
          f"(ER_TINY_RENDERER, CPU) = {camera_ms_per_sim_s:.0f} ms of wall time per simulated second")
    C.say(f"goal: real-time factor with camera >= {GOAL_RTF:g}: {'met' if rtf_cam >= GOAL_RTF else 'MISSED'}")
    goal = C.goal_fields(rtf_cam, GOAL_RTF, lower_is_better=False)
    goal["meets_goal"] = rtf_cam >= GOAL_RTF
    C.emit({
        "benchmark": "sim_rate", "unit": "real_time_factor", "runs": args.runs, "steps_per_run": args.steps,
        "headline": "real_time_factor_with_camera", "median": rtf_cam, **goal,
        "physics_steps_per_s_median": phys["median"], "physics_real_time_factor": rtf_phys,
        "camera_steps_per_s_median": cam["median"], "camera_real_time_factor": rtf_cam,
        "render_ms_median": rend["median"], "render_ms": rend, "render_every_steps": render_every,
        "camera": {"width": camera.width, "height": camera.height, "rate_hz": camera.rate},
        "time_step": time_step, "physics": phys, "with_camera": cam, "arm_moving": moved,
        "machine": machine,
    })
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
