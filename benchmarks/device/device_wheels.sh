#!/usr/bin/env bash
# Packages for the prepared GPU check (device_check.sh) on a lent GPU machine with no package
# registry: its image has Python 3.12, torch, JAX (CUDA), numpy 2, scipy, pandas, matplotlib,
# rich, flax, optax and chex, and none of the simulators. This downloads the rest into .whl/
# (git-ignored; carry it with the run): Python 3.12 wheels, wheels built here for the two
# sdist-only pure-Python packages (gym, minihack), and a tarball of procgen2 (its only wheel is
# for CPython 3.11, but its compiled part is a cffi library, not an extension module, so its
# files run on 3.12) and of rliable (the version pinned here is not on the index). The whole
# travelling tree must stay under 64 MiB; procgen2's Qt libraries are most of it, hence xz.
# Usage:  bash benchmarks/device/device_wheels.sh      (then device_check.sh installs .whl/ first)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-.venv/bin/python}"
DEST=.whl
rm -rf "$DEST"; mkdir -p "$DEST"
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
PLATFORMS=()
for p in manylinux_2_28 manylinux_2_27 manylinux_2_17 manylinux2014 manylinux1; do
  PLATFORMS+=(--platform "${p}_x86_64")
done
pin() { grep -i "^$1==" constraints.txt | head -1; }
for name in gymnasium stable_baselines3 ale-py nle meal-bench pettingzoo gym3 gym-notices \
    Farama-Notifications cffi pycparser gymnax; do
  spec="$(pin "$name")"; spec="${spec:-$name}"
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${PLATFORMS[@]}" -d "$DEST" "$spec"
done
# the image's pandas is 3.x: arch 7 (rliable's bootstrap, the report) fails on it, arch 8 runs
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${PLATFORMS[@]}" -d "$DEST" "arch==8.0.0"
# setuptools<81 still has pkg_resources, which minihack imports
"$PY" -m pip download -q --no-deps --only-binary=:all: -d "$DEST" "setuptools==80.9.0"
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$DEST" "$(pin gym)" "$(pin minihack)"
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
WORK="$(mktemp -d)"
"$PY" -m pip download -q --no-deps -d "$WORK" "$(pin procgen2)"
(cd "$WORK" && unzip -q procgen2-*.whl -d files && cp -r "$SITE"/rliable "$SITE"/rliable-*.dist-info files/)
tar -cJf "$DEST/site-extra.tar.xz" -C "$WORK/files" .
# procgen's Qt links libGL and X11, which the image lacks: the system libraries they need
# (device_check.sh puts on LD_LIBRARY_PATH only those the machine does not have)
mkdir -p "$WORK/libs"
for lib in $(ldd "$WORK"/files/procgen/data/prebuilt/libenv.so "$WORK"/files/procgen2.libs/*.so* \
    | awk '$2 == "=>" && $3 ~ /^\// && $3 !~ /procgen2.libs/ {print $3}' | sort -u); do
  case "$(basename "$lib")" in
    libc.so*|libdl.so*|libm.so*|libpthread.so*|librt.so*|libresolv.so*|libgcc_s.so*|libstdc++.so*|libz.so*) ;;
    *) cp -L "$lib" "$WORK/libs/" ;;
  esac
done
tar -cJf "$DEST/system-libs.tar.xz" -C "$WORK/libs" .
rm -rf "$WORK"
du -ch "$DEST"/* | tail -1
