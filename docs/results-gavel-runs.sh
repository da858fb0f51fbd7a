# The 13 runs Hadar is compared with Gavel on (issue 15): Gavel's six traces on both cluster
# shapes, and the few-jobs scenario. Sourced by docs/results-gavel.sh and
# docs/results-gavel-sweep.sh, so that both measure the same runs. Sets `runs` to
# "trace|cluster shape|hadar simulate arguments" entries and defines `results`; needs `root`
# (the repository) and `hadar` (the binary).
data="$root/data/gavel"
runs=()
for t in static_40jobs_seed10 static_120jobs_seed11 static_multigpu_40jobs_seed10 \
    static_multigpu_120jobs_seed11 poisson_lam900_multigpu_40jobs_seed10 \
    poisson_lam900_multigpu_120jobs_seed11; do
    runs+=("$t|4+4+4, 1 GPU/node|--cluster v100:4,p100:4,k80:4 --gpus-per-node 1 --trace $data/traces/$t.trace --throughputs $data/simulation_throughputs.json")
    runs+=("$t|16+16+16, 4 GPUs/node|--cluster v100:16,p100:16,k80:16 --gpus-per-node 4 --trace $data/traces/$t.trace --throughputs $data/simulation_throughputs.json")
done
runs+=("few-jobs|physical-cluster.toml|--cluster $root/tests/data/physical-cluster.toml --trace $root/tests/data/few-jobs.trace")

# One simulate call as JSON: {policy: {ttd, jct, restarts}}.
results() {
    "$hadar" simulate "$@" --format json |
        jq -c '[.results[] | {key: .policy, value: {ttd: .ttd_s, jct: .avg_jct_s, restarts: .restarts}}] | from_entries'
}
