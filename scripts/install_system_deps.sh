#!/usr/bin/env bash
# System packages the test suite needs, every one of them: a test whose tool is missing fails
# (it never skips), naming this script. Debian's chromium and its matching chromedriver (the
# dashboard's real-browser test drives them; no browser is ever downloaded by a tool),
# redis-server (the Redis store's tests start their own server on a free loopback port),
# nodejs (the dashboard's plain-language script runs in node), and curl and jq (the shell
# sessions of the README and the docs run as written), git and make (the two commands are
# run on a clean clone of the tree).
# Idempotent and quiet when everything is already installed; needs root (or sudo) otherwise.
set -euo pipefail

packages=(chromium chromium-driver redis-server nodejs curl jq git make)
missing=()
for pkg in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done
[ "${#missing[@]}" -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
else
    echo "install_system_deps: need root to install: ${missing[*]}" >&2
    exit 1
fi

echo "install_system_deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
