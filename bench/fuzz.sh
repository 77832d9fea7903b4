#!/usr/bin/env bash
# Runs each coverage-guided fuzz target (fuzz/fuzz_targets/) for SECONDS
# (default 60) and prints its executions and executions per second. New
# interesting inputs land in fuzz/corpus/<target>/, which `cargo test`
# replays (tests/fuzz_corpus.rs); a crash stops the script and is kept in
# fuzz/artifacts/<target>/ (make it a fixture and fix it).
#
# Needs the nightly toolchain and cargo-fuzz: cargo install cargo-fuzz.
# Usage: bench/fuzz.sh [seconds-per-target] [target...]
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
EACH=${1:-60}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(policy_loader duration retry_after report)
command -v cargo-fuzz >/dev/null || { echo "missing cargo-fuzz: cargo install cargo-fuzz" >&2; exit 1; }
for target in "${TARGETS[@]}"; do
  log=$(mktemp)
  if ! cargo +nightly fuzz run "$target" -- -max_total_time="$EACH" -print_final_stats=1 >"$log" 2>&1; then
    tail -40 "$log"
    echo "$target: crashed; the input is in fuzz/artifacts/$target/" >&2
    exit 1
  fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | awk '{print $2}')
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | awk '{print $2}')
  echo "$target: $execs executions in ${EACH}s, $rate exec/s, corpus $(ls "corpus/$target" | wc -l) inputs"
  rm -f "$log"
done
