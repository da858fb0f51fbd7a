# The 13 runs Hadar is compared with Gavel on (issue 15): Gavel's six traces on both cluster
# shapes, and the few-jobs scenario. Sourced by docs/results-gavel.sh and
# docs/results-gavel-sweep.sh, so that both measure the same runs. Sets `runs` to
# "trace|cluster shape|hadar simulate arguments" entries and defines `results`; needs `root`
# (the repository) and `hadar` (the binary).
data="$root/data/gavel"

# Adds the runs of trace file $2, named $1, on both cluster shapes to `runs`.
add_on_both_shapes() {
    runs+=("$1|4+4+4, 1 GPU/node|--cluster v100:4,p100:4,k80:4 --gpus-per-node 1 --trace $2 --throughputs $data/simulation_throughputs.json")
    runs+=("$1|16+16+16, 4 GPUs/node|--cluster v100:16,p100:16,k80:16 --gpus-per-node 4 --trace $2 --throughputs $data/simulation_throughputs.json")
}

runs=()
for t in static_40jobs_seed10 static_120jobs_seed11 static_multigpu_40jobs_seed10 \
    static_multigpu_120jobs_seed11 poisson_lam900_multigpu_40jobs_seed10 \
    poisson_lam900_multigpu_120jobs_seed11; do
    add_on_both_shapes "$t" "$data/traces/$t.trace"
done
runs+=("few-jobs|physical-cluster.toml|--cluster $root/tests/data/physical-cluster.toml --trace $root/tests/data/few-jobs.trace")

# One simulate call as JSON: {policy: {ttd, jct, restarts}}.
results() {
    "$hadar" simulate "$@" --format json |
        jq -c '[.results[] | {key: .policy, value: {ttd: .ttd_s, jct: .avg_jct_s, restarts: .restarts}}] | from_entries'
}
