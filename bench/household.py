#!/usr/bin/env python3
"""The household world's fetch cycle and its simulation rate (issue 11); pure PyBullet, no ROS.

Each run resets the default kitchen (config/household/scenes/kitchen.yaml) and runs, through the
household skills on the world directly (real_time_factor 0: physics as fast as it goes):

    move_to('counter'), grasp('apple juice'), move_to('person'), handover_object_to_human()

the person taking the juice at once. Two measurements per run:

  cycle wall time   the four skills, camera off                      goal: median <= 3 s
  rate with camera  the same cycle rendering the robot's mast camera (config/household/layout.yaml:
                    424x240, at config/sim.yaml's 5 Hz of simulated time), simulated seconds per
                    wall second                                                   goal: median >= 2

Usage: python bench/household.py [--runs 5] [--warmup 1] [--smoke]
"""

from __future__ import annotations

import time

import _common as C

C.ensure_importable()

GOAL_CYCLE_S = 3.0
GOAL_RTF = 2.0
CYCLE = [("move_to", {"location": "counter"}), ("grasp", {"object_name": "apple juice"}),
         ("move_to", {"location": "person"}), ("handover_object_to_human", {"timeout": 0.2})]


def main() -> int:
    p = C.parser(__doc__.splitlines()[0], runs=5, smoke={"runs": 1, "warmup": 0})
    p.add_argument("--warmup", type=int, default=1, help="untimed cycles first: imports, first IK solves (default 1)")
    args = p.parse_args()
    machine = C.machine()

    from teachbot.config import load_yaml, resolve_config
    from teachbot.robot_profile import RobotProfile
    from teachbot.sim.camera import CameraSpec
    from teachbot.sim.household_world import HouseholdWorld
    from teachbot.simrobot.direct import DirectArm, DirectBase, WorldHousehold
    from teachbot.skills.household import HouseholdSkills
    from teachbot.world.household_scene import load_household_scene

    cfg = load_yaml(resolve_config("sim"))
    spec = CameraSpec.from_config(cfg.get("camera", {}))  # rate and optics; size and pose: the mast camera
    profile = RobotProfile.load("household_sim")
    world = HouseholdWorld(profile)
    scene = load_household_scene()
    render_every = max(1, round(1.0 / (spec.rate * world.time_step)))
    renders: list[float] = []
    camera_on = [False]
    steps = [0]
    plain_after_step = world._after_step

    def after_step() -> None:  # the sim node renders on simulated time; so does this
        plain_after_step()
        steps[0] += 1
        if camera_on[0] and steps[0] % render_every == 0:
            r0 = time.perf_counter()
            world.render(world.camera(spec))
            renders.append(time.perf_counter() - r0)

    world._after_step = after_step  # type: ignore[method-assign]

    def cycle() -> tuple[float, float]:
        world.reset(scene)
        skills = HouseholdSkills(profile, DirectArm(world), DirectBase(world), WorldHousehold(world))
        t0, s0 = time.perf_counter(), world.sim_time
        for name, fields in CYCLE:
            outcome = skills.run(name, **fields)
            if not outcome.success:
                raise SystemExit(f"error: {name}{fields} failed: {outcome.message}")
        return time.perf_counter() - t0, world.sim_time - s0

    try:
        for _ in range(args.warmup):  # imports, first IK solves
            cycle()
        walls, rates, sims = [], [], []
        for run in range(args.runs):
            camera_on[0] = False
            wall, sim = cycle()
            camera_on[0] = True
            wall_cam, sim_cam = cycle()
            walls.append(wall)
            sims.append(sim)
            rates.append(sim_cam / wall_cam)
            C.say(f"  run {run}: cycle {wall:5.2f} s wall for {sim:5.1f} s simulated; with camera {wall_cam:5.2f} s wall "
                  f"-> {rates[-1]:5.1f}x real time")
    finally:
        world.close()

    cyc, rate, rend = C.summary(walls, 3), C.summary(rates, 2), C.summary([r * 1e3 for r in renders], 2)
    C.say("")
    C.say(f"cycle (camera off): median {cyc['median']:.2f} s wall, {C.statistics.median(sims):.1f} s simulated; goal <= {GOAL_CYCLE_S} s: "
          f"{'met' if cyc['median'] <= GOAL_CYCLE_S else 'MISSED'}")
    size = world.layout.base.camera_size
    C.say(f"rate with camera  : median {rate['median']:.1f}x real time ({size[0]}x{size[1]} at {spec.rate:g} Hz, "
          f"render median {rend['median']:.1f} ms); goal >= {GOAL_RTF}x: {'met' if rate['median'] >= GOAL_RTF else 'MISSED'}")
    goal = C.goal_fields(cyc["median"], GOAL_CYCLE_S, lower_is_better=True)
    C.emit({
        "benchmark": "household", "unit": "s", "runs": args.runs, "headline": "cycle_wall_s", "median": cyc["median"], **goal,
        "cycle_wall_s": cyc, "cycle_sim_s_median": round(C.statistics.median(sims), 2),
        "rate_with_camera": rate, "rate_goal": GOAL_RTF, "rate_ratio_to_goal": round(rate["median"] / GOAL_RTF, 3),
        "rate_meets_goal": rate["median"] >= GOAL_RTF, "render_ms": rend,
        "camera": {"width": size[0], "height": size[1], "rate_hz": spec.rate}, "machine": machine,
    })
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
