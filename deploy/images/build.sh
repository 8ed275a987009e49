#!/usr/bin/env bash
# Builds slotcron's container images locally, from Debian's packages, with no container registry:
#
#   slotcron/debian-base:bookworm  a minbase debootstrap of Debian bookworm (with its security
#                                  updates), without apt lists, docs or man pages, imported
#   slotcron/redis:7               the base + Debian's redis-server (redis.Dockerfile)
#   slotcron/golang:1.26           the base + this machine's Go toolchain (golang.Dockerfile): the
#                                  build stage of the worker image, since golang:1.26 can't be pulled
#   slotcron/worker:dev            the top-level Dockerfile: cmd/worker, static, non-root
#   slotcron/jaeger:dev            Jaeger v2 all-in-one with its UI (jaeger.Dockerfile), from what
#                                  $JAEGER_SH builds; skipped, with a message, when there is none
#
# Usage: deploy/images/build.sh [debian-base|redis|golang|worker|jaeger ...]   (default: all)
#
# Each image carries the label slotcron.inputs: a hash of what it is built from (the recipe, the
# Dockerfile, the image it starts from, the sources it copies). An image whose hash is unchanged is
# skipped, so a second run does nothing. FORCE=1 rebuilds anyway, e.g. to pick up new Debian
# security updates (the package versions are not part of the hash).
#
# Environment: DEBIAN_MIRROR and DEBIAN_SECURITY_MIRROR (default: the ones apt uses on this
# machine, else deb.debian.org), JAEGER_SH (default: ../shared/tools/jaeger.sh beside the repo).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
started=$SECONDS
label=slotcron.inputs
work=$(mktemp -d /tmp/slotcron-images.XXXXXX)
trap 'rm -rf "$work"' EXIT

base_image=slotcron/debian-base:bookworm
redis_image=slotcron/redis:7
golang_image=slotcron/golang:1.26
worker_image=slotcron/worker:dev
jaeger_image=slotcron/jaeger:dev

