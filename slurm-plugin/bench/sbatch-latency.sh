#!/usr/bin/env bash
# Measures how long `sbatch` takes with and without the job_submit/hadar plugin, on the real
# Slurm test cluster (started and stopped by the command; it builds and installs the plugin
# with slurm-plugin/install.sh). Prints median, p90, p99 and mean per configuration:
# no plugin; plugin with a managed job and the sidecar down; plugin with a managed job and a
# listening sidecar; plugin with an unmanaged job. Needs root and the packages that
# tests/install-deps installs.
#
#   slurm-plugin/bench/sbatch-latency.sh [--count N] [--block N]
#
# --count N   submissions per configuration (default 400, at least 100)
# --block N   submissions per configuration before switching to the next (default 20)
set -euo pipefail
cd "$(dirname "$0")/../.."
tests/install-deps
exec cargo run --release --locked -q -p hadar-slurm-testbed --bin hadar-testbed -- bench "$@"
