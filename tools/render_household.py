"""Render the picture of the household world the README shows (docs/household.png): the default kitchen,
the robot at the counter holding the apple juice, the fridge open.

    .venv/bin/python tools/render_household.py [--out docs/household.png]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "household.png"))
    args = parser.parse_args()

    import numpy as np
    from PIL import Image

    from teachbot.robot_profile import RobotProfile
    from teachbot.sim.camera import CameraSpec
    from teachbot.sim.household_world import HouseholdWorld
    from teachbot.simrobot.direct import DirectArm, DirectBase, WorldHousehold
    from teachbot.skills.household import HouseholdSkills
    from teachbot.world.household_scene import load_household_scene

    profile = RobotProfile.load("household_sim")
    world = HouseholdWorld(profile)
    try:
        world.reset(load_household_scene())
        skills = HouseholdSkills(profile, DirectArm(world), DirectBase(world), WorldHousehold(world))
        for name, fields in (("open", {"thing": "fridge"}), ("grasp", {"object_name": "apple juice"})):
            outcome = skills.run(name, **fields)
            if not outcome.success:
                raise SystemExit(f"error: {name}: {outcome.message}")
        spec = CameraSpec(width=960, height=600, fov_y=55.0, eye=(-1.6, -3.4, 3.3), target=(1.2, 0.1, 0.6), far=15.0)
        frame = world.render(spec)
    finally:
        world.close()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.asarray(frame.rgb)).save(args.out, optimize=True)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
