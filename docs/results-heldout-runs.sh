# The held-out runs (issue 15): the 18 traces docs/heldout-traces.py writes to
# data/heldout/, drawn like Gavel's six dev traces from other seeds, on the same two cluster
# shapes, 36 runs. Hadar was never tuned on them. Used as
# `RUNS=docs/results-heldout-runs.sh docs/results-gavel-sweep.sh RESTART`; `HELDOUT=DIR` plays
# the traces of another directory instead (e.g. a further set of seeds the generator wrote
# with --out). Sets `runs` and
# defines `results` as docs/results-gavel-runs.sh does; needs `root` and `hadar`.
# shellcheck source=docs/results-gavel-runs.sh
source "$root/docs/results-gavel-runs.sh"
runs=()
heldout="${HELDOUT:-$root/data/heldout}"
for trace in "$heldout"/*.trace; do
    [ -e "$trace" ] || { echo "docs/results-heldout-runs.sh: no .trace files in $heldout" >&2; exit 2; }
    add_on_both_shapes "$(basename "$trace" .trace)" "$trace"
done
