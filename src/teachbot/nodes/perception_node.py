"""ROS 2 node ``perception``: camera images in, the scene's objects out.

In:  camera/color/image_raw, camera/depth/image_raw (registered to colour), camera/color/camera_info,
     camera/segmentation (simulation), camera/pose or tf for the extrinsics (else config).
Out: perception/objects (ObjectList, latched) at ``rate`` Hz, in ``base_frame``.
Services: perception/detect (Detect), perception/query_scene (QueryScene), perception/grounded_tool
(GroundedTool: RAIDER's grounded tools over this node's scene, teachbot.nodes.grounded_tools_service),
perception/describe_object (DescribeObject: a named object's crop descriptor for visual knowledge
retrieval, with the image embedder of config/knowledge.yaml: its box in the scene camera's frame and a mask
from depth above the support, no segmentation ids; teachbot.knowledge.object_crop).
With the sim_ground_truth backend it asks sim/get_world_state for the segment labels and for what the
simulator knows about each object (held, supported_by).
With ``perception.observe: world_state`` (the household world, config/perception_household.yaml) the
objects come from sim/get_world_state and their states from sim/states, the segmentation image says
which are in view, and the furniture takes part in the relations; it also publishes perception/states.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

import numpy as np
from geometry_msgs.msg import PoseStamped
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.time import Time
from sensor_msgs.msg import CameraInfo, Image
from teachbot_interfaces.msg import ObjectList, ThingStates
from teachbot_interfaces.srv import DescribeObject, Detect, GetWorldState, QueryScene

from teachbot.errors import ConfigError, TeachbotError
from teachbot.knowledge.object_crop import ObjectBounds, knowledge_settings, object_crop
from teachbot.nodes.common import LATCHED_QOS, SENSOR_QOS, refuse_duplicate, run_nodes
from teachbot.nodes.convert import image_array, stamp_msg, stamp_seconds, tracked_object_msg
from teachbot.nodes.grounded_tools_service import GroundedToolsService
from teachbot.perception.config import PerceptionConfig
from teachbot.perception.detector import Frame
from teachbot.perception.household import HouseholdPerception, ThingStatus, WorldThing
from teachbot.perception.localize import CameraModel, category_of
from teachbot.perception.pipeline import Perception
from teachbot.perception.relations import SceneQueries
from teachbot.perception.scene_model import SceneModel
from teachbot.simrobot.direct import yaw_of
from teachbot.world.household_layout import BASE_JOINTS

try:  # tf is optional: pip installs have no tf2_ros; camera/pose or config then give the extrinsics
    import tf2_ros
except ImportError:  # pragma: no cover - depends on the ROS installation
    tf2_ros = None

FRAME_BUFFER = 6  # images kept per stream while waiting for their partners


class PerceptionNode(Node):
    """Thin wrapper around :class:`teachbot.perception.pipeline.Perception`."""

    def __init__(self, namespace: str = "", **overrides: Any) -> None:
        super().__init__("perception", namespace=namespace)
        self.declare_parameter("config", str(overrides.pop("config", "perception")))
        cfg = PerceptionConfig.load(str(self.get_parameter("config").value))
        topics = dict(cfg.camera.get("topics", {}))
        defaults: dict[str, Any] = {
            "knowledge_config": "",  # config/knowledge.yaml: the image embedder of perception/describe_object
            "backend": cfg.backend, "rate": cfg.rate, "queries": list(cfg.queries) or ["block"],
            "min_score": cfg.min_score, "base_frame": cfg.base_frame,
            "color_topic": topics.get("color", "camera/color/image_raw"),
            "depth_topic": topics.get("depth", "camera/depth/image_raw"),
            "info_topic": topics.get("info", "camera/color/camera_info"),
            "segmentation_topic": topics.get("segmentation", "camera/segmentation"),
            "camera_pose_topic": topics.get("pose", "camera/pose"),
            "world_state_service": "sim/get_world_state",  # "" on a real robot
            "states_topic": "sim/states",  # observe: world_state only
            "sync_tolerance": float(cfg.camera.get("sync_tolerance", 0.02)),
            "use_tf": True,
        }
        unknown = sorted(set(overrides) - set(defaults))
        if unknown:
            self.destroy_node()
            raise ConfigError(f"PerceptionNode does not take {unknown}; its parameters are {sorted(defaults)}")
        defaults.update(overrides)
        p = {k: self.declare_parameter(k, v).value for k, v in defaults.items()}
        refuse_duplicate(self)
        self.config = replace(cfg, backend=str(p["backend"]), rate=float(p["rate"]), queries=tuple(p["queries"]),
                              min_score=float(p["min_score"]), base_frame=str(p["base_frame"]))
        self.world_view = self.config.observe == "world_state"
        self.perception = Perception(self.config)
        self.household = HouseholdPerception(self.config) if self.world_view else None
        self.sync_tolerance = float(p["sync_tolerance"])
        self.needs_labels = self.config.backend == "sim_ground_truth" or self.world_view
        if self.needs_labels and not p["world_state_service"]:
            self.destroy_node()
            raise ConfigError(
                "the sim_ground_truth perception backend reads the simulator's labels and there is no simulator "
                f"(world_state_service is empty); set perception.backend in {cfg.source} or the perception_backend "
                "launch argument to yolo_world or owlv2"
            )
        self._images: dict[str, list[Image]] = {"color": [], "depth": [], "segmentation": []}
        self._info: CameraInfo | None = None
        self._pose: PoseStamped | None = None
        self._camera: CameraModel | None = None
        self._camera_key: tuple = ()
        self._latest: tuple[Frame, CameraModel] | None = None
        self._last_stamp = -1.0
        self._labels: tuple[int, dict[int, dict[str, str]], dict[str, dict[str, str]]] | None = None  # epoch, labels, state
        self._labels_future: Any = None
        self._labels_requested = (0.0, 0)  # monotonic time, epoch
        self._epoch = 0  # scene generation: bumped when the image stamps run backwards (simulator reset)
        self._model_epoch = 0
        self._world: Any = None  # the latest GetWorldState reply (observe: world_state)
        self._states: ThingStates | None = None
        self._seen: tuple[float, set[int]] | None = None  # stamp and ids of the latest segmentation image
        self._lock = threading.Lock()
        self._warned: set[str] = set()

        images = MutuallyExclusiveCallbackGroup()
        work = MutuallyExclusiveCallbackGroup()  # the tick and the services never run at once
        self.create_subscription(Image, str(p["color_topic"]), lambda m: self._keep("color", m), SENSOR_QOS, callback_group=images)
        self.create_subscription(Image, str(p["depth_topic"]), lambda m: self._keep("depth", m), SENSOR_QOS, callback_group=images)
        if self.needs_labels:
            self.create_subscription(Image, str(p["segmentation_topic"]), lambda m: self._keep("segmentation", m), SENSOR_QOS,
                                     callback_group=images)
        self.create_subscription(CameraInfo, str(p["info_topic"]), self.on_camera_info, SENSOR_QOS, callback_group=images)
        self.create_subscription(PoseStamped, str(p["camera_pose_topic"]), self.on_camera_pose, LATCHED_QOS, callback_group=images)
        self.world_client = (self.create_client(GetWorldState, str(p["world_state_service"]), callback_group=images)
                             if p["world_state_service"] and self.needs_labels else None)
        self.tf_buffer = None
        if p["use_tf"] and tf2_ros is not None:
            self.tf_buffer = tf2_ros.Buffer()
            self.tf_listener = tf2_ros.TransformListener(self.tf_buffer, self)
        self.objects_pub = self.create_publisher(ObjectList, "perception/objects", LATCHED_QOS)
        self.states_pub = None
        if self.world_view:
            self.create_subscription(ThingStates, str(p["states_topic"]), self._on_states, LATCHED_QOS, callback_group=images)
            self.states_pub = self.create_publisher(ThingStates, "perception/states", LATCHED_QOS)
        self.create_service(Detect, "perception/detect", self.on_detect, callback_group=work)
        self.create_service(QueryScene, "perception/query_scene", self.on_query_scene, callback_group=work)
        self.grounded_tools = GroundedToolsService(self, callback_group=work)
        self.image_embedder = knowledge_settings(str(p["knowledge_config"]) or None)[1]
        self.create_service(DescribeObject, "perception/describe_object", self.on_describe_object, callback_group=work)
        self.create_timer(1.0 / max(self.config.rate, 1e-3), self.on_tick, callback_group=work)
        self.get_logger().info(f"perception ready: backend {self.config.backend}, {self.config.rate:g} Hz")

    # ------------------------------------------------------------ inputs
    def _keep(self, stream: str, msg: Image) -> None:
        with self._lock:
            buf = self._images[stream]
            if stream == "color" and buf and stamp_seconds(msg.header.stamp) < stamp_seconds(buf[-1].header.stamp):
                # time ran backwards: the simulator loaded a new scene; what was buffered or labelled is void
                self._epoch += 1
                for other in self._images.values():
                    other.clear()
            buf.append(msg)
            del buf[:-FRAME_BUFFER]

    def _on_states(self, msg: ThingStates) -> None:
        self._states = msg

    def on_camera_info(self, msg: CameraInfo) -> None:
        self._info = msg

    def on_camera_pose(self, msg: PoseStamped) -> None:
        self._pose = msg

    # ------------------------------------------------------------ the loop
    @property
    def scene(self) -> SceneModel:
        return self.household.scene if self.household is not None else self.perception.scene

    @property
    def queries(self) -> SceneQueries:
        return self.household.queries if self.household is not None else self.perception.queries

    def on_tick(self) -> None:
        """Fold the newest complete frame into the scene model and publish the object list."""
        self._poll_labels()
        if self.household is not None:
            self._tick_world()
            return
        try:
            if self._model_epoch != self._epoch:  # a new scene: start over
                self._model_epoch = self._epoch
                self.perception.scene.clear()
                self._latest, self._last_stamp = None, -1.0
            if self.needs_labels:
                self._request_labels()  # every tick: held / supported_by stay fresh
            pair = self._newest_frame()
            if pair is not None:
                frame, camera, state = pair
                self._last_stamp = frame.stamp
                self.perception.update(frame, camera, state)
                self._latest = (frame, camera)
        except (TeachbotError, ValueError) as exc:
            self._warn_once(str(exc))
        self._publish_objects()

    def _publish_objects(self) -> None:
        msg = ObjectList(objects=[tracked_object_msg(o) for o in self.scene.objects()])
        msg.header.frame_id = self.config.base_frame
        msg.header.stamp = stamp_msg(self._last_stamp) if self._last_stamp >= 0 else self.get_clock().now().to_msg()
        self.objects_pub.publish(msg)

    def _tick_world(self) -> None:
        """observe: world_state: fold the simulator's latest report into the household scene model."""
        assert self.household is not None
        self._request_labels()
        reply, states = self._world, self._states
        if reply is None:
            return
        self._world = None
        if reply.sim_time < self._last_stamp:  # the simulator loaded a new scene
            self.household.scene.clear()
        self._last_stamp = float(reply.sim_time)
        joints = dict(zip(reply.joints.name, reply.joints.position))
        pose = tuple(float(joints.get(j, 0.0)) for j in BASE_JOINTS)
        openings = {pl.name: float(joints[pl.joint]) / pl.joint_limit for pl in self.household.layout.places.values()
                    if pl.openable and pl.joint in joints}
        things = []
        for o in reply.objects:
            q = o.pose.orientation
            things.append(WorldThing(o.name, o.category, o.color, np.array([o.pose.position.x, o.pose.position.y, o.pose.position.z]),
                                     np.array([o.size.x, o.size.y, o.size.z]), yaw_of(np.array([q.x, q.y, q.z, q.w])),
                                     int(o.segmentation_id)))
        status = None
        if states is not None:
            status = {t.name: ThingStatus(t.place, t.inside, t.held, dict(zip(t.state_names, t.state_values)), t.contents)
                      for t in states.things}
        self.household.update(things, self._last_stamp, pose, openings, status, self._seen_ids())
        self._publish_objects()
        if states is not None and self.states_pub is not None:
            self.states_pub.publish(states)

    def _seen_ids(self) -> set[int] | None:
        """Segmentation ids in the newest segmentation image (computed once per image)."""
        with self._lock:
            seg = self._images["segmentation"][-1] if self._images["segmentation"] else None
        if seg is None:
            return None
        t = stamp_seconds(seg.header.stamp)
        if self._seen is None or self._seen[0] != t:
            self._seen = (t, set(np.unique(image_array(seg)).tolist()))
        return self._seen[1]

    def _newest_frame(self) -> tuple[Frame, CameraModel, dict[str, dict[str, str]]] | None:
        """The newest colour image with depth (and segmentation) of the same stamp, not yet processed."""
        camera = self._camera_model()
        if camera is None:
            return None
        labels: dict[int, dict[str, str]] = {}
        state: dict[str, dict[str, str]] = {}
        if self.needs_labels:
            if self._labels is None or self._labels[0] != self._epoch:
                return None  # no labels of this scene yet
            labels, state = self._labels[1], self._labels[2]
        with self._lock:
            colors = list(self._images["color"])
        for color in reversed(colors):
            t = stamp_seconds(color.header.stamp)
            if t <= self._last_stamp:
                return None  # nothing newer than what the model already holds
            depth = self._partner("depth", t)
            seg = self._partner("segmentation", t) if self.needs_labels else None
            if depth is None or (self.needs_labels and seg is None):
                continue
            frame = Frame(image_array(color), image_array(depth), image_array(seg) if seg is not None else None, labels, t)
            return frame, camera, state
        return None

    def _partner(self, stream: str, t: float) -> Image | None:
        with self._lock:
            candidates = list(self._images[stream])
        best = min(candidates, key=lambda m: abs(stamp_seconds(m.header.stamp) - t), default=None)
        if best is None or abs(stamp_seconds(best.header.stamp) - t) > self.sync_tolerance:
            return None
        return best

    def _camera_model(self) -> CameraModel | None:
        """Intrinsics from camera_info; extrinsics from tf, else camera/pose, else config."""
        info = self._info
        if info is None:
            return None
        position, orientation = self._extrinsics(info.header.frame_id)
        key = (tuple(info.k), info.width, info.height, tuple(position), tuple(orientation))
        if key != self._camera_key:  # rebuilt only on change: the model caches its per-pixel rays
            self._camera = CameraModel.from_pose(np.array(info.k), info.width, info.height, position, orientation)
            self._camera_key = key
        return self._camera

    def _extrinsics(self, frame_id: str) -> tuple[np.ndarray, np.ndarray]:
        if self.tf_buffer is not None and frame_id:
            try:
                tr = self.tf_buffer.lookup_transform(self.config.base_frame, frame_id, rclpy_time_zero()).transform
                return (np.array([tr.translation.x, tr.translation.y, tr.translation.z]),
                        np.array([tr.rotation.x, tr.rotation.y, tr.rotation.z, tr.rotation.w]))
            except Exception:  # noqa: BLE001 - no transform yet: fall back below
                pass
        if self._pose is not None:
            if self._pose.header.frame_id and self._pose.header.frame_id != self.config.base_frame:
                self._warn_once(f"camera pose is in {self._pose.header.frame_id!r}, not {self.config.base_frame!r}; "
                                "using config extrinsics")
            else:
                p, q = self._pose.pose.position, self._pose.pose.orientation
                return np.array([p.x, p.y, p.z]), np.array([q.x, q.y, q.z, q.w])
        ext = self.config.camera.get("extrinsics")
        if not ext:
            raise TeachbotError(
                f"no camera extrinsics: no tf {self.config.base_frame} <- {frame_id or 'camera frame'}, no camera pose topic "
                f"and no perception.camera.extrinsics in {self.config.source}; set one of them"
            )
        return np.asarray(ext["position"], float), np.asarray(ext["orientation"], float)

    # ------------------------------------------------------------ simulator labels
    def _request_labels(self) -> None:
        if self.world_client is None:
            self._warn_once("the sim_ground_truth backend needs sim/get_world_state (is the sim node running?)")
            return
        if self._labels_future is None and self.world_client.service_is_ready():
            self._labels_future = self.world_client.call_async(GetWorldState.Request())
            self._labels_requested = (time.monotonic(), self._epoch)

    def _poll_labels(self) -> None:
        future = self._labels_future
        if future is None:
            return
        if not future.done():
            if time.monotonic() - self._labels_requested[0] > 5.0:
                self._labels_future = None  # the sim did not answer: ask again next tick
            return
        self._labels_future = None
        reply = future.result()
        if reply is None:
            return
        labels = {o.segmentation_id: {"category": o.category, "color": o.color, "name": o.name} for o in reply.objects}
        state = {o.name: {"held": str(o.held), "supported_by": o.supported_by, "inside": o.supported_by if o.inside else ""}
                 for o in reply.objects}
        if self._labels_requested[1] == self._epoch:  # an answer from before a reset names the old scene
            self._labels = (self._epoch, labels, state)
            self._world = reply

    # ------------------------------------------------------------ services
    def on_detect(self, request: Detect.Request, response: Detect.Response) -> Detect.Response:
        if self.household is not None:
            return self._detect_in_view(request, response)
        latest = self._latest
        if latest is None:
            response.success, response.message = False, "no camera frame processed yet; is the camera publishing?"
            return response
        frame, camera = latest
        try:
            found = self.perception.observe(frame, camera, list(request.queries) or None)
        except (TeachbotError, ValueError) as exc:
            response.success, response.message = False, str(exc)
            return response
        tracks = {t.name: t.id for t in self.scene.objects()}
        response.objects = [tracked_object_msg(o, tracks.get(o.name, 0)) for o in found]
        for msg in response.objects:
            msg.last_seen = stamp_msg(frame.stamp)
        response.success, response.message = True, f"{len(found)} found"
        return response

    def _detect_in_view(self, request: Detect.Request, response: Detect.Response) -> Detect.Response:
        """observe: world_state: the objects the camera sees now whose name or category holds a query."""
        visible = self.household.visible if self.household is not None else None
        if visible is None:
            response.success, response.message = False, "no segmentation image yet; is the sim's camera on?"
            return response
        wanted = [q.strip().lower() for q in request.queries if q.strip()]
        found = [o for o in self.scene.objects() if o.name in visible
                 and (not wanted or any(w in o.name.lower() or w in o.label.lower() for w in wanted))]
        response.objects = [tracked_object_msg(o) for o in found]
        response.success, response.message = True, f"{len(found)} found"
        return response

    def on_query_scene(self, request: QueryScene.Request, response: QueryScene.Response) -> QueryScene.Response:
        q = self.queries
        try:
            kind = request.query.strip().lower()
            if kind == "relation":
                response.holds = q.relation(request.relation, request.subject, request.object)
                response.message = f"{request.subject} {request.relation} {request.object}: {response.holds}"
            elif kind == "distance_to_robot":
                response.value = q.distance_to_robot(request.subject)
                response.message = f"{response.value:.3f} m"
            elif kind in ("state", "properties"):
                answer = q.state(request.subject) if kind == "state" else q.properties(request.subject)
                response.keys, response.values = list(answer), list(answer.values())
            else:
                raise TeachbotError(f"unknown query {request.query!r}; use relation, distance_to_robot, state or properties")
        except TeachbotError as exc:
            response.success, response.message = False, str(exc)
            return response
        response.success = True
        return response

    def on_describe_object(self, request: DescribeObject.Request, response: DescribeObject.Response) -> DescribeObject.Response:
        """The image descriptor of the named object's crop in the latest frame of the scene camera: its detection
        box (else its tracked box projected) and the pixels that depth puts above the support inside its footprint
        (teachbot.knowledge.object_crop; no segmentation ids)."""
        name = request.name.strip()
        response.image_model = self.image_embedder.name
        try:
            frame, camera = self._frame_for_crops()
            track = self.scene.get(name)
            if track is None:
                known = ", ".join(sorted(o.name for o in self.scene.objects())) or "nothing yet"
                raise TeachbotError(f"unknown object {name!r}; perception knows: {known}")
            if self.household is None and not track.seen:
                raise TeachbotError(f"{name} is not in the camera's view in the latest frame ({track.hidden or 'not seen'}); "
                                    "it cannot be described now")
            config = self.household.config if self.household is not None else self.config
            bounds = ObjectBounds.of(track.position, track.size, track.yaw, category_of(track.label, config).anchor)
            box = track.box if self.household is None and track.box[2] > track.box[0] else None
            try:
                crop = object_crop(frame, camera, bounds, box)
            except TeachbotError as exc:  # hidden (a closed door, the arm) or out of view
                raise TeachbotError(f"{name} is not in the camera's view in the latest frame ({exc}); it cannot be described now") from None
            try:
                vector = self.image_embedder.embed(*crop)
            except (TeachbotError, ValueError):
                raise
            except Exception as exc:  # noqa: BLE001 - e.g. a learned image model failing: an answer, not a dead service
                raise TeachbotError(f"the image embedder {self.image_embedder.name} failed on {name}: "
                                    f"{type(exc).__name__}: {exc}") from None
        except (TeachbotError, ValueError) as exc:
            response.success, response.message = False, str(exc)
            return response
        response.embedding = [float(v) for v in np.asarray(vector, dtype=np.float32)]
        response.success, response.message = True, f"{name}: {len(response.embedding)} values of {self.image_embedder.name}"
        return response

    def _frame_for_crops(self) -> tuple[Frame, CameraModel]:
        """The frame the tracks refer to and its camera: the one the scene model processed last (camera view), or
        the newest colour and depth images of one stamp with the camera as it is now (observe: world_state)."""
        if self.household is None:
            if self._latest is None:
                raise TeachbotError("no camera frame processed yet; is the camera publishing?")
            return self._latest
        camera = self._camera_model()
        if camera is None:
            raise TeachbotError("no camera_info yet; is the sim's camera on?")
        with self._lock:
            colors = list(self._images["color"])
        for color in reversed(colors):
            t = stamp_seconds(color.header.stamp)
            depth = self._partner("depth", t)
            if depth is not None:
                return Frame(image_array(color), image_array(depth), None, {}, t), camera
        raise TeachbotError("no camera frame with depth yet; is the sim's camera on?")

    def _warn_once(self, text: str) -> None:
        if text not in self._warned:
            self._warned.add(text)
            self.get_logger().warning(text)


def rclpy_time_zero() -> Any:
    return Time()


def main(args: list[str] | None = None) -> int:
    """``ros2 run teachbot perception``."""
    return run_nodes([PerceptionNode], args)


if __name__ == "__main__":
    raise SystemExit(main())
