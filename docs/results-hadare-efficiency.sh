#!/usr/bin/env bash
# HadarE against Hadar on the 13 runs of docs/results-gavel-runs.sh, with a forked job's
# copies counted whole (--fork-efficiency 1) and at the share the quality study measured
# (docs/hadare-quality.md, "Steps a single job needs"): one Markdown row per run, TTD h /
# average JCT h. Needs jq.
#
#   cargo build --release -p hadar
#   docs/results-hadare-efficiency.sh [EFFICIENCY]      (default 0.72)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
hadar="${HADAR:-$root/target/release/hadar}"
efficiency="${1:-0.72}"
[ -x "$hadar" ] || { echo "$0: no $hadar (cargo build --release -p hadar, or set HADAR)" >&2; exit 2; }
# shellcheck source=docs/results-gavel-runs.sh
source "$root/docs/results-gavel-runs.sh"
echo "| trace | cluster | bound | hadar | hadare at 1 | hadare at $efficiency |"
echo "|---|---|---|---|---|---|"
for run in "${runs[@]}"; do
    IFS='|' read -r name shape args <<<"$run"
    # shellcheck disable=SC2086
    base=$("$hadar" simulate $args --policy hadar,lower-bound --format json |
        jq -c '[.results[] | {key: .policy, value: [.ttd_s, .avg_jct_s]}] | from_entries')
    # shellcheck disable=SC2086
    whole=$("$hadar" simulate $args --policy hadare --format json | jq -c '.results[0] | [.ttd_s, .avg_jct_s]')
    # shellcheck disable=SC2086
    part=$("$hadar" simulate $args --policy hadare --fork-efficiency "$efficiency" --format json |
        jq -c '.results[0] | [.ttd_s, .avg_jct_s]')
    jq -rn --argjson b "$base" --argjson w "$whole" --argjson p "$part" --arg n "$name" --arg s "$shape" '
        def h: . / 3600 * 100 | round / 100 | tostring | if test("\\.") then (split(".") | .[0] + "." + (.[1] + "00")[0:2]) else . + ".00" end;
        def cell($x): "\($x[0] | h) / \($x[1] | h)";
        "| \($n) | \($s) | \($b["lower-bound"][0] | h) | \(cell($b.hadar)) | \(cell($w)) | \(cell($p)) |"'
done
