#!/usr/bin/env bash
# How much room the JCT aim of docs/results-gavel.md has: per run, the LP lower bound on the
# average JCT of any schedule that ends by a cap (docs/jct-bound.py), at three caps: 1.05x
# the fluid bound (the issue's mean aim, as a per-run cap), Gavel's TTD (the per-run aim) and
# no cap that binds (1.2x the later of Gavel's and Hadar's end). Beside them, Gavel's and
# Hadar's average JCT at restart cost 0, and the largest JCT gain over Gavel any schedule
# within 1.05x the bound could have (Gavel's JCT / the bound at that cap).
#
#   cargo build --release -p hadar && docs/results-gavel-jct-bound.sh [INTERVAL_S]
#
# Needs jq and python3 with numpy and scipy; about 5 minutes with the default 120 s intervals.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
hadar="${HADAR:-$root/target/release/hadar}"
[ -x "$hadar" ] || { echo "$0: no $hadar (cargo build --release -p hadar, or set HADAR)" >&2; exit 2; }
interval="${1:-120}"
[[ $interval =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "usage: $0 [INTERVAL_SECONDS]" >&2; exit 2; }
python3 -c 'import numpy, scipy' 2>/dev/null ||
    { echo "$0: needs python3 with numpy and scipy (apt install python3-scipy, or pip install scipy)" >&2; exit 2; }
# shellcheck source=docs/results-gavel-runs.sh
source "$root/docs/results-gavel-runs.sh"

printf '| run | bound h | LB at 1.05x bound h | LB at Gavel'"'"'s TTD h | LB, no cap h | Gavel JCT h | Hadar JCT h | most gain within 1.05x |\n'
printf '|---|---|---|---|---|---|---|---|\n'
for run in "${runs[@]}"; do
    IFS='|' read -r trace shape args <<<"$run"
    # shellcheck disable=SC2086
    r=$(results $args --restart-s 0 --policy lower-bound,gavel,hadar)
    b=$(jq -r '.["lower-bound"].ttd' <<<"$r")
    g_ttd=$(jq -r '.gavel.ttd' <<<"$r")
    loose=$(jq -r '[.gavel.ttd, .hadar.ttd] | max * 1.2' <<<"$r")
    tight=$(jq -rn --argjson b "$b" '$b * 1.05')
    trace_file=$(sed -E 's/.*--trace ([^ ]+).*/\1/' <<<"$args")
    cluster=$(sed -E 's/.*--cluster ([^ ]+).*/\1/' <<<"$args")
    lbs=$(python3 "$root/docs/jct-bound.py" --trace "$trace_file" --cluster "$cluster" \
        --interval-s "$interval" --cap-s "$tight" --cap-s "$g_ttd" --cap-s "$loose" |
        jq -s -c '[.[].jct_lower_bound_s]')
    jq -rn --argjson r "$r" --argjson lb "$lbs" --arg n "$trace ($shape)" '
        def h: if . == null then "none" else (. / 3600 * 100 | round / 100 | tostring) end;
        "| \($n) | \($r["lower-bound"].ttd | h) | \($lb[0] | h) | \($lb[1] | h) | \($lb[2] | h) | \($r.gavel.jct | h) | \($r.hadar.jct | h) | \(if $lb[0] == null then "none" else ($r.gavel.jct / $lb[0] * 1000 | round / 1000) end) |"'
done
