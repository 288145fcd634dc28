#!/usr/bin/env bash
# The benchmark suite in one command: builds the release binary, runs the criterion
# micro-benchmarks and the loopback load harness, and writes BENCHMARKS.md at the repository root.
#
#   benches/run.sh                    # every figure: the HTTP fixture backend, 1,000 and
#                                     # 10,000 parked calls (no standalone GET stream, so a
#                                     # parked call holds one upstream connection), and (a)
#                                     # and (b) again with `worker_threads = 1`
#   benches/run.sh --backend stdio    # the fixture as stdio children (parked calls are
#                                     # children, so the counts stay in the hundreds)
#
# Arguments go to the load harness (see `cargo bench --bench load -- --help`) in place of the
# default ones. With the HTTP backend the report includes the legacy clients' rows (a legacy
# client through the gateway's legacy face against the same client directly); those rows alone,
# printed and not written to BENCHMARKS.md:
#
#   cargo bench --bench load -- --backend http --legacy-face-only
set -euo pipefail
if [ "$#" -eq 0 ]; then
  set -- --backend http --no-standalone-stream --park 1000,10000 --also-workers 1
fi
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"

# Each stdio backend session is a child process with three pipes: parked calls need descriptors.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" || true

# Build the benches first, then the plain release binary: bench builds enable dev-dependency
# features (tokio's test-util) that the shipped binary does not have, so the harness runs a copy
# of the binary `cargo build --release` makes.
cargo bench --bench micro --bench load --bench conn_cost --no-run
cargo build --release
mkdir -p "$target/bench-bin"
cp "$target/release/mrtr-gateway" "$target/bench-bin/mrtr-gateway"

cargo bench --bench micro -- --warm-up-time 1 --measurement-time 3
# The floor under memory per parked call: one upstream connection holding an open stream.
cargo bench --bench conn_cost -- 2000 | tail -n 1 > "$target/conn-cost.txt"
cargo bench --bench load -- \
  --gateway "$target/bench-bin/mrtr-gateway" \
  --criterion-dir "$target/criterion" \
  --out "$target/bench-load.json" \
  --report BENCHMARKS.md \
  --command "benches/run.sh${*:+ $*}" \
  "$@"
