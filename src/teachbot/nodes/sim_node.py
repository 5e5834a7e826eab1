"""ROS 2 node ``sim``: the PyBullet world behind the topics a real arm and camera driver would offer.

The robot profile's ``world`` picks it: the tabletop, or the household kitchen with the arm on a
mobile base (whose virtual joints base_x, base_y, base_yaw take trajectories on the same controller
topic, as do the fridge door and cupboard drawer joints, the simulator's stand-in for a pulling hand).

In:  arm_controller/joint_trajectory (trajectory_msgs/JointTrajectory), gripper_controller/command. A running
     trajectory whose sender has left the ROS graph (a killed skills node) is stopped: the arm holds.
Out: joint_states, clock, camera/{color,depth}/image_raw, camera/color/camera_info, camera/pose,
     camera/segmentation, sim/objects (ground truth as an object list); household: sim/states.
Sim only: services sim/get_world_state and sim/reset. Every stamp is simulated time, which a reset
restarts at zero (as does a sim restarted by its supervisor); :meth:`SimNode.jump_clock` does only that.
"""

from __future__ import annotations

import threading
import time

from builtin_interfaces.msg import Time
from geometry_msgs.msg import PoseStamped
from rcl_interfaces.msg import SetParametersResult
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.parameter import Parameter
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import CameraInfo, Image, JointState
from teachbot_interfaces.msg import GripperCommand, ObjectList, ThingState, ThingStates
from teachbot_interfaces.srv import GetWorldState, ResetScene
from trajectory_msgs.msg import JointTrajectory

from teachbot.config import load_yaml, resolve_config
from teachbot.errors import TeachbotError
from teachbot.nodes.common import COMMAND_QOS, LATCHED_QOS, SENSOR_QOS, refuse_duplicate, run_nodes
from teachbot.nodes.convert import camera_info_msg, detected_object_msg, image_msg, object_state_msg, pose_msg
from teachbot.robot_profile import RobotProfile
from teachbot.sim.camera import CameraSpec, quaternion_from_matrix
from teachbot.sim.household_world import HouseholdWorld
from teachbot.sim.world import TabletopWorld
from teachbot.simrobot.factory import make_world
from teachbot.world.household_scene import HouseholdScene, generate_household_scene, household_scene_from_yaml, load_household_scene
from teachbot.world.scene import SceneSpec, TabletopConfig, generate_scene, load_scene_file, scene_from_yaml

MAX_WALL_PUBLISH_RATE = 250.0  # Hz: faster-than-real-time runs do not flood subscribers
SENDER_WATCH_PERIOD = 0.1  # wall seconds between checks that a moving arm's trajectory sender is still on the graph


def _stamp(seconds: float) -> Time:
    return Time(sec=int(seconds), nanosec=int((seconds % 1) * 1e9))


