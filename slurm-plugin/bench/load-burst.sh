#!/usr/bin/env bash
# Submits a burst of managed jobs (2,000 by default) to the real Slurm test cluster, without
# and then with the job_submit/hadar plugin and `hadar serve` running; checks every managed one
# is accepted and held, and prints sbatch latency (median, p99), the time inside the plugin and
# the daemon's round times (read, decide, enforce, total) with the burst pending. Needs root
# and the packages that tests/install-deps installs. Honours HADAR_TESTBED_PORT.
#
#   slurm-plugin/bench/load-burst.sh [--jobs N] [--submitters K] [--rounds R]
set -euo pipefail
cd "$(dirname "$0")/../.."
tests/install-deps
cargo build --locked -q -p hadar --bin hadar -p hadar-slurm-testbed --bin hadar-load
exec target/debug/hadar-load --hadar target/debug/hadar "$@"
