#!/usr/bin/env bash
# Fetches Debian 12's zlib1g-dev for arm64 and armhf and unpacks its static library and headers
# under platforms/deps/cross/<triplet>/{include,lib}, where the ARM Linux cross builds find zlib
# (edgefl::data reads gzip'd IDX files; platforms/cmake/edgefl_cross.cmake points FindZLIB there).
#
#   platforms/deps/fetch-cross-zlib.sh    # called by setup.sh --cross; root is not needed
#
# Why not multiarch (dpkg --add-architecture arm64 armhf)? It changes the system's apt
# configuration, pulls a second glibc (libc6-dev:arm64) next to the cross toolchain's, and makes
# every `apt-get update` depend on the foreign indexes. Instead, like fetch-mbedtls.sh, apt runs
# with a private sources list and private state (a temporary directory; /etc/apt, the system's
# package lists and dpkg's database are never touched), verifies the .debs against bookworm's
# signed index, and this script checks each against the SHA-256 pinned below. Only libz.a and the
# two headers are used: the cross builds link zlib statically, so qemu-user needs no arm64 libz.so.
#
# Idempotent: when both trees are unpacked with the pinned hashes, it does nothing (no network).
set -euo pipefail
umask 022

# --- the pin -----------------------------------------------------------------------------------
zlib_version=1:1.2.13.dfsg-1  # Debian 12's zlib1g-dev (the same version as the host's)
declare -A deb_sha256=(
  [arm64]=afb60f0bae432f2f0edfe2d674e99c1a13a147c9aa2b52f2f23e3df19ece76f5
  [armhf]=4fbb63530bb52324d74f42f6d69b6b1c6e3c09bd2cb84cecc121f688191e04f5
)
declare -A triplet=([arm64]=aarch64-linux-gnu [armhf]=arm-linux-gnueabihf)

mirror=${EDGEFL_DEBIAN_MIRROR:-http://deb.debian.org/debian}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cross_dir=$here/cross

say() { echo "fetch-cross-zlib: $*"; }
die() { echo "fetch-cross-zlib: error: $*" >&2; exit 1; }

missing=()
for arch in arm64 armhf; do
  stamp=$cross_dir/${triplet[$arch]}/.edgefl-zlib-sha256
  if [[ -f "$stamp" && "$(cat "$stamp")" == "${deb_sha256[$arch]}" ]]; then
    say "zlib $zlib_version for ${triplet[$arch]} present ($cross_dir/${triplet[$arch]})"
  else
    missing+=("$arch")
  fi
done
((${#missing[@]} == 0)) && exit 0

command -v apt-get > /dev/null || die "apt-get not found: this script needs Debian"
[[ -f "$keyring" ]] || die "$keyring is missing: install debian-archive-keyring (setup.sh does)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/download"
archs=$(IFS=,; echo "${missing[*]}")
echo "deb [arch=$archs signed-by=$keyring] $mirror bookworm main" > "$work/sources.list"
cat > "$work/apt.conf" << 'EOF'
#clear APT::Update::Pre-Invoke;
#clear APT::Update::Post-Invoke;
#clear APT::Update::Post-Invoke-Success;
EOF
apt_opts=(
  -c "$work/apt.conf"
  -o "Dir::Etc::SourceList=$work/sources.list"
  -o Dir::Etc::SourceParts=-
  -o "Dir::State::Lists=$work/lists"
  -o "Dir::Cache=$work/cache"
  -o Dir::State::status=/dev/null
  -o Acquire::Languages=none
)
for arch in "${missing[@]}"; do apt_opts+=(-o "APT::Architectures::=$arch"); done
if [[ $(id -u) -eq 0 ]] && id -u _apt > /dev/null 2>&1; then
  chown _apt "$work/download"
fi

say "reading Debian 12's package index for ${missing[*]} from $mirror (private apt state in $work)"
apt-get "${apt_opts[@]}" -qq update || die "apt-get update against $mirror bookworm failed"
for arch in "${missing[@]}"; do
  (cd "$work/download" && apt-get "${apt_opts[@]}" -qq download "zlib1g-dev:$arch=$zlib_version" > /dev/null) ||
    die "could not download zlib1g-dev:$arch=$zlib_version (Debian 12 may have replaced it: update the pin)"
  deb=$(ls "$work/download"/zlib1g-dev_*_"$arch".deb)
  actual=$(sha256sum "$deb" | cut -d' ' -f1)
  [[ "$actual" == "${deb_sha256[$arch]}" ]] ||
    die "SHA-256 mismatch for $(basename "$deb"): expected ${deb_sha256[$arch]}, got $actual"
  unpacked=$work/unpack-$arch
  dpkg-deb -x "$deb" "$unpacked"
  dest=$cross_dir/${triplet[$arch]}
  rm -rf "$dest"
  mkdir -p "$dest/include" "$dest/lib"
  cp "$unpacked/usr/include/zlib.h" "$unpacked/usr/include/zconf.h" "$dest/include/"
  cp "$unpacked/usr/lib/${triplet[$arch]}/libz.a" "$dest/lib/"
  echo "${deb_sha256[$arch]}" > "$dest/.edgefl-zlib-sha256"
  say "unpacked zlib $zlib_version for ${triplet[$arch]} into $dest"
done
