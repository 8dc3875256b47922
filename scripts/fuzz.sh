#!/usr/bin/env bash
# Bounded coverage-guided fuzzing: builds the cargo-fuzz targets in fuzz/ (nightly,
# AddressSanitizer, debug assertions) and runs each for SECONDS_PER_TARGET seconds
# (default 30) on its checked-in seeds plus a working corpus kept under the cargo target
# directory, so coverage accumulates across runs. Fails if any target crashes, hangs
# (-timeout) or exceeds its memory limit; the crashing input is kept and the command
# that reproduces it printed. Installs the nightly toolchain and cargo-fuzz if missing.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-30}"
shift || true
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "usage: $0 [SECONDS_PER_TARGET] [TARGET...]" >&2; exit 2; }
targets=("$@")
((${#targets[@]})) || targets=(nbd_session iscsi_pdu iscsi_text iscsi_login scsi_cdb scsi_params vasa_request)

rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked

target_dir="${CARGO_TARGET_DIR:-$PWD/target}/fuzz"
work="$target_dir/corpus"
artifacts="$target_dir/artifacts"
mkdir -p "$target_dir"
echo "fuzz: building the targets (log: $target_dir/build.log)"
# Built once here; `cargo fuzz run` below finds the binaries up to date.
if ! (cd fuzz && cargo +nightly fuzz build --target-dir "$target_dir") >"$target_dir/build.log" 2>&1; then
    tail -n 40 "$target_dir/build.log" >&2
    echo "fuzz: build failed" >&2
    exit 1
fi

failed=()
for target in "${targets[@]}"; do
    # Artifacts of an earlier run are stale: only this run's crashes are reported.
    rm -rf "$artifacts/$target"
    mkdir -p "$work/$target" "$artifacts/$target"
    dict=()
    [[ -f "fuzz/dict/$target.dict" ]] && dict=(-dict="dict/$target.dict")
    log="$target_dir/$target.log"
    echo "fuzz: $target for ${seconds}s"
    if (cd fuzz && cargo +nightly fuzz run --target-dir "$target_dir" "$target" \
        "$work/$target" "corpus/$target" -- \
        -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 \
        -artifact_prefix="$artifacts/$target/" -print_final_stats=1 "${dict[@]}") >"$log" 2>&1; then
        runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo "?")
        corpus=$(find "$work/$target" -type f | wc -l)
        echo "fuzz: $target ok: $runs executions, working corpus $corpus inputs"
    else
        failed+=("$target")
        grep -E 'panicked at|ERROR: libFuzzer|SUMMARY|Test unit written' "$log" | head -n 8 >&2 || true
        echo "fuzz: $target FAILED (log: $log); reproduce with:" >&2
        for crash in "$artifacts/$target"/*; do
            [[ -f "$crash" ]] && echo "  (cd fuzz && cargo +nightly fuzz run $target $crash)" >&2
        done
    fi
done

if ((${#failed[@]})); then
    echo "fuzz: crashes in: ${failed[*]}" >&2
    exit 1
fi
echo "fuzz: all ${#targets[@]} targets ran ${seconds}s each without a crash"
