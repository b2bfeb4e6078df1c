#!/usr/bin/env bash
# Installs the Debian 12 packages HeadScope needs to build, test, package and run, when any is
# missing (dpkg-dev: dpkg-shlibdeps, which `cpack -G DEB` uses to declare the package's Depends).
# Uses sudo when not root. Called by run.sh and test.sh; test.sh passes --with-test-tools for
# what only its test stages need (Ninja, which builds its three folders; clang-14's libFuzzer
# runtime, OpenMP for clang, GNU parallel for the test that runs scan shards side by side, and
# Slurm with munge for the test that runs docs/scan.md's Slurm array job on a single-node cluster
# it starts itself, and python3-jsonschema for the test that checks graph JSON against
# Neuronpedia's schema).
set -euo pipefail
HEADSCOPE_PACKAGES=(cmake g++ make pkg-config dpkg-dev
  qt6-base-dev qt6-svg-dev libgl-dev libqcustomplot-dev libeigen3-dev catch2 nlohmann-json3-dev libpcre2-dev libyaml-cpp-dev
  xvfb xauth)
if [[ ${1:-} == --with-test-tools ]]; then
  HEADSCOPE_PACKAGES+=(ninja-build clang-14 libclang-rt-14-dev libomp-14-dev parallel
    slurmctld slurmd slurm-client munge python3-jsonschema)
fi
missing=()
for p in "${HEADSCOPE_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "headscope: installing ${missing[*]}" >&2
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
