#!/usr/bin/env bash
# Long crash-torture runs: repeats the crash torture test (crates/lacuna/tests/torture.rs)
# in batches, each with a fresh seed, and prints how many crash points have been
# survived. On a failure it stops and prints the seed and the command that replays it.
#
# usage: tools/torture.sh [--iterations N | --forever] [--batch N] [--seed S]
#   --iterations N  crash points in total (default 1000)
#   --forever       until a failure or Ctrl-C
#   --batch N       crash points per batch, i.e. per seed (default 200): a failure
#                   replays in at most this many crash points
#   --seed S        seed of the first batch (then S+1, S+2, ...); default: random
set -euo pipefail
cd "$(dirname "$0")/.."

total=1000
forever=0
batch=200
seed=$(( (RANDOM << 30) ^ (RANDOM << 15) ^ RANDOM | 1 ))
while (($#)); do
    case "$1" in
        --iterations) total="$2"; shift 2 ;;
        --forever) forever=1; shift ;;
        --batch) batch="$2"; shift 2 ;;
        --seed) seed="$2"; shift 2 ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
((batch > 0)) || { echo "--batch must be positive" >&2; exit 2; }

echo "building the test binary (release)"
cargo test --release -p lacuna --test torture --no-run 2>&1 | tail -1
survived=0
started=$(date +%s)
while ((forever)) || ((survived < total)); do
    n=$batch
    ((forever)) || ((n = total - survived < batch ? total - survived : batch))
    log=$(mktemp /tmp/lacuna-torture-XXXXXX.log)
    if TORTURE_SEED=$seed TORTURE_ITERATIONS=$n \
        cargo test --release -q -p lacuna --test torture -- --nocapture >"$log" 2>&1; then
        survived=$((survived + n))
        echo "$(date -u +%FT%TZ) survived $survived crash points in $(( $(date +%s) - started )) s" \
             "(batch seed $seed: $(grep -o 'completed operations by kind: .*' "$log" || true))"
        rm -f "$log"
        seed=$((seed + 1))
    else
        point=$(grep -o 'FAILED at crash point [0-9]*' "$log" | grep -o '[0-9]*$' || echo "$n")
        echo "FAILED after $((survived + point - 1)) crash points survived; batch seed $seed, crash point $point"
        grep -A3 'crash torture FAILED' "$log" || tail -20 "$log"
        echo "replay: TORTURE_SEED=$seed TORTURE_ITERATIONS=$point cargo test --release -p lacuna --test torture -- --nocapture"
        echo "full log: $log"
        exit 1
    fi
done
echo "survived $survived crash points"
