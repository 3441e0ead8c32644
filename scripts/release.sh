#!/usr/bin/env bash
# Release builds of gorun, and what ships them:
#   dist/gorun-VERSION-linux-{amd64,arm64}.tar.gz   the binary, the other architecture's
#                                                    (gorun-linux-ARCH), README.md; SHA256SUMS beside them
#   dist/gorun_launcher-VERSION-py3-none-manylinux_2_28_{x86_64,aarch64}.whl
# Both binaries use cgo (NVML, loaded at run time), are stripped, built with
# -trimpath and no build id from a clean clone of HEAD (so two builds of one
# commit are byte for byte the same), and stamped with VERSION
# (internal/buildinfo/VERSION), the commit and the Go version. They are built
# in a Debian bullseye root (glibc 2.31, gcc 10 and its aarch64 cross
# compiler), and the build fails if either needs a glibc symbol newer than
# GLIBC_MAX (2.28: RHEL/Rocky 8, Ubuntu 20.04 and later start it).
#
# Usage: scripts/release.sh [--check]
#   --check   also run the amd64 binary inside the bullseye root and the
#             arm64 one under qemu-user (gorun version, a --dry-run, gorun
#             preflight --topo-file, and arm64 unit tests of cmdline, hosts
#             and envplan), and install each wheel into a fresh venv with
#             pip --no-index and run its gorun version.
# Needs: root, debootstrap, Debian's mirror (MIRROR), Go (go on PATH),
# git; --check also qemu-user-static and python3-venv.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
check=
[ "${1:-}" = --check ] && check=1
ROOT=${ROOT:-/var/cache/gorun-release/bullseye}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
GLIBC_MAX=${GLIBC_MAX:-2.28}
DIST=${DIST:-$repo/dist}
version=$(tr -d '[:space:]' <internal/buildinfo/VERSION)
say() { echo "release: $*"; }

# The bullseye root, made once and kept (ROOT).
if [ ! -x "$ROOT/usr/bin/aarch64-linux-gnu-gcc" ]; then
  say "making the Debian bullseye root at $ROOT (once)"
  mkdir -p "$ROOT"
  debootstrap --variant=minbase \
    --include=gcc,libc6-dev,gcc-aarch64-linux-gnu,libc6-dev-arm64-cross,git,ca-certificates \
    bullseye "$ROOT" "$MIRROR" >"$ROOT.log" 2>&1 || { tail -20 "$ROOT.log"; exit 1; }
fi
# This machine's Go, copied in when it differs from the root's.
goroot=$(go env GOROOT)
if [ "$(cat "$ROOT/usr/local/go/VERSION" 2>/dev/null)" != "$(cat "$goroot/VERSION")" ]; then
  rm -rf "$ROOT/usr/local/go" && cp -a "$goroot" "$ROOT/usr/local/go"
fi

# A clean clone of HEAD with its modules vendored: the build inside reads
# nothing from the network, and git stamps the commit (vendor/ excluded, so
# the build does not count as modified).
src=$ROOT/src/gorun
rm -rf "$src" && mkdir -p "$ROOT/src"
git clone -q --no-local "$repo" "$src"
git -C "$src" checkout -q "$(git rev-parse HEAD)"
(cd "$src" && GOFLAGS=-mod=mod go mod vendor)
echo /vendor/ >>"$src/.git/info/exclude"
commit=$(git -C "$src" rev-parse HEAD)
epoch=$(git -C "$src" log -1 --format=%ct)