class SimNode(Node):
    """Owns a :class:`TabletopWorld` and steps it in a physics thread."""

    def __init__(self, namespace: str = "", **overrides: object) -> None:
        """Every ROS parameter below may also be given as a keyword argument (its default then)."""
        super().__init__("sim", namespace=namespace)
        self.declare_parameter("robot_profile", str(overrides.pop("robot_profile", "panda_sim")))
        self.declare_parameter("config", str(overrides.pop("config", "sim")))
        cfg = load_yaml(resolve_config(str(self.get_parameter("config").value)))
        sim, cam = cfg.get("sim", {}), cfg.get("camera", {})
        defaults = {
            "real_time_factor": float(sim.get("real_time_factor", 1.0)),
            "time_step": float(sim.get("time_step", 1 / 240)),
            "joint_state_rate": float(sim.get("joint_state_rate", 100.0)),
            "object_rate": float(sim.get("object_rate", 20.0)),
            "grasp_assist": bool(sim.get("grasp_assist", True)),
            "gui": bool(sim.get("gui", False)),
            "seed": int(sim.get("seed", 0)),
            "scene_file": str(sim.get("scene_file", "")),
            "camera_enabled": bool(cam.get("enabled", True)),
            "camera_rate": float(cam.get("rate", 5.0)),
            "camera_width": int(cam.get("width", 640)),
            "camera_height": int(cam.get("height", 480)),
        }
        unknown = sorted(set(overrides) - set(defaults))
        if unknown:
            raise TypeError(f"SimNode got unknown parameter(s) {', '.join(unknown)}; known: robot_profile, config, {', '.join(defaults)}")
        defaults.update({k: type(defaults[k])(v) for k, v in overrides.items()})  # a ROS parameter keeps one type
        p = {k: self.declare_parameter(k, v).value for k, v in defaults.items()}
        self.rtf = float(p["real_time_factor"])
        self.camera = CameraSpec.from_config({**cam, "width": p["camera_width"], "height": p["camera_height"], "rate": p["camera_rate"]})
        self.camera_enabled = bool(p["camera_enabled"]) and self.camera.rate > 0
        self.profile = RobotProfile.load(str(self.get_parameter("robot_profile").value))
        refuse_duplicate(self)
        self.table = TabletopConfig.load()
        self.household = self.profile.world == "household"
        options = {"gui": bool(p["gui"]), "time_step": float(p["time_step"]), "grasp_assist": bool(p["grasp_assist"])}
        self.world: TabletopWorld | HouseholdWorld
        if self.household:
            self.world = make_world(self.profile, **options)
            scene = load_household_scene(str(p["scene_file"]) or None) if not int(p["seed"]) else generate_household_scene(int(p["seed"]))
        else:
            self.world = make_world(self.profile, table=self.table, **options)
            scene = load_scene_file(str(p["scene_file"]), self.table) if p["scene_file"] else generate_scene(int(p["seed"]), self.table)
        self.frame = "map" if self.household else "base"
        self.lock = threading.RLock()
        self._clock_offset = 0.0  # seconds added to the world's time in every stamp (see jump_clock)
        self.world.reset(scene)
        self.periods = {"joints": 1.0 / float(p["joint_state_rate"]), "objects": 1.0 / float(p["object_rate"]),
                        "camera": 1.0 / self.camera.rate if self.camera_enabled else float("inf")}

        topics = self.profile.topics
        self.joint_pub = self.create_publisher(JointState, topics["joint_states"], COMMAND_QOS)
        self.objects_pub = self.create_publisher(ObjectList, "sim/objects", LATCHED_QOS)
        self.clock_pub = self.create_publisher(Clock, "clock", COMMAND_QOS)
        self.color_pub = self.create_publisher(Image, "camera/color/image_raw", SENSOR_QOS)
        self.depth_pub = self.create_publisher(Image, "camera/depth/image_raw", SENSOR_QOS)
        self.seg_pub = self.create_publisher(Image, "camera/segmentation", SENSOR_QOS)
        self.info_pub = self.create_publisher(CameraInfo, "camera/color/camera_info", LATCHED_QOS)
        self.camera_pose_pub = self.create_publisher(PoseStamped, "camera/pose", LATCHED_QOS)
        self.states_pub = self.create_publisher(ThingStates, "sim/states", LATCHED_QOS) if self.household else None
        group = MutuallyExclusiveCallbackGroup()
        self.create_subscription(JointTrajectory, topics["joint_trajectory"], self.on_trajectory, COMMAND_QOS, callback_group=group)
        self._trajectory_topic = topics["joint_trajectory"]
        self.create_timer(SENDER_WATCH_PERIOD, self.on_watch_sender, callback_group=group)
        self.create_subscription(GripperCommand, topics["gripper_command"], self.on_gripper, COMMAND_QOS, callback_group=group)
        self.create_service(GetWorldState, "sim/get_world_state", self.on_get_world_state, callback_group=group)
        self.create_service(ResetScene, "sim/reset", self.on_reset, callback_group=group)
        self._publish_camera_pose()
        self.add_on_set_parameters_callback(self.on_set_parameters)
        self._running = True
        self._thread = threading.Thread(target=self._physics_loop, name="sim-physics", daemon=True)
        self._thread.start()
        self.get_logger().info(
            f"sim ready: {len(scene.objects)} objects ({', '.join(scene.names())}), "
            f"real_time_factor={self.rtf:g}, camera={'on' if self.camera_enabled else 'off'}"
        )

    # ------------------------------------------------------------ physics thread
    def _physics_loop(self) -> None:
        due = {k: 0.0 for k in self.periods}
        wall_last = {k: 0.0 for k in self.periods}
        # pacing and publication periods run on the world's own time; the stamps add jump_clock's offset
        wall0, sim0 = time.monotonic(), self.world.sim_time
        last = sim0
        while self._running:
            with self.lock:
                self.world.step(1)
                now, stamp = self.world.sim_time, self.sim_time()
            # more or less than one step since the last: a reset moved the clock (back to zero, then on by the
            # settling steps). Pacing starts again from here; measured from before, a sim reset some seconds
            # after the start would run flat out until simulated time had caught up with those seconds
            if not 0.0 < now - last < 1.5 * self.world.time_step:
                wall0, sim0 = time.monotonic(), now
                if now < last:
                    due = {k: 0.0 for k in self.periods}
            last = now
            wall = time.monotonic()
            for kind, period in self.periods.items():
                if now >= due[kind] and wall - wall_last[kind] >= 1.0 / MAX_WALL_PUBLISH_RATE:
                    due[kind] = now + period
                    wall_last[kind] = wall
                    try:
                        self._publish(kind, stamp)
                    except Exception:  # noqa: BLE001 - Ctrl-C shut the context down before close() stopped us
                        if not self.context.ok():
                            return
                        raise
            rtf = self.rtf
            if rtf > 0:
                ahead = (now - sim0) / rtf - (time.monotonic() - wall0)
                if ahead > 0:
                    time.sleep(min(ahead, 0.05))
            else:  # as fast as possible (ROS threads get the GIL through the switch interval)
                wall0, sim0 = time.monotonic(), now

    def _publish(self, kind: str, now: float) -> None:
        stamp = _stamp(now)
        if kind == "joints":
            with self.lock:
                names, q, qd, eff = self.world.joint_state()
            msg = JointState(name=names, position=q.tolist(), velocity=qd.tolist(), effort=eff.tolist())
            msg.header.stamp = stamp
            self.joint_pub.publish(msg)
            self.clock_pub.publish(Clock(clock=stamp))
        elif kind == "objects":
            with self.lock:
                objects = self.world.objects()
            msg = ObjectList(objects=[detected_object_msg(o, i) for i, o in enumerate(objects)])
            msg.header.frame_id, msg.header.stamp = self.frame, stamp
            self.objects_pub.publish(msg)
            if self.states_pub is not None:
                self.states_pub.publish(self._thing_states(stamp))
        elif kind == "camera":
            with self.lock:
                spec = self.world.camera(self.camera) if isinstance(self.world, HouseholdWorld) else self.camera
                frame = self.world.render(spec)
            if spec is not self.camera:  # the mast camera moves with the base
                self._publish_camera_pose(spec, stamp)
            fid = spec.frame_id
            self.color_pub.publish(image_msg(frame.rgb, "rgb8", fid, stamp))
            self.depth_pub.publish(image_msg(frame.depth, "32FC1", fid, stamp))
            self.seg_pub.publish(image_msg(frame.segmentation, "32SC1", fid, stamp))
            self.info_pub.publish(camera_info_msg(spec, stamp))

    def _thing_states(self, stamp: Time) -> ThingStates:
        """Every object's and place's states (household world)."""
        world = self.world
        assert isinstance(world, HouseholdWorld)
        with self.lock:
            objects = {o.name: o for o in world.objects()}
            states = world.thing_states()
            things = [(name, world.rules.thing(name)) for name in [*world.layout.places, *world.object_names()]]
        msg = ThingStates()
        msg.header.frame_id, msg.header.stamp = self.frame, stamp
        for name, thing in things:
            flags = {k: v for k, v in states.get(name, {}).items() if k not in ("held", "contents")}
            o = objects.get(name)
            msg.things.append(ThingState(
                name=name, type=thing.kind, place=o.place if o else "", inside=bool(o.inside) if o else False,
                held=bool(o.held) if o else False, properties=sorted(thing.properties), state_names=list(flags),
                state_values=[bool(v) for v in flags.values()], contents=str(states.get(name, {}).get("contents") or ""),
            ))
        return msg

    def _publish_camera_pose(self, spec: CameraSpec | None = None, stamp: Time | None = None) -> None:
        spec = spec or (self.world.camera(self.camera) if isinstance(self.world, HouseholdWorld) else self.camera)
        rot, eye = spec.pose()
        msg = PoseStamped()
        msg.header.frame_id = self.frame
        if stamp is not None:
            msg.header.stamp = stamp
        msg.pose = pose_msg(eye, quaternion_from_matrix(rot))
        self.camera_pose_pub.publish(msg)

    def on_set_parameters(self, params: list[Parameter]) -> SetParametersResult:
        """real_time_factor may change at run time (``ros2 param set /sim real_time_factor 0``)."""
        for param in params:
            if param.name == "real_time_factor":
                if float(param.value) < 0:
                    return SetParametersResult(successful=False, reason="real_time_factor must be >= 0 (0: as fast as possible)")
                self.rtf = float(param.value)
        return SetParametersResult(successful=True)

    # ------------------------------------------------------------ controller interface
    def on_trajectory(self, msg: JointTrajectory) -> None:
        times = [p.time_from_start.sec + p.time_from_start.nanosec * 1e-9 for p in msg.points]
        try:
            with self.lock:
                if not msg.points:
                    self.world.hold()  # an empty trajectory stops the arm, as with ros2_control
                else:
                    self.world.command_trajectory(list(msg.joint_names), times, [list(p.positions) for p in msg.points])
        except TeachbotError as exc:
            self.get_logger().error(f"rejected trajectory: {exc}")

    def on_watch_sender(self) -> None:
        """Hold the arm (and base) when whoever sent the running trajectory has left the ROS graph: a skills
        node killed mid-motion must not leave the arm finishing a path nobody watches any more. A killed
        participant leaves the graph within the DDS lease (config/fastdds_localhost.xml)."""
        with self.lock:
            moving = self.world.moving or bool(getattr(self.world, "base_moving", False))
        if not moving or self.count_publishers(self._trajectory_topic) > 0:
            return
        with self.lock:
            self.world.hold()
        self.get_logger().warning(f"nobody publishes on {self._trajectory_topic} any more (the sender of the running "
                                  "trajectory left the ROS graph): holding the arm where it is")

    def on_gripper(self, msg: GripperCommand) -> None:
        with self.lock:
            self.world.command_gripper(msg.position, msg.max_effort)

    # ------------------------------------------------------------ simulator services
    def on_get_world_state(self, request: GetWorldState.Request, response: GetWorldState.Response) -> GetWorldState.Response:
        with self.lock:
            objects = self.world.objects()
            names, q, qd, eff = self.world.joint_state()
            response.held_object = self.world.held_object()
            response.sim_time = self.sim_time()
            scene = self.world.scene
        response.objects = [object_state_msg(o) for o in objects]
        response.joints = JointState(name=names, position=q.tolist(), velocity=qd.tolist(), effort=eff.tolist())
        response.seed = scene.seed if scene is not None and scene.seed is not None else -1
        return response

    def on_reset(self, request: ResetScene.Request, response: ResetScene.Response) -> ResetScene.Response:
        try:
            scene: SceneSpec | HouseholdScene
            if self.household:  # seed 0 without a scene: the default kitchen
                scene = (household_scene_from_yaml(request.scene_yaml, source="reset request") if request.scene_yaml.strip()
                         else generate_household_scene(int(request.seed)) if request.seed else load_household_scene())
            else:
                scene = (scene_from_yaml(request.scene_yaml, self.table, source="reset request")
                         if request.scene_yaml.strip() else generate_scene(int(request.seed), self.table))
            with self.lock:
                self.world.reset(scene)
                self._clock_offset = 0.0
                objects = self.world.objects()
            self._publish("objects", self.sim_time())  # before answering: callers act on the new scene next
        except TeachbotError as exc:
            response.success, response.message = False, str(exc)
            return response
        response.success = True
        response.message = f"scene with {len(objects)} objects: {', '.join(o.name for o in objects)}"
        response.objects = [object_state_msg(o) for o in objects]
        return response

    # ------------------------------------------------------------ the simulated clock
    def sim_time(self) -> float:
        """Simulated seconds as stamped on everything this node publishes (and sim/get_world_state's sim_time)."""
        with self.lock:
            return self.world.sim_time + self._clock_offset

    def jump_clock(self, to: float = 0.0) -> float:
        """Fault drill: make the simulated clock read ``to`` seconds now and leave the world as it is; returns
        the jump (negative: back). Back to zero is, to the nodes that read the stamps (the skills node's arm
        clock, perception), a sim restarted by its supervisor in the middle of a skill, minus the lost scene
        (sim/reset also rewinds the clock, but reloads the scene and sends the arm home); forward stands in
        for a sim that has run for long."""
        if to < 0:
            raise ValueError(f"jump_clock(to={to}): simulated time starts at 0")
        with self.lock:
            jump = to - self.sim_time()
            self._clock_offset += jump
        self.get_logger().warning(f"simulated clock jumped by {jump:+.3f} s to {to:.3f} s")
        return jump

    def close(self) -> None:
        self._running = False
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)
        self.world.close()


def main(args: list[str] | None = None) -> int:
    """``ros2 run teachbot sim``."""
    return run_nodes([SimNode], args)


if __name__ == "__main__":
    raise SystemExit(main())
