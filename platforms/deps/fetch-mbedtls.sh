#!/usr/bin/env bash
# Fetches the source of mbedTLS 3.6 LTS from Debian 13 (trixie) and unpacks it under
# platforms/deps/src/mbedtls-<version>, where platforms/cmake/edgefl_mbedtls.cmake finds it.
#
#   platforms/deps/fetch-mbedtls.sh    # called by setup.sh; root is not needed
#
# Why: Debian 12 ships mbedTLS 2.28 (end of life, no TLS 1.3). Debian 13's source package is
# fetched with `apt-get source` through a private sources list and private apt state (a temporary
# directory): /etc/apt and the system's package lists are never touched. apt checks the files
# against trixie's signed Sources index (keyring: debian-archive-keyring, which carries the trixie
# keys from 2023.3+deb12u2 on); this script then checks the upstream tarball against the SHA-256
# pinned below and aborts on any mismatch. Only the upstream tarball (.orig.tar.*) is used: the
# Debian patches of this version are packaging only (GCC 14, a Debian-only CMake change).
#
# Idempotent: when the tarball is present, matches the pin and is unpacked, it does nothing (no
# network). Bumping: read the "Security" section of the new ChangeLog, run `apt-cache showsrc
# mbedtls` against trixie (see apt_opts below), then update the four pins together.
set -euo pipefail
umask 022

# --- the pin -----------------------------------------------------------------------------------
mbedtls_version=3.6.6                          # upstream version (directory mbedtls-<this>)
debian_version=3.6.6-0.1~deb13u1               # Debian 13's source package version
orig_file=mbedtls_3.6.6.orig.tar.bz2           # the upstream tarball as Debian ships it
orig_sha256=8fb65fae8dcae5840f793c0a334860a411f884cc537ea290ce1c52bb64ca007a

mirror=${EDGEFL_DEBIAN_MIRROR:-http://deb.debian.org/debian}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src_dir=$here/src
dest=$src_dir/mbedtls-$mbedtls_version
stamp=$dest/.edgefl-orig-sha256                # written last: its presence means "fully unpacked"

say() { echo "fetch-mbedtls: $*"; }
die() { echo "fetch-mbedtls: error: $*" >&2; exit 1; }

# Checks $1 against the pinned SHA-256; aborts on a mismatch ($2: what to do about it).
verify() {
  local actual
  actual=$(sha256sum "$1" | cut -d' ' -f1)
  if [[ "$actual" != "$orig_sha256" ]]; then
    die "SHA-256 mismatch for $1
  expected $orig_sha256 (pinned in $here/fetch-mbedtls.sh)
  actual   $actual
Refusing to use it. $2"
  fi
}

# Unpacks the verified tarball into $dest (atomically: a temporary directory, then a rename).
unpack() {
  local tmp top
  if [[ -e "$dest" ]]; then
    say "removing the incomplete $dest"
    rm -rf "$dest"
  fi
  tmp=$(mktemp -d "$src_dir/.unpack.XXXXXX")
  # GNU tar detects the compression (bz2, xz, gz) by itself; ownership is the caller's.
  if ! tar -xf "$src_dir/$orig_file" -C "$tmp" --no-same-owner; then
    rm -rf "$tmp"
    die "could not unpack $src_dir/$orig_file (are bzip2 and xz-utils installed?)"
  fi
  # One top-level directory, whatever Debian named it (mbedtls-3.6.6, or a +dfsg repack).
  top=$(find "$tmp" -mindepth 1 -maxdepth 1)
  if [[ $(printf '%s\n' "$top" | wc -l) -ne 1 || ! -d "$top" || ! -f "$top/include/mbedtls/build_info.h" ]]; then
    rm -rf "$tmp"
    die "$orig_file does not hold one mbedTLS source tree"
  fi
  mv "$top" "$dest"
  rmdir "$tmp"
  echo "$orig_sha256" > "$stamp"
  say "unpacked mbedTLS $mbedtls_version into $dest"
}

mkdir -p "$src_dir"

# --- already here? -----------------------------------------------------------------------------
if [[ -f "$src_dir/$orig_file" ]]; then
  verify "$src_dir/$orig_file" "Delete it and run this script again to fetch it anew."
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$orig_sha256" ]]; then
    say "mbedTLS $mbedtls_version present and verified ($dest)"
    exit 0
  fi
  unpack
  exit 0
fi

# --- fetch through a private apt state ----------------------------------------------------------
command -v apt-get > /dev/null || die "apt-get not found: this script needs Debian (or fetch $orig_file by hand into $src_dir)"
[[ -f "$keyring" ]] || die "$keyring is missing: install debian-archive-keyring (platforms/deps/setup.sh does)"
# The combined keyring holds the trixie keys when the per-release ones are installed beside it.
if [[ ! -f /usr/share/keyrings/debian-archive-trixie-stable.gpg ]]; then
  die "debian-archive-keyring is too old to verify Debian 13's archive: upgrade it to 2023.3+deb12u2
or later (bookworm's own update: apt-get install debian-archive-keyring; setup.sh does it)"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/download"
echo "deb-src [signed-by=$keyring] $mirror trixie main" > "$work/sources.list"
# Options that cannot be given with -o: the system's apt.conf.d may hook commands onto
# `apt-get update` (PackageKit, AppStream caches); they have no business with this private state.
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
  -o Acquire::Languages=none
)
# As root, apt downloads as the unprivileged _apt user when it can write the target directory.
if [[ $(id -u) -eq 0 ]] && id -u _apt > /dev/null 2>&1; then
  chown _apt "$work/download"
fi

say "reading Debian 13's source index from $mirror (private apt state in $work)"
if ! apt-get "${apt_opts[@]}" -qq update; then
  die "apt-get update against $mirror trixie failed (network, or a keyring without the trixie keys)"
fi
say "downloading the source package mbedtls $debian_version"
if ! (cd "$work/download" && apt-get "${apt_opts[@]}" -qq source --download-only "mbedtls=$debian_version" > /dev/null); then
  available=$(apt-cache "${apt_opts[@]}" showsrc mbedtls 2> /dev/null | sed -n 's/^Version: //p' | tr '\n' ' ')
  die "Debian 13 does not offer mbedtls $debian_version (it offers: ${available:-nothing}).
Debian keeps only the newest version of a stable release: bump the pin in $here/fetch-mbedtls.sh."
fi

shopt -s nullglob
origs=()
for f in "$work/download"/mbedtls_*.orig.tar.*; do
  [[ "$f" == *.asc ]] || origs+=("$f")       # skip upstream signatures, if Debian ships them
done
shopt -u nullglob
if ((${#origs[@]} != 1)); then
  die "expected one upstream tarball (mbedtls_*.orig.tar.*) in the source package, found ${#origs[@]}"
fi
if [[ "$(basename "${origs[0]}")" != "$orig_file" ]]; then
  die "Debian ships $(basename "${origs[0]}"), the pin expects $orig_file: update the pin"
fi
verify "${origs[0]}" "The download was discarded. If Debian really changed the tarball, review the
change (ChangeLog, Debian's changelog) and update the pins at the top of this script."
mv "${origs[0]}" "$src_dir/$orig_file"
say "verified $orig_file (SHA-256 $orig_sha256)"
unpack
