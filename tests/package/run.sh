#!/usr/bin/env bash
# The installable package, tried as a user would (CI component `package`):
#
#   1. builds the `package` preset (build/package: libraries, libedgefl_c.so, the tools, bundled
#      mbedTLS, no tests);
#   2. installs it with `cmake --install` into a clean prefix, and packs the .deb with CPack;
#      unpacks the .deb into another clean prefix (dpkg-deb -x: no root, nothing on the system);
#   3. for each of the build tree, the install tree and the unpacked .deb, builds examples/ as a
#      separate project with find_package(edgefl) (static C++ libraries and the static C API),
#      runs the codec example, and runs one federated round of the C example (static and shared
#      C API) against the package's own edgefl-server, with certificates from its own `edgefl certs`;
#   4. compiles the C example with nothing but `pkg-config --cflags --libs edgefl` and runs it too;
#   5. with --system (CI, as root): installs the .deb with apt (its Depends resolved), builds and
#      runs the consumer with no search path at all, and removes the package again.
#
#   tests/package/run.sh [--system] [WORK_DIR]     (default: build/package-test)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
system=0
if [[ ${1:-} == "--system" ]]; then
  system=1
  shift
fi
work=${1:-$root/build/package-test}
cd "$root"

rm -rf "$work"
mkdir -p "$work"
cmake --preset package >/dev/null
cmake --build --preset package

# 2. install, pack, unpack
cmake --install build/package --prefix "$work/install" >"$work/install.log"
(cd build/package && cpack -G DEB -B "$work/deb" >"$work/cpack.log")
deb=$(ls "$work"/deb/edgefl_*.deb)
dpkg-deb --info "$deb" | sed -n '/Package:/,$p'
dpkg-deb -x "$deb" "$work/deb-root"
echo "package: $(basename "$deb"), $(dpkg-deb -c "$deb" | wc -l) entries"

fail() {
  echo "package test: $*" >&2
  exit 1
}
[[ -f $work/install/include/edgefl/codec.h ]] || fail "no headers installed"
[[ -x $work/install/bin/edgefl && -x $work/install/bin/edgefl-server ]] || fail "no tools installed"
# The CMake package and the pkg-config file, wherever GNUInstallDirs put them (lib/<multiarch>).
cmake_dir=$(find "$work/install" -type f -name edgeflConfig.cmake -printf '%h\n' | head -n 1)
pc_dir=$(find "$work/install" -type f -name edgefl.pc -printf '%h\n' | head -n 1)
[[ -n $cmake_dir && -n $pc_dir ]] || fail "no edgeflConfig.cmake or edgefl.pc installed"
if grep -rq "$root" "$cmake_dir" "$pc_dir"; then
  fail "the installed package files name the source tree (or the install prefix: not relocatable)"
fi

# 3. a consumer per tree: examples/ on its own
consume() {  # NAME PREFIX_PATH EDGEFL EDGEFL_SERVER LIB_DIR
  local name=$1 prefix_path=$2 cli=$3 server=$4 lib=$5 build=$work/consumer-$1
  echo "=== consumer against the $name"
  cmake -S examples -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix_path" \
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$build.configure.log" || { cat "$build.configure.log"; fail "$name: configure"; }
  grep "edgefl_examples:" "$build.configure.log"
  cmake --build "$build" >"$build.build.log" || { cat "$build.build.log"; fail "$name: build"; }
  "$build/edgefl_example_compress_update" | tail -n 2
  local clients=(-- "$build/edgefl_example_c_client")
  if [[ -x $build/edgefl_example_c_client_shared ]]; then
    clients+=(-- env LD_LIBRARY_PATH="$lib" "$build/edgefl_example_c_client_shared")
  fi
  bash tests/capi/round_test.sh "$cli" "$server" "$build/round" "${clients[@]}" |
    grep -E "^(task|round|outcome)" | head -n 4
  echo "$name: ok"
}
libdir_of() { find "$1" -name 'libedgefl_core.a' -printf '%h\n' | head -n 1; }

b=$root/build/package
consume build-tree "$b" "$b/sdk/cli/edgefl" "$b/server/edgefl-server" "$b/sdk"
consume install-tree "$work/install" "$work/install/bin/edgefl" "$work/install/bin/edgefl-server" \
  "$(libdir_of "$work/install")"
consume deb "$work/deb-root/usr" "$work/deb-root/usr/bin/edgefl" "$work/deb-root/usr/bin/edgefl-server" \
  "$(libdir_of "$work/deb-root/usr")"

# 4. pkg-config, from the unpacked .deb
echo "=== pkg-config against the deb"
libdir=$(libdir_of "$work/deb-root/usr")
export PKG_CONFIG_PATH=$libdir/pkgconfig
echo "pkg-config edgefl: $(pkg-config --modversion edgefl): $(pkg-config --cflags --libs edgefl)"
cc -std=c99 -O2 -o "$work/c_client_pkgconfig" examples/c_client/main.c $(pkg-config --cflags --libs edgefl)
cc -std=c99 -O2 -o "$work/c_client_pkgconfig_static" examples/c_client/main.c \
  $(pkg-config --cflags edgefl) "$libdir/libedgefl_c.a" $(pkg-config --static --libs-only-l --libs-only-other edgefl | sed 's/-ledgefl_c //') -L"$libdir"
bash tests/capi/round_test.sh "$work/deb-root/usr/bin/edgefl" "$work/deb-root/usr/bin/edgefl-server" "$work/pkgconfig-round" \
  -- env LD_LIBRARY_PATH="$libdir" "$work/c_client_pkgconfig" -- "$work/c_client_pkgconfig_static" | grep -E "^(task|round|outcome)" | head -n 4

# 5. the .deb on the system
if ((system)); then
  echo "=== consumer against the installed .deb"
  if dpkg-query -W -f='${Status}' edgefl 2>/dev/null | grep -q "install ok installed"; then
    fail "a package named edgefl is installed already; not touching it"
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$deb" >"$work/apt.log"
  trap 'dpkg -r edgefl >/dev/null' EXIT
  consume system "" /usr/bin/edgefl /usr/bin/edgefl-server ""
  dpkg -r edgefl >/dev/null
  trap - EXIT
  [[ ! -e /usr/bin/edgefl-server ]] || fail "dpkg -r left /usr/bin/edgefl-server behind"
fi
echo "package test: all consumers built and ran"
