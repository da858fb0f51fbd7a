#!/usr/bin/env bash
# Regenerates the comparison tables of docs/results-gavel.md: every Gavel trace in
# data/gavel/traces/ on both cluster shapes (4+4+4 one GPU per node, 16+16+16 four per node)
# and the few-jobs scenario, with restart cost 0 s (as in Gavel) and 30 s.
#
#   cargo build --release -p hadar && docs/results-gavel.sh > /tmp/tables.md
#
# Columns: the fluid lower bound, Gavel (max-min fairness), Gavel's makespan policy, Hadar
# before the makespan guard (`--no-makespan-guard --order arrival --packing off --pace-weight 0 --overdue-factor 0`,
# the defaults until then), Hadar with the guard but before gang packing, the guard's margin
# share and the pace boost (`--packing off --guard-margin-share 0 --pace-weight 0 --overdue-factor 0`), Hadar with today's defaults, and HadarE. Cells: TTD hours (ratio to the bound) /
# average JCT hours [/ restarts]. Then the summary of the held-out runs (docs/results-heldout-runs.sh)
# at both restart costs. Needs jq.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
hadar="${HADAR:-$root/target/release/hadar}"
before=(--no-makespan-guard --order arrival --packing off --pace-weight 0 --tail-jobs 0 --overdue-factor 0)
guard=(--packing off --guard-margin-share 0 --pace-weight 0 --tail-jobs 0 --overdue-factor 0)
# shellcheck source=docs/results-gavel-runs.sh
source "$root/docs/results-gavel-runs.sh"

for restart in 0 30; do
    echo
    echo "#### Restart cost ${restart} s"
    echo
    echo "| trace | cluster | bound | gavel | gavel-makespan | hadar before the guard | hadar with the guard, before packing | **hadar** | hadare |"
    echo "|---|---|---|---|---|---|---|---|---|"
    stats=""
    for run in "${runs[@]}"; do
        IFS='|' read -r name shape args <<<"$run"
        # shellcheck disable=SC2086
        after=$(results $args --restart-s "$restart" --policy lower-bound,gavel,gavel-makespan,hadar,hadare)
        # shellcheck disable=SC2086
        old=$(results $args --restart-s "$restart" --policy hadar "${before[@]}")
        # shellcheck disable=SC2086
        mid=$(results $args --restart-s "$restart" --policy hadar "${guard[@]}")
        row=$(jq -rn --argjson a "$after" --argjson b "$old" --argjson m "$mid" --arg r "$restart" '
            def fixed($d): (pow(10; $d)) as $p | (. * $p | round) as $x
                | "\($x / $p | floor)" + (if $d > 0 then "." + ("\($x % $p)" | ("0" * ($d - length)) + .) else "" end);
            ($a["lower-bound"].ttd) as $lb
            | def cell($x): "\($x.ttd / 3600 | fixed(1)) (\($x.ttd / $lb | fixed(2))) / \($x.jct / 3600 | fixed(1))"
                + (if $r == "0" then "" else " / \($x.restarts)" end);
            "\($lb / 3600 | fixed(1)) | \(cell($a.gavel)) | \(cell($a["gavel-makespan"])) | \(cell($b.hadar)) | \(cell($m.hadar)) | **\(cell($a.hadar))** | \(cell($a.hadare))"
                + "\t\($a.hadar.ttd / $lb) \($b.hadar.ttd / $lb) \($a.hadar.ttd / $a.gavel.ttd) \($a.gavel.jct / $a.hadar.jct) \($a.gavel.jct / $b.hadar.jct) \($m.hadar.ttd / $lb) \($a.gavel.jct / $m.hadar.jct) \($m.hadar.ttd / $a.gavel.ttd)"')
        echo "| $name | $shape | ${row%%$'\t'*} |"
        stats+="$name ($shape)"$'\t'"${row##*$'\t'}"$'\n'
    done
    echo
    # Summary: mean TTD/bound, TTD against Gavel, JCT gain over Gavel (after and before).
    awk -F'\t' 'NF < 2 { next }
         { split($2, v, " "); n++; r += v[1]; rb += v[2]; g += v[4]; gb += v[5]; rm += v[6]; gm += v[7]
           if (v[8] > 1 + 1e-9) latem++
           if (v[3] > 1 + 1e-9) { late++; lst = lst sprintf("%s %.3fx; ", $1, v[3]) }
           if (v[4] <= 1) { slow++; sl = sl sprintf("%s %.3fx; ", $1, v[4]) }
           if (min == "" || v[4] < min) min = v[4] }
         END { printf "Hadar: mean TTD / bound %.3f (before the guard %.3f, before packing %.3f); mean JCT gain over Gavel %.3fx (before the guard %.3fx, before packing %.3fx), lowest %.3fx.\n", r/n, rb/n, rm/n, g/n, gb/n, gm/n, min
               printf "Before packing, TTD above Gavel on %d of %d runs.\n", latem, n
               printf "TTD above Gavel on %d of %d runs%s\n", late, n, (late ? " (Hadar TTD / Gavel TTD): " lst : ".")
               printf "JCT not below Gavel on %d of %d runs%s\n", slow, n, (slow ? " (Gavel JCT / Hadar JCT): " sl : ".") }' <<<"$stats"
done

# The same Hadar against Gavel on the held-out runs (nineteenth step): the sweep's summary.
echo
echo "#### Held-out runs"
echo
echo "The 36 runs of \`docs/results-heldout-runs.sh\` (18 traces drawn like Gavel's from other seeds, both shapes), Hadar with today's defaults:"
echo
for restart in 0 30; do
    summary=$(RUNS="$root/docs/results-heldout-runs.sh" HADAR="$hadar" "$root/docs/results-gavel-sweep.sh" "$restart" | tail -1)
    echo "- restart cost ${restart} s: ${summary}."
done
