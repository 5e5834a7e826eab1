#!/usr/bin/env bash
# Prove that teachbot's DDS traffic stays on this machine.
#
# Runs tools/dds_pingpong.py (an rclpy listener and talker in two processes, under
# teachbot.ros_env.configure_loopback) while
#   * tcpdump captures, on every interface, UDP in the RTPS port range (7400 + 250*domain + offsets,
#     i.e. 7400..32767 for the domain ids 0..100 we use) plus any multicast/broadcast, and
#   * strace records every sendto/sendmsg/connect destination of those processes.
# Verdict PASS needs: the listener got its messages, every captured packet is on `lo`, and every
# AF_INET/AF_INET6 destination in the strace log is 127.0.0.0/8 or ::1. The capture is machine-wide,
# so other ROS processes running at the same time are counted too (they must be loopback as well).
#
# Usage: tools/prove_loopback.sh  (as root; installs tcpdump/strace with apt-get when missing)
#        VENV=/path/to/venv KEEP=1 tools/prove_loopback.sh   # KEEP=1 keeps the capture files
set -euo pipefail

cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY="$VENV/bin/python"
[[ -x "$PY" ]] || { echo "error: $PY missing; run 'make setup' first" >&2; exit 2; }

missing=()
command -v tcpdump >/dev/null || missing+=(tcpdump)
command -v strace >/dev/null || missing+=(strace)
if ((${#missing[@]})); then
  [[ $(id -u) == 0 ]] || { echo "error: need root to install ${missing[*]}" >&2; exit 2; }
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

work=$(mktemp -d)
tcpdump_pid=""
cleanup() {
  [[ -n "$tcpdump_pid" ]] && kill "$tcpdump_pid" 2>/dev/null || true
  if [[ "${KEEP:-0}" == 1 ]]; then echo "files kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

filter='udp and (portrange 7400-32767 or ip multicast or ip6 multicast or ip broadcast)'
tcpdump -i any -nn -U -w "$work/dds.pcap" "$filter" 2>"$work/tcpdump.err" &
tcpdump_pid=$!
for _ in $(seq 50); do grep -q "listening on" "$work/tcpdump.err" && break; sleep 0.1; done

set +e
strace -f -qq -e trace=sendto,sendmsg,connect -o "$work/strace.log" \
  "$PY" tools/dds_pingpong.py run --count 20 --timeout 30 | tee "$work/pingpong.out"
pingpong_rc=${PIPESTATUS[0]}
set -e
sleep 1  # let tcpdump flush the last packets
kill "$tcpdump_pid"; wait "$tcpdump_pid" 2>/dev/null || true; tcpdump_pid=""

echo "--- tcpdump -i any '$filter': packets per interface/direction"
tcpdump -r "$work/dds.pcap" -nn 2>/dev/null | awk '{print $2, $3}' | sort | uniq -c | tee "$work/per_iface.txt"
total=$(tcpdump -r "$work/dds.pcap" -nn 2>/dev/null | wc -l)
off_lo=$(awk '$2 != "lo" {n += $1} END {print n + 0}' "$work/per_iface.txt")
echo "total=$total not_on_lo=$off_lo"

echo "--- strace sendto/sendmsg/connect: socket families and IP destinations"
grep -oE 'sa_family=AF_[A-Z0-9]+' "$work/strace.log" | sort | uniq -c || true
grep -oE 'inet_addr\("[^"]+"\)|inet_pton\(AF_INET6, "[^"]+"' "$work/strace.log" \
  | sed -E 's/inet_addr\("([^"]+)"\)/\1/; s/inet_pton\(AF_INET6, "([^"]+)"/\1/' \
  | sort | uniq -c | tee "$work/dests.txt"
foreign=$(awk '$2 !~ /^127\./ && $2 != "::1" {n += $1} END {print n + 0}' "$work/dests.txt")
ip_sends=$(awk '{n += $1} END {print n + 0}' "$work/dests.txt")
echo "ip_destinations=$ip_sends non_loopback=$foreign"

if [[ $pingpong_rc == 0 && $total -gt 0 && $off_lo == 0 && $ip_sends -gt 0 && $foreign == 0 ]]; then
  echo "VERDICT: PASS - DDS messages delivered; $total RTPS/multicast packets captured, all on lo;" \
       "$ip_sends IP sends, all to loopback"
else
  echo "VERDICT: FAIL - pingpong rc=$pingpong_rc, packets=$total (off lo: $off_lo)," \
       "IP sends=$ip_sends (non-loopback: $foreign)"
  exit 1
fi
