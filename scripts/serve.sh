#!/usr/bin/env bash
# The README's start command: builds and starts the array on its embedded default
# (data directory ./lacuna-data, NBD, iSCSI and the API on 127.0.0.1). The build
# needs OpenSSL's headers (NBD's TLS-PSK); on a fresh Debian machine they are
# installed first. Arguments go to `lacuna serve` (e.g. --nbd-open-access).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(libssl-dev pkg-config)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "installing the build's dependencies: ${missing[*]}"
    SUDO=""
    [[ $(id -u) -eq 0 ]] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
command -v cargo >/dev/null || { echo "cargo not found: install Rust from https://rustup.rs" >&2; exit 1; }
exec cargo run --release -- serve "$@"
