#!/usr/bin/env bash
# The README's start command: builds and starts the array on its embedded default
# (data directory ./lacuna-data, NBD, iSCSI and the API on 127.0.0.1). The build
# needs OpenSSL's headers (NBD's TLS-PSK) and librados (the optional store on
# Ceph, --store rados); on a fresh Debian machine they are installed first. Arguments go to `lacuna serve` (e.g. --nbd-open-access).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-packages.sh libssl-dev pkg-config librados-dev
command -v cargo >/dev/null || { echo "cargo not found: install Rust from https://rustup.rs" >&2; exit 1; }
exec cargo run --release -- serve "$@"
