#!/usr/bin/env bash
# Runs the Compose stack's test (TestComposeStack) with Compose v2 (`docker compose`), on a machine
# that has only v1 (Debian bookworm's docker-compose 1.29.2, which .ci/run installs): it builds
# Compose v2 from its source on the Go module proxy (about 2 minutes the first time; cached under
# ~/.cache/slotcron after that) and puts it where the docker CLI finds plugins, in a DOCKER_CONFIG of
# its own (with a copy of your docker config.json), so nothing outside this run changes. The test
# prefers `docker compose` when it answers.
#
#   deploy/compose-v2.sh                 # Compose v2.40.3
#   COMPOSE_VERSION=v2.35.1 deploy/compose-v2.sh
#   deploy/compose-v2.sh -run TestComposeStack/TwentySlots   # extra `go test` flags, after the defaults
#
# .ci/run does not run this: the build would add two minutes to a fresh machine's CI. Its last run
# is in the README ("The stack in CI").
set -euo pipefail
cd "$(dirname "$0")/.."
work="" config=""
trap 'rm -rf "$config"; [ -z "$work" ] || { chmod -R u+w "$work"; rm -rf "$work"; }' EXIT
version=${COMPOSE_VERSION:-v2.40.3}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/slotcron/compose-$version
if [ ! -x "$cache/docker-compose" ]; then
  echo "building Compose $version from the Go module proxy into $cache"
  # Compose's go.mod has exclude directives, so `go install module@version` refuses it: build
  # inside a copy of the module instead.
  dl=$(go mod download -json "github.com/docker/compose/v2@$version" || true)
  src=$(printf '%s\n' "$dl" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -n "$src" ] || { printf 'cannot download github.com/docker/compose/v2@%s:\n%s\n' "$version" "$dl" >&2; exit 1; }
  work=$(mktemp -d)
  cp -r "$src" "$work/compose"
  chmod -R u+w "$work/compose"
  mkdir -p "$cache"
  (cd "$work/compose" && go build -trimpath \
    -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$version" -o "$cache/docker-compose" ./cmd)
fi
config=$(mktemp -d)
mkdir -p "$config/cli-plugins"
# The user's docker config (its current context, credential helpers) still applies: only the
# plugin is added.
[ ! -f "${DOCKER_CONFIG:-$HOME/.docker}/config.json" ] || cp "${DOCKER_CONFIG:-$HOME/.docker}/config.json" "$config/"
ln -s "$cache/docker-compose" "$config/cli-plugins/docker-compose"
DOCKER_CONFIG=$config docker compose version
DOCKER_CONFIG=$config go test -race -tags compose -run TestComposeStack -v -timeout 20m "$@" ./deploy
