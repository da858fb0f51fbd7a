#!/usr/bin/env bash
# What the daemon runs against plain Hadar and Gavel on the 13 runs of docs/results-gavel.sh:
# `served` (Hadar between the commitment look-ahead and Slurm's rules, what `hadar serve`
# decides with) and `hadar`, both as `hadar simulate --config FILE` runs them (the file's
# round and restart seconds, `earliest_finish_types` and [hadar] table), and Gavel (max-min
# fairness) and the fluid bound at the same round and restart.
#
#   cargo build --release -p hadar
#   docs/results-served.sh                       etc/hadar.toml (360 s rounds, 60 s restarts)
#   docs/results-served.sh /path/to/hadar.toml   another site's settings
#   RUNS=docs/results-heldout-runs.sh docs/results-served.sh   the 36 held-out runs
#
# Cells: TTD hours (ratio to the bound) / average JCT hours / restarts. Summary per policy:
# the mean TTD / bound, the runs ending after Gavel, the mean and lowest JCT gain over Gavel
# and the runs with a JCT not below Gavel's. Needs jq.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
hadar="${HADAR:-$root/target/release/hadar}"
config="${1:-$root/etc/hadar.toml}"
[ -x "$hadar" ] || { echo "$0: no $hadar (cargo build --release -p hadar, or set HADAR)" >&2; exit 2; }
[ -r "$config" ] || { echo "$0: cannot read the config $config" >&2; exit 2; }
runs_file="${RUNS:-$root/docs/results-gavel-runs.sh}"
[ -r "$runs_file" ] || { echo "$0: cannot read the runs file $runs_file (RUNS)" >&2; exit 2; }
# shellcheck source=docs/results-gavel-runs.sh
source "$runs_file"

# The round and restart the file sets, for the baselines (which --config does not change).
# `hadar simulate --config FILE --policy lower-bound` would do, but reading them from the
# JSON output keeps the file the one source.
settings=$("$hadar" simulate --config "$config" --policy lower-bound --format json \
    --trace "$root/tests/data/few-jobs.trace" --cluster "$root/tests/data/physical-cluster.toml" |
    jq -r '"\(.workload.round_s) \(.workload.restart_s)"')
read -r round restart <<<"$settings"

echo "Config: $config (rounds ${round} s, restarts ${restart} s)"
echo
echo "| trace | cluster | bound | gavel | **served** (the daemon) | hadar |"
echo "|---|---|---|---|---|---|"
for run in "${runs[@]}"; do
    IFS='|' read -r name shape args <<<"$run"
    # shellcheck disable=SC2086
    base=$(results $args --round-s "$round" --restart-s "$restart" --policy lower-bound,gavel)
    # shellcheck disable=SC2086
    mine=$(results $args --config "$config" --policy served,hadar)
    jq -rn --argjson b "$base" --argjson m "$mine" --arg n "$name" --arg s "$shape" '
        def fixed($d): (pow(10; $d)) as $p | (. * $p | round) as $x
            | "\($x / $p | floor)" + (if $d > 0 then "." + ("\($x % $p)" | ("0" * ($d - length)) + .) else "" end);
        ($b["lower-bound"].ttd) as $lb
        | def cell($x): "\($x.ttd / 3600 | fixed(2)) (\($x.ttd / $lb | fixed(3))) / \($x.jct / 3600 | fixed(2)) / \($x.restarts)";
        "| \($n) | \($s) | \($lb / 3600 | fixed(2)) | \(cell($b.gavel)) | **\(cell($m.served))** | \(cell($m.hadar)) |"
        + "\t\($m.served.ttd / $lb) \($m.served.ttd / $b.gavel.ttd) \($b.gavel.jct / $m.served.jct) \($m.hadar.ttd / $lb) \($m.hadar.ttd / $b.gavel.ttd) \($b.gavel.jct / $m.hadar.jct)"'
done | awk -F'\t' -v runs="${#runs[@]}" '
    { print $1; split($2, v, " "); n++
      for (p = 0; p < 2; p++) {
          bound[p] += v[3*p + 1]; gain[p] += v[3*p + 3]
          if (v[3*p + 2] > 1 + 1e-9) late[p]++
          if (v[3*p + 3] <= 1) slower[p]++
          if (low[p] == "" || v[3*p + 3] < low[p]) low[p] = v[3*p + 3] } }
    END { if (n < runs) { printf "%d of %d runs finished: see the error above\n", n, runs > "/dev/stderr"; exit 1 }
          split("served hadar", name, " ")
          print ""
          for (p = 0; p < 2; p++)
              printf "%s: mean TTD/bound %.4f; runs ending after Gavel: %d; mean JCT gain %.4f; lowest %.4f; runs with a JCT not below Gavel'"'"'s: %d\n",
                     name[p + 1], bound[p] / n, late[p] + 0, gain[p] / n, low[p], slower[p] + 0 }'
