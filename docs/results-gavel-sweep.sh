#!/usr/bin/env bash
# One line per run and a summary: Hadar with the given flags against the fluid bound and
# Gavel (max-min fairness) on the 13 runs of docs/results-gavel.sh, at one restart cost.
# It is how the "tried, not kept" variants of docs/results-gavel.md are measured: a sweep of
# settings takes a few seconds per setting in a release build.
#
#   cargo build --release -p hadar
#   docs/results-gavel-sweep.sh 0                          today's defaults, restart cost 0 s
#   docs/results-gavel-sweep.sh 30 --guard-margin-share 0  one setting, restart cost 30 s
#   RUNS=docs/results-heldout-runs.sh docs/results-gavel-sweep.sh 0   the 36 held-out runs
#
# Per run: Hadar TTD / bound, Hadar TTD / Gavel TTD, Gavel JCT / Hadar JCT (the JCT gain).
# Summary: the mean TTD / bound, the largest TTD / Gavel, the mean and lowest JCT gain, and
# how many runs end after Gavel or have a JCT not below Gavel's. Needs jq.
set -euo pipefail
if [ $# -lt 1 ] || ! [[ $1 =~ ^[0-9]+([.][0-9]+)?$ ]]; then
    echo "usage: $0 RESTART_SECONDS [hadar simulate flags for --policy hadar ...]" >&2
    exit 2
fi
restart=$1
shift
root="$(cd "$(dirname "$0")/.." && pwd)"
hadar="${HADAR:-$root/target/release/hadar}"
[ -x "$hadar" ] || { echo "$0: no $hadar (cargo build --release -p hadar, or set HADAR)" >&2; exit 2; }
runs_file="${RUNS:-$root/docs/results-gavel-runs.sh}"
[ -r "$runs_file" ] || { echo "$0: cannot read the runs file $runs_file (RUNS)" >&2; exit 2; }
# shellcheck source=docs/results-gavel-runs.sh
source "$runs_file"

for run in "${runs[@]}"; do
    IFS='|' read -r trace shape args <<<"$run"
    # shellcheck disable=SC2086
    base=$(results $args --restart-s "$restart" --policy lower-bound,gavel)
    # shellcheck disable=SC2086
    mine=$(results $args --restart-s "$restart" --policy hadar "$@")
    jq -rn --argjson b "$base" --argjson h "$mine" --arg n "$trace ($shape)" \
        '"\($n)\t\($h.hadar.ttd / $b["lower-bound"].ttd)\t\($h.hadar.ttd / $b.gavel.ttd)\t\($b.gavel.jct / $h.hadar.jct)"'
done | awk -F'\t' -v runs="${#runs[@]}" '
    { n++; bound += $2; gain += $4
      if ($3 > worst) { worst = $3; worst_run = $1 }
      if (low == "" || $4 < low) { low = $4; low_run = $1 }
      if ($3 > 1 + 1e-9) late++
      if ($4 <= 1) slower++
      printf "%-60s TTD/bound %.3f  TTD/Gavel %.3f  JCT gain %.3f\n", $1, $2, $3, $4 }
    END { if (n < runs) { printf "%d of %d runs finished: see the error above\n", n, runs > "/dev/stderr"; exit 1 }
          printf "mean TTD/bound %.4f; largest TTD/Gavel %.4f (%s); mean JCT gain %.4f; lowest %.4f (%s); runs ending after Gavel: %d; runs with a JCT not below Gavel'"'"'s: %d\n",
                 bound / n, worst, worst_run, gain / n, low, low_run, late + 0, slower + 0 }'
