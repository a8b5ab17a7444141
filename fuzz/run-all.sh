#!/usr/bin/env bash
# Runs every fuzz target for FUZZ_SECONDS (default 600) each, JOBS (default 2) at a
# time, with new inputs kept out of the committed seed corpora. Needs
# cargo-fuzz (`cargo install cargo-fuzz`); stable Rust works with
# RUSTC_BOOTSTRAP=1 and no sanitizer (gpufleet forbids unsafe code, so the
# fuzzer looks for panics, hangs and runaway allocation).
set -euo pipefail
cd "$(dirname "$0")"
SECONDS_EACH="${FUZZ_SECONDS:-600}"
JOBS="${JOBS:-2}"
WORK="${WORK:-/tmp/gpufleet-fuzz}"
export RUSTC_BOOTSTRAP=1
targets=$(cargo fuzz list)
cargo fuzz build --sanitizer none -O
mkdir -p "$WORK/logs"
run() {
  t="$1"
  mkdir -p "$WORK/corpus/$t"
  cargo fuzz run --sanitizer none -O "$t" "$WORK/corpus/$t" "corpus/$t" -- \
    -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
    -max_len=65536 -print_final_stats=1 > "$WORK/logs/$t.log" 2>&1 \
    && echo "$t: ok" || echo "$t: FAILED (see $WORK/logs/$t.log)"
}
export -f run
export WORK SECONDS_EACH
printf '%s\n' $targets | xargs -P "$JOBS" -I{} bash -c 'run {}'
for t in $targets; do
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$WORK/logs/$t.log" | grep -o '[0-9]*$' || echo '?')
  rss=$(grep -o 'stat::peak_rss_mb: *[0-9]*' "$WORK/logs/$t.log" | grep -o '[0-9]*$' || echo '?')
  cov=$(grep -o 'cov: [0-9]*' "$WORK/logs/$t.log" | tail -1 | grep -o '[0-9]*' || echo '?')
  echo "$t execs=$execs peak_rss_mb=$rss cov=$cov"
done
