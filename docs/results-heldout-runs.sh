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
for trace in "${HELDOUT:-$root/data/heldout}"/*.trace; do
    t=$(basename "$trace" .trace)
    runs+=("$t|4+4+4, 1 GPU/node|--cluster v100:4,p100:4,k80:4 --gpus-per-node 1 --trace $trace --throughputs $data/simulation_throughputs.json")
    runs+=("$t|16+16+16, 4 GPUs/node|--cluster v100:16,p100:16,k80:16 --gpus-per-node 4 --trace $trace --throughputs $data/simulation_throughputs.json")
done
