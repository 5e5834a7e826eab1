# shellcheck shell=bash
# Source this file to keep ROS 2 / DDS traffic on loopback (shell twin of
# teachbot.ros_env.configure_loopback, which is the source of truth; keep the two in step).
# ROS_DOMAIN_ID is deliberately not set here: test/conftest.py and the entry points reserve a free
# one per run, so parallel runs on one machine cannot cross-talk.
_teachbot_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export RMW_IMPLEMENTATION=${RMW_IMPLEMENTATION:-rmw_fastrtps_cpp}
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
export FASTDDS_DEFAULT_PROFILES_FILE=${FASTDDS_DEFAULT_PROFILES_FILE:-$_teachbot_root/config/fastdds_localhost.xml}
unset ROS_STATIC_PEERS
unset _teachbot_root