# apt_uri prints the URIs of the apt sources on this machine whose suite matches $1 (an awk
# pattern), from deb822 .sources files and one-line sources.list entries.
apt_uri() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v want="$1" '
      /^URIs:/ { uri = $2 } /^Suites:/ { for (i = 2; i <= NF; i++) if ($i ~ want) ok = 1 }
      /^$/ { if (ok && uri) print uri; uri = ""; ok = 0 }
      END { if (ok && uri) print uri }' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk -v want="$1" '$1 == "deb" && $2 !~ /^\[/ && $3 ~ want { print $2 }' "$f"
  done
}
mirror=${DEBIAN_MIRROR:-$(apt_uri '^bookworm$' | head -n1)}
mirror=${mirror:-http://deb.debian.org/debian}
security_mirror=${DEBIAN_SECURITY_MIRROR:-$(apt_uri '^bookworm-security$' | head -n1)}
security_mirror=${security_mirror:-http://deb.debian.org/debian-security}

# built_hash prints the slotcron.inputs label of an image, or nothing when there is no such image.
built_hash() {
  docker image inspect -f "{{ index .Config.Labels \"$label\" }}" "$1" 2>/dev/null || true
}

# up_to_date reports whether image $1 exists and was built from inputs hashing to $2.
up_to_date() {
  if [ -z "${FORCE:-}" ] && [ "$(built_hash "$1")" = "$2" ]; then
    echo "== $1: up to date (inputs ${2:0:12}), skipped"
    return 0
  fi
  echo "== $1: building (inputs ${2:0:12})"
  return 1
}

image_id() { docker image inspect -f '{{ .Id }}' "$1"; }

# build_rootfs makes the base's root file system in $1: debootstrap, security updates, then the
# parts a container does not need removed, and dpkg told to leave them out of later installs.
build_rootfs() {
  local root=$1
  debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 ||
    { tail -n 30 "$root.log"; return 1; }
  rm -f "$root/etc/apt/sources.list"
  cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security_mirror
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  # The same choices as Debian's own -slim images: no docs, man pages or translations.
  cat >"$root/etc/dpkg/dpkg.cfg.d/slotcron-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/locale/*
EOF
  cat >"$root/etc/apt/apt.conf.d/slotcron-slim" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
EOF
  chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive sh -c \
    'apt-get update -qq && apt-get upgrade -y -qq >/dev/null && apt-get clean' >>"$root.log" 2>&1 ||
    { tail -n 30 "$root.log"; return 1; }
  find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$root"/usr/share/{man,info,groff,lintian,locale}/* \
    "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
    "$root"/var/lib/dpkg/*-old "$root"/var/log/* "$root"/dev/* "$root"/tmp/* \
    "$root"/etc/machine-id "$root"/etc/hostname "$root"/etc/resolv.conf
}

build_base() {
  local hash root
  # The recipe is the input: the functions that build it, and the mirrors they read.
  hash=$( { declare -f build_rootfs; echo "$mirror $security_mirror"; } | sha256sum | cut -c1-64)
  up_to_date "$base_image" "$hash" && return 0
  command -v debootstrap >/dev/null ||
    { echo "debootstrap is missing: apt-get install -y debootstrap" >&2; return 1; }
  [ "$(id -u)" -eq 0 ] || { echo "debootstrap needs root: run this script as root" >&2; return 1; }
  root=$work/rootfs
  mkdir "$root"
  build_rootfs "$root"
  tar --numeric-owner -C "$root" -c . |
    docker import -c "LABEL $label=$hash" -c 'CMD ["bash"]' \
      -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      -m "debootstrap --variant=minbase bookworm $mirror" - "$base_image" >/dev/null
}

# build_dockerfile IMAGE DOCKERFILE CONTEXT HASH-EXTRA [docker build args...]: builds when the
# Dockerfile, the base image or HASH-EXTRA changed. Without the buildx plugin (as here) docker
# uses its legacy builder and prints that it is deprecated; the Dockerfiles suit BuildKit too.
build_dockerfile() {
  local image=$1 dockerfile=$2 context=$3 extra=$4 hash
  shift 4
  hash=$( { cat "$dockerfile"; image_id "$base_image"; echo "$extra $*"; } | sha256sum | cut -c1-64)
  up_to_date "$image" "$hash" && return 0
  docker build -q --force-rm -f "$dockerfile" --label "$label=$hash" -t "$image" "$@" "$context" >/dev/null
}

build_redis() {
  build_dockerfile "$redis_image" "$here/redis.Dockerfile" "$here" "" --build-arg "BASE=$base_image"
}

build_golang() {
  local goroot version
  goroot=$(go env GOROOT)
  version=$(go env GOVERSION)
  case $version in go1.26*) ;; *)
    echo "the Go here is $version; $golang_image needs a go1.26.x (go.mod's go line)" >&2
    return 1 ;;
  esac
  build_dockerfile "$golang_image" "$here/golang.Dockerfile" "$goroot" "$version" \
    --build-arg "BASE=$base_image"
}

# build_worker stages the worker's build context: the files git knows (or would add) outside
# deploy/, docs/, bench/ and .ci/, without tests, their testdata, internal/otlptest (a test helper),
# internal/mutants (the mutation check's list and script) and the Markdown (so that a change to them does not rebuild the image), and a vendor/ directory made here with this machine's module cache and
# proxy, so that the build needs no network (a proxy that intercepts TLS, as on some CI machines,
# is trusted here but not inside the build). The inputs are every staged file.
build_worker() {
  local ctx=$work/worker hash
  mkdir "$ctx"
  (cd "$repo" && git ls-files -z --cached --others --exclude-standard -- . \
    ':!deploy' ':!docs' ':!bench' ':!.ci' ':!*_test.go' ':!**/testdata/**' ':!*.md' ':!internal/otlptest' ':!internal/mutants' |
    tar --null -T - -c) | tar -C "$ctx" -x
  (cd "$repo" && go mod vendor -o "$ctx/vendor")
  hash=$( { image_id "$golang_image"; cd "$ctx" && find . -type f -print0 | sort -z | xargs -0 sha256sum; } |
    sha256sum)
  build_dockerfile "$worker_image" "$ctx/Dockerfile" "$ctx" "$hash" \
    --build-arg "BUILDER=$golang_image" --build-arg GOFLAGS=-mod=vendor
}

# The Jaeger image wraps what jaeger.sh built: a Jaeger v2 binary (dynamically linked against
# glibc, which the bookworm base has), the UI's assets, and a config that serves them.
build_jaeger() {
  local jaeger_sh=${JAEGER_SH:-$(dirname "$repo")/shared/tools/jaeger.sh} launcher cache ctx hash
  if [ ! -x "$jaeger_sh" ]; then
    echo "== $jaeger_image: skipped: no Jaeger build script at $jaeger_sh" \
      "(set JAEGER_SH to the jaeger.sh that builds Jaeger v2 from the module proxy)"
    return 0
  fi
  echo "== $jaeger_image: running $jaeger_sh (about 6 minutes the first time, then cached)"
  launcher=$("$jaeger_sh")
  cache=$(dirname "$launcher")
  ctx=$work/jaeger
  mkdir "$ctx"
  cp "$cache/jaeger" "$ctx/jaeger"
  # jaeger.sh builds with symbols and DWARF (about 120 MB); stack traces don't need them.
  if command -v strip >/dev/null; then strip "$ctx/jaeger"; fi
  cp -r "$cache"/jaeger-ui-*/. "$ctx/ui"
  # The launcher's config names the UI by its path on this machine; in the image it is /ui.
  sed -E 's#^( *assets_path:).*#\1 /usr/share/jaeger-ui#' "$cache/config.yaml" >"$ctx/config.yaml"
  grep -q 'assets_path: /usr/share/jaeger-ui' "$ctx/config.yaml" ||
    { echo "$cache/config.yaml has no ui assets_path to rewrite" >&2; return 1; }
  hash=$(cd "$ctx" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum)
  build_dockerfile "$jaeger_image" "$here/jaeger.Dockerfile" "$ctx" "$hash" \
    --build-arg "BASE=$base_image"
}

command -v docker >/dev/null || { echo "docker is not installed" >&2; exit 1; }
docker info >/dev/null 2>&1 || { echo "the Docker daemon does not answer (docker info)" >&2; exit 1; }

# ensure builds an image once per run, after the images it starts from.
built=" "
ensure() {
  local need
  case $1 in
    debian-base) need=() ;;
    worker) need=(debian-base golang) ;;
    *) need=(debian-base) ;;
  esac
  for n in "${need[@]}"; do ensure "$n"; done
  [[ $built == *" $1 "* ]] && return 0
  local step=$SECONDS
  "build_${1/debian-base/base}"
  built+="$1 "
  echo "   $1: $((SECONDS - step))s"
}

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(debian-base redis golang worker jaeger)
for t in "${targets[@]}"; do
  case $t in
    debian-base|redis|golang|worker|jaeger) ;;
    *) echo "unknown image $t (want debian-base, redis, golang, worker or jaeger)" >&2; exit 2 ;;
  esac
done
for t in "${targets[@]}"; do ensure "$t"; done

# Former versions of these images and their build stages, now untagged, would pile up run after run.
docker image prune -f --filter "label=$label" >/dev/null

echo
docker image ls --filter 'reference=slotcron/*' --format '{{ printf "%-30s %s" (printf "%s:%s" .Repository .Tag) .Size }}'
echo "deploy/images/build.sh: $((SECONDS - started))s"
