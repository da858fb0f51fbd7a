# hadar-checkpoint.sh: checkpoint-on-signal and resume for batch scripts managed by hadar.
# Source it from a bash or POSIX sh batch script:
#
#   . /usr/share/hadar/wrappers/hadar-checkpoint.sh
#   start=$(hadar_resume_steps ckpt-$SLURM_JOB_ID)        # 0 on a first run
#   hadar_on_checkpoint save_my_model                      # your function, called on USR1
#   my_training --from-step "$start" &                     # run training in the background
#   hadar_wait $!                                          # so the signal is handled at once
#
# When hadar preempts the job it sends the checkpoint signal (USR1 unless the daemon's
# preempt_signal says otherwise), waits preempt_grace_seconds and requeues the job held.
# On the signal, your function runs (save the model and call
# `hadar_save_checkpoint FILE STEPS`); the script then waits to be requeued instead of
# exiting, because a job that exits 0 counts as completed and would not run again. After the
# requeue Slurm starts the script again (SLURM_RESTART_COUNT > 0) and hadar_resume_steps
# returns the saved step count.

HADAR_CHECKPOINT_SIGNAL=${HADAR_CHECKPOINT_SIGNAL:-USR1}

# hadar_resume_steps FILE: prints the steps saved in FILE, or 0 when there is none.
hadar_resume_steps() {
    if [ -f "$1" ]; then
        sed -n 's/^steps=\([0-9][0-9.]*\)$/\1/p' "$1" | head -n 1
    else
        echo 0
    fi
}

# hadar_save_checkpoint FILE STEPS: saves STEPS atomically (write then rename).
hadar_save_checkpoint() {
    printf 'steps=%s\n' "$2" > "$1.tmp" && mv -f "$1.tmp" "$1"
}

# hadar_on_checkpoint FUNCTION: runs FUNCTION on the checkpoint signal, then waits to be
# requeued. FUNCTION must be the name of a shell function (it is called, never evaluated).
hadar_on_checkpoint() {
    HADAR_CHECKPOINT_FUNCTION=$1
    trap '_hadar_checkpoint' "$HADAR_CHECKPOINT_SIGNAL"
}

_hadar_checkpoint() {
    "$HADAR_CHECKPOINT_FUNCTION"
    echo "hadar: checkpoint saved; waiting to be requeued" >&2
    while :; do sleep 60; done
}

# hadar_wait PID: waits for a background training process, forwarding the checkpoint
# signal handling to the shell (a foreground child would delay the trap until it exits).
hadar_wait() {
    while kill -0 "$1" 2>/dev/null; do
        wait "$1"
    done
}
