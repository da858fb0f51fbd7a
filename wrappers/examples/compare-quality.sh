#!/bin/sh
# compare-quality.sh: HadarE-style training (copies + step-weighted averaging every round)
# against the same model trained as one job, locally (no Slurm), on the same data and seeds.
#
# Each round, copy k does budget_k steps (--budgets: the steps each copy's GPU manages in
# one round; unequal budgets stand for GPUs of different speeds), every copy through
# hadar-fork-run, then `hadar average` weighs the copies by the steps they did. Compared with:
#   one job, same total steps: a single copy doing rounds x sum(budgets) steps;
#   one job, same wall time:   a single copy on the fastest GPU for the same rounds,
#                              i.e. rounds x max(budgets) steps.
# Prints held-out accuracy and loss of each, per seed and the mean.
#
# Usage: compare-quality.sh [--rounds R] [--budgets B1,B2,...] [--seeds S1,S2,...]
#                           [--lr LR] [--batch B] [--hadar PATH] [--work DIR]
set -eu

here=$(cd "$(dirname "$0")" && pwd)
runner=$here/../hadar-fork-run
train=$here/digits_mlp.py
rounds=5 budgets=120,80,40 seeds=0,1,2 lr=0.05 batch=16 hadar= work=
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --budgets) budgets=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --lr) lr=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --hadar) hadar=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    -h | --help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "compare-quality.sh: unknown argument '$1'" >&2; exit 64 ;;
  esac
done
if [ -z "$hadar" ]; then
  for c in "$here/../../target/release/hadar" "$here/../../target/debug/hadar"; do
    if [ -x "$c" ]; then hadar=$c; break; fi
  done
  [ -n "$hadar" ] || hadar=$(command -v hadar) || { echo "compare-quality.sh: no hadar binary; build it or pass --hadar" >&2; exit 64; }
fi
if [ -z "$work" ]; then
  work=$(mktemp -d "${TMPDIR:-/tmp}/hadar-quality.XXXXXX")
  trap 'rm -rf "$work"' EXIT
fi

budget_list=$(printf '%s' "$budgets" | tr ',' ' ')
copies=0 sum=0 max=0
for b in $budget_list; do
  copies=$((copies + 1)); sum=$((sum + b))
  [ "$b" -le "$max" ] || max=$b
done
total_steps=$((rounds * sum))
walltime_steps=$((rounds * max))

steps_of() { sed -n 's/.*"steps":\([0-9]*\).*/\1/p' "$1"; }
field() { python3 -c 'import json,sys; print("%.4f" % json.load(sys.stdin)[sys.argv[1]])' "$1"; }
evaluate() { python3 "$train" evaluate "$1"; }
# run_copy INDEX ROUND START_OR_EMPTY CHECKPOINT RESULT BUDGET STEPS_DONE SEED
run_copy() {
  if [ -n "$3" ]; then
    "$runner" --index "$1" --copies "$copies" --round "$2" --start-from "$3" --checkpoint-out "$4" --result "$5" \
      --step-budget "$6" --steps-done "$7" -- python3 "$train" train --seed "$8" --lr "$lr" --batch "$batch" >"$5.log" 2>&1 || { cat "$5.log" >&2; exit 1; }
  else
    "$runner" --index "$1" --copies "$copies" --round "$2" --checkpoint-out "$4" --result "$5" \
      --step-budget "$6" --steps-done "$7" -- python3 "$train" train --seed "$8" --lr "$lr" --batch "$batch" >"$5.log" 2>&1 || { cat "$5.log" >&2; exit 1; }
  fi
}

echo "digits MLP (sklearn load_digits, 30% held out): $rounds rounds, $copies copies with step budgets $budgets per round, lr $lr, batch $batch"
echo "HadarE: copies + step-weighted averaging each round ($total_steps steps in all)"
echo "one job, same total steps: $total_steps steps; one job, same wall time: $walltime_steps steps (fastest copy's budget x rounds)"
echo
printf '%-6s  %-22s  %-22s  %-22s\n' seed "HadarE acc / loss" "same steps acc / loss" "same time acc / loss"
results=$work/results
: >"$results"
for seed in $(printf '%s' "$seeds" | tr ',' ' '); do
  d=$work/seed$seed
  mkdir -p "$d"
  merged= done_steps=0
  r=0
  while [ "$r" -lt "$rounds" ]; do
    k=0
    set --
    for b in $budget_list; do
      ckpt=$d/r$r-copy$k.safetensors
      run_copy "$k" "$r" "$merged" "$ckpt" "$d/r$r-copy$k.json" "$b" "$done_steps" "$seed"
      s=$(steps_of "$d/r$r-copy$k.json")
      set -- "$@" "$ckpt:$s"
      done_steps=$((done_steps + s))
      k=$((k + 1))
    done
    "$hadar" average --out "$d/merged-r$r.safetensors" "$@" >/dev/null
    merged=$d/merged-r$r.safetensors
    r=$((r + 1))
  done
  hadare=$(evaluate "$merged")
  for variant in total:$total_steps walltime:$walltime_steps; do
    name=${variant%%:*} steps=${variant#*:}
    "$runner" --index 0 --copies 1 --round 0 --checkpoint-out "$d/$name.safetensors" --result "$d/$name.json" \
      --step-budget "$steps" -- python3 "$train" train --seed "$seed" --lr "$lr" --batch "$batch" >"$d/$name.log" 2>&1 || { cat "$d/$name.log" >&2; exit 1; }
  done
  same_steps=$(evaluate "$d/total.safetensors")
  same_time=$(evaluate "$d/walltime.safetensors")
  row="$(printf '%s' "$hadare" | field accuracy) $(printf '%s' "$hadare" | field loss) $(printf '%s' "$same_steps" | field accuracy) $(printf '%s' "$same_steps" | field loss) $(printf '%s' "$same_time" | field accuracy) $(printf '%s' "$same_time" | field loss)"
  echo "$row" >>"$results"
  set -- $row
  printf '%-6s  %-22s  %-22s  %-22s\n' "$seed" "$1 / $2" "$3 / $4" "$5 / $6"
done
awk '{for (i = 1; i <= 6; i++) s[i] += $i; n++} END {printf "%-6s  %-22s  %-22s  %-22s\n", "mean", sprintf("%.4f / %.4f", s[1]/n, s[2]/n), sprintf("%.4f / %.4f", s[3]/n, s[4]/n), sprintf("%.4f / %.4f", s[5]/n, s[6]/n)}' "$results"
