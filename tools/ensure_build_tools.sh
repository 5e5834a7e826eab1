#!/usr/bin/env bash
# Make sure cmake, a C/C++ compiler and make are on PATH (needed to build teachbot_interfaces).
# Installs Debian's packages only when something is missing: as root directly, else through sudo.
set -euo pipefail

missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v g++ >/dev/null || missing+=(g++)
command -v make >/dev/null || missing+=(make)
((${#missing[@]})) || exit 0

if [[ $(id -u) == 0 ]]; then
  sudo=()
elif command -v sudo >/dev/null; then
  sudo=(sudo)
else
  echo "error: ${missing[*]} missing and not root; install them (apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "ensure_build_tools: installing ${missing[*]} with apt-get"
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
