#!/usr/bin/env bash
# The Debian package, as a user gets it: cpack builds headscope_<version>_<arch>.deb from the
# build tree into a temporary directory, dpkg-deb checks its control fields (Depends made from the
# binaries by dpkg-shlibdeps) and its files, unpacks it into a temporary root, and the unpacked
# programs run from there on the built-in model inside that root.
#
# The programs look for the built-in model in $HEADSCOPE_MODEL_DIR, then beside themselves
# (<exe>/../share/headscope/models), then in the source tree they were built from
# (HEADSCOPE_SOURCE_MODEL_DIR, core/session/session.cpp). That last fallback could make a package
# without the model pass, so: HEADSCOPE_MODEL_DIR is unset, and `info` must print a model path
# inside the unpacked root. `run` finds its model with the same lookup; its output must equal
# the build tree's program's run on the build tree's copy of the model, byte for byte.
#
# Usage: package_deb.sh CPACK BUILD_DIR VERSION WITH_GUI(0|1) BUILD_TREE_CLI
# Skips (exit 77) without cpack, dpkg-deb or dpkg-shlibdeps (tools/dev/deps.sh installs dpkg-dev).
set -euo pipefail
cpack=$1
build=$2
version=$3
with_gui=$4
built_cli=$5
for tool in "$cpack" dpkg-deb dpkg-shlibdeps; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool is not installed (tools/dev/deps.sh installs dpkg-dev)"
    exit 77
  fi
done
fail() { echo "FAIL: $*" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/headscope-package.XXXXXX")
# cpack's install writes <build>/install_manifest.txt, as `cmake --install` does: the test leaves
# the build tree's copy as it found it (absent, or an earlier install's list).
manifest=$build/install_manifest.txt
if [[ -e $manifest ]]; then
  cp -p "$manifest" "$work/install_manifest.txt"
  trap 'cp -p "$work/install_manifest.txt" "$manifest"; rm -rf "$work"' EXIT
else
  trap 'rm -f "$manifest"; rm -rf "$work"' EXIT
fi
unset HEADSCOPE_MODEL_DIR

# cpack normally first builds the tree's `preinstall` target, which with Makefiles depends on
# `all`: a test must not rebuild the tree that the other tests are running from. The Ninja
# generator has no preinstall step, so naming it here makes cpack package what is built, as
# `cmake --install` does (a program that is not built fails the install, and so this test).
if ! "$cpack" --config "$build/CPackConfig.cmake" -G DEB -B "$work/out" -D CPACK_CMAKE_GENERATOR=Ninja \
     >"$work/cpack.log" 2>&1; then
  cat "$work/cpack.log" >&2
  fail "cpack could not build the package"
fi
arch=$(dpkg --print-architecture)
deb=$work/out/headscope_${version}_${arch}.deb
[[ -f $deb ]] || { ls -l "$work/out" >&2; fail "no $(basename "$deb")"; }

field() { dpkg-deb -f "$deb" "$1"; }
[[ $(field Package) == headscope ]] || fail "Package: $(field Package)"
[[ $(field Version) == "$version" ]] || fail "Version: $(field Version), expected $version"
[[ $(field Architecture) == "$arch" ]] || fail "Architecture: $(field Architecture)"
[[ $(field Section) == science ]] || fail "Section: $(field Section)"
[[ -n $(field Maintainer) ]] || fail "no Maintainer"
[[ $(field Description) == *transformer* ]] || fail "Description: $(field Description)"
depends=$(field Depends)
needed=(libc6 libstdc++6 libgomp1 libpcre2-8-0 libyaml-cpp0.7)
((with_gui)) && needed+=(libqt6core6 libqt6gui6 libqt6widgets6 libqt6svg6 libqcustomplot2.1-qt6)
# One package name a line, versions dropped (Debian 13 renamed some libraries with a t64 suffix).
depends_names=$(sed 's/ ([^)]*)//g; s/, */\n/g' <<<"$depends")
for p in "${needed[@]}"; do
  grep -qFx -e "$p" -e "${p}t64" <<<"$depends_names" || fail "Depends lacks $p: $depends"
done
# (Output read into a variable first: under pipefail, grep -q ending a pipe early fails it.)
info=$(dpkg-deb -I "$deb")
grep -qF " Depends: $depends" <<<"$info" || fail "dpkg-deb -I does not show the Depends: $info"

files=(usr/bin/headscope-cli usr/share/headscope/models/headscope-tiny/config.json
       usr/share/headscope/models/headscope-tiny/model.safetensors)
((with_gui)) && files+=(usr/bin/headscope usr/share/applications/headscope.desktop
                         usr/share/icons/hicolor/scalable/apps/headscope.svg)
listing=$(dpkg-deb -c "$deb")
for f in "${files[@]}"; do
  grep -q " \./$f\$" <<<"$listing" || fail "the package lacks /$f"
done

root=$work/root
dpkg-deb -x "$deb" "$root"
for f in "$root"/usr/bin/*; do
  # An RPATH into the build tree would let the unpacked program load the build's libraries.
  rpaths=$(readelf -d "$f" | grep -E "R(UN)?PATH" || true)
  [[ $rpaths != *"$build"* ]] || fail "$f has an RPATH into $build: $rpaths"
done

cli=$root/usr/bin/headscope-cli
cd "$work"
"$cli" info >info.json || fail "headscope-cli info failed"
model_path=$(sed -n 's/^  "path": "\(.*\)",$/\1/p' info.json)
[[ $model_path == "$root/usr/share/headscope/models/headscope-tiny" ]] ||
  fail "info used the model at '$model_path', not the one in the unpacked package"
"$cli" run --text "Hello" -o packaged.npz || fail "headscope-cli run failed"
"$built_cli" run --text "Hello" -o built.npz
cmp -s packaged.npz built.npz || fail "the packaged run's activations differ from the build tree's"
if ((with_gui)); then
  [[ $(QT_QPA_PLATFORM=offscreen "$root/usr/bin/headscope" --version) == "headscope $version" ]] ||
    fail "the packaged headscope --version"
fi
echo "$(basename "$deb"): $(du -k "$deb" | cut -f1) KiB, Depends: $depends; unpacked programs ran on $model_path"