# /proc inside the root: Go and gorun read /proc/self/exe.
mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
trap 'umount "$ROOT/proc" 2>/dev/null || true' EXIT
gobuild=(chroot "$ROOT" /usr/bin/env -i PATH=/usr/local/go/bin:/usr/bin:/bin HOME=/root GOROOT=/usr/local/go
  GOCACHE=/root/.cache/go-build GOPATH=/root/go GOTOOLCHAIN=local GOPROXY=off GOTELEMETRY=off
  CGO_ENABLED=1 GOOS=linux CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations")

out=$ROOT/out && rm -rf "$out" && mkdir -p "$out"
mkdir -p "$DIST"
rm -f "$DIST"/gorun-* "$DIST"/gorun_launcher-* "$DIST"/SHA256SUMS
for arch in amd64 arm64; do
  cc=gcc
  [ $arch = arm64 ] && cc=aarch64-linux-gnu-gcc
  say "building linux/$arch ($version, $commit)"
  "${gobuild[@]}" GOARCH=$arch CC=$cc sh -c "cd /src/gorun && go build -mod=vendor -buildvcs=true -trimpath -ldflags='-s -w -buildid=' -o /out/gorun-linux-$arch ."
  bin=$out/gorun-linux-$arch
  # Every GLIBC_ symbol version the binary needs, newest last.
  newest=$(readelf -W --dyn-syms "$bin" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
  if [ -z "$newest" ] || [ "$(printf '%s\n%s\n' "$newest" "$GLIBC_MAX" | sort -V | tail -1)" != "$GLIBC_MAX" ]; then
    echo "release: linux/$arch needs GLIBC_$newest, above GLIBC_$GLIBC_MAX:" >&2
    readelf -W --dyn-syms "$bin" | grep -E "GLIBC_($(echo "$newest" | sed 's/\./\\./g'))" >&2 || true
    exit 1
  fi
  say "linux/$arch: newest glibc symbol version GLIBC_$newest (at most GLIBC_$GLIBC_MAX)"
done
# Each tarball and wheel holds its own architecture's gorun and, beside
# it, the other's as gorun-linux-ARCH: the head uploads that one to the
# nodes of that architecture (a GH200 partition beside x86 nodes).
for arch in amd64 arm64; do
  other=arm64
  [ $arch = arm64 ] && other=amd64
  bin=$out/gorun-linux-$arch
  name=gorun-$version-linux-$arch
  stage=$(mktemp -d) && mkdir "$stage/$name"
  install -m 755 "$bin" "$stage/$name/gorun" && install -m 644 README.md "$stage/$name/README.md"
  install -m 755 "$out/gorun-linux-$other" "$stage/$name/gorun-linux-$other"
  tar --sort=name --mtime=@"$epoch" --owner=0 --group=0 --numeric-owner -C "$stage" -cf - "$name" | gzip -n >"$DIST/$name.tar.gz"
  rm -rf "$stage"
  python3 scripts/wheel.py "$bin" "$version" "$arch" "$epoch" "$DIST" "$out/gorun-linux-$other"
done
(cd "$DIST" && sha256sum gorun-"$version"-linux-*.tar.gz gorun_launcher-"$version"-*.whl >SHA256SUMS)
say "wrote:" && (cd "$DIST" && ls -l) | sed 's/^/  /'

[ -n "$check" ] || exit 0
# The amd64 build where glibc is 2.31, the arm64 one under qemu-user.
say "check: linux/amd64 in the bullseye root"
cp "$out/gorun-linux-amd64" "$ROOT/usr/local/bin/gorun"
mkdir -p "$ROOT/tmp/job" && printf 'print("hello")\n' >"$ROOT/tmp/job/train.py"
chroot "$ROOT" /usr/local/bin/gorun version
chroot "$ROOT" sh -c 'cd /tmp/job && /usr/local/bin/gorun --dry-run --preflight off --nproc-per-node 2 train.py' | tail -3
say "check: linux/arm64 under qemu-user"
qemu=(qemu-aarch64-static -L "$ROOT/usr/aarch64-linux-gnu")
"${qemu[@]}" "$out/gorun-linux-arm64" version
(cd "$ROOT/tmp/job" && "${qemu[@]}" "$out/gorun-linux-arm64" --dry-run --preflight off --nproc-per-node 2 train.py | tail -3)
"${qemu[@]}" "$out/gorun-linux-arm64" preflight --topo-file "$repo/preflight/testdata/topo/dgx-h100.txt" | tail -3
for pkg in cmdline hosts envplan; do
  "${gobuild[@]}" GOARCH=arm64 CC=aarch64-linux-gnu-gcc sh -c "cd /src/gorun && go test -mod=vendor -c -o /out/$pkg.test ./$pkg"
  (cd "$src/$pkg" && "${qemu[@]}" "$out/$pkg.test" -test.count=1 | tail -1)
done
say "check: the wheels in fresh venvs"
venv=$(mktemp -d)
python3 -m venv "$venv"
"$venv/bin/pip" install -q --no-index "$DIST"/gorun_launcher-*x86_64.whl
"$venv/bin/gorun" version
# The other architecture's build beside it, for the nodes of that one.
[ -x "$venv/bin/gorun-linux-arm64" ] || { echo "release: the amd64 wheel has no gorun-linux-arm64" >&2; exit 1; }
# This machine cannot install an aarch64 wheel into its own venv: pip puts it
# in a target folder for that platform, and qemu runs what it installed.
"$venv/bin/pip" install -q --no-index --no-deps --only-binary=:all: --platform manylinux_2_28_aarch64 \
  --target "$venv/arm64" "$DIST"/gorun_launcher-*aarch64.whl
"${qemu[@]}" "$venv/arm64/bin/gorun" version
rm -rf "$venv"
say "check: OK"
