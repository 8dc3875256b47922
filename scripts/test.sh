#!/usr/bin/env bash
# The README's test command: installs what the build and tests need (Debian packages,
# OpenSSL's headers for NBD TLS among them, and the Rust toolchain's components) and
# runs every test of the workspace, including the interop tests with the real
# clients, the crash torture test (which builds a small libiscsi client with gcc)
# and the bounded fuzzing.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-packages.sh libssl-dev pkg-config libnbd-bin python3-libnbd nbdkit qemu-utils qemu-block-extra fio libiscsi-bin libiscsi-dev gcc e2fsprogs sg3-utils python3-zeep openssl curl chromium chromium-driver python3-selenium ceph-mon ceph-osd ceph-mgr ceph-common librados-dev
command -v cargo >/dev/null || { echo "cargo not found: install Rust from https://rustup.rs" >&2; exit 1; }
rustup component add rustfmt clippy >/dev/null 2>&1 || true

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# The tests get a temporary directory of their own (TMPDIR), in which none of
# their `lacuna-*` data directories may be left behind: each test removes what
# it made, passed or failed (repeated runs once filled the disk).
test_tmp="$(mktemp -d)"
TMPDIR="$test_tmp" cargo test --workspace -- --test-threads=2
leftovers="$(find "$test_tmp" -mindepth 1 -maxdepth 1 -name 'lacuna-*')"
if [[ -n "$leftovers" ]]; then
    echo "tests left data directories behind:" >&2
    echo "$leftovers" >&2
    exit 1
fi
rm -rf "$test_tmp"
# The browser test's screenshots of every dashboard page at two widths.
echo "dashboard screenshots: ${CARGO_TARGET_DIR:-target}/tmp/dashboard-screenshots/"
# Coverage-guided fuzzing, bounded (FUZZ_SECONDS per target; 0 skips it): see
# docs/RELIABILITY.md. Its build goes to $CARGO_TARGET_DIR/fuzz.
if [[ "${FUZZ_SECONDS:-30}" != 0 ]]; then
    ./scripts/fuzz.sh "${FUZZ_SECONDS:-30}"
fi
