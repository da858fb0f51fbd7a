//! The copy job's batch script: one heterogeneous component per copy, the options it
//! carries from the logical job, the spool's folders, and the outer step's arguments.

use super::*;
/// A round's folder in the spool (the folder of its copies' checkpoints).
pub(crate) fn round_dir(round: &ForkRound) -> PathBuf {
    round
        .copies
        .first()
        .and_then(|c| Path::new(&c.checkpoint).parent())
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// The outer step of round `r` of a job choosing `outer`: none for the plain mean, and none
/// in a job's first counted round (its copies built their start themselves, so there is no
/// start checkpoint to step from). The velocity is read from the file the job's last
/// counted round wrote and written to a new file of this round.
pub(crate) fn outer_step(outer: Outer, fj: &ForkJob, job_dir: &Path, r: u64) -> Option<OuterStep> {
    let Outer::Nesterov { lr, momentum } = outer else {
        return None;
    };
    fj.checkpoint.as_ref()?;
    Some(OuterStep {
        lr,
        momentum,
        momentum_from: if momentum > 0.0 {
            fj.momentum.clone()
        } else {
            None
        },
        momentum_out: (momentum > 0.0).then(|| {
            job_dir
                .join(format!("momentum-{r}.safetensors"))
                .display()
                .to_string()
        }),
    })
}

/// `hadar average`'s options for a round's outer step (none for the plain mean).
pub fn outer_args(round: &ForkRound) -> Vec<String> {
    let (Some(o), Some(start)) = (&round.outer, &round.start_from) else {
        return Vec::new();
    };
    let mut args: Vec<String> = vec![
        "--outer".into(),
        "nesterov".into(),
        "--start".into(),
        start.clone(),
        "--outer-lr".into(),
        o.lr.to_string(),
        "--outer-momentum".into(),
        o.momentum.to_string(),
    ];
    if let Some(out) = &o.momentum_out {
        args.extend(["--momentum-state".into(), out.clone()]);
        match &o.momentum_from {
            Some(from) => args.extend(["--momentum-from".into(), from.clone()]),
            // Explicitly zero: a file left at `out` by an earlier attempt of this very
            // round must not be read as the previous velocity.
            None => args.push("--momentum-zero".into()),
        }
    }
    args
}

/// The `#SBATCH` options every copy job of a logical job carries from it, so that the site's
/// accounting bills the copies as it would the job: its partition, account, QOS and time
/// limit, and its CPUs and memory per GPU (the job's CPUs and memory over its `workers`
/// GPUs, rounded up). Each option only when Slurm shows the job's value; values are Slurm's
/// own names and numbers, which hold no spaces.
pub(crate) fn copy_options(sj: Option<&SlurmJob>, workers: u32) -> String {
    let Some(j) = sj else {
        return String::new();
    };
    let safe = |v: &str| !v.is_empty() && !v.contains(char::is_whitespace);
    let mut out = String::new();
    for (key, value) in [
        ("partition", j.partition.as_deref()),
        ("account", j.site.account.as_deref()),
        ("qos", j.site.qos.as_deref()),
    ] {
        if let Some(v) = value.filter(|v| safe(v)) {
            out.push_str(&format!(" --{key}={v}"));
        }
    }
    if let Some(t) = j.site.time_limit_min {
        out.push_str(&format!(" --time={t}"));
    }
    let w = u64::from(workers.max(1));
    if let Some(c) = j.site.cpus {
        out.push_str(&format!(
            " --cpus-per-gpu={}",
            u64::from(c).div_ceil(w).max(1)
        ));
    }
    if let Some(m) = j.site.mem_per_node_mb {
        let nodes = j.nodes.len().max(1) as u64;
        out.push_str(&format!(
            " --mem-per-gpu={}M",
            (m * nodes).div_ceil(w).max(1)
        ));
    }
    out
}

/// What a copy job's script carries besides its copies: it makes the spool's folders, writes
/// the user's script and the round's plan there, and after the copies averages them.
pub(crate) struct InJob<'a> {
    /// `hadar` on the compute nodes.
    pub(crate) hadar_bin: &'a Path,
    /// The job's folder in the spool.
    pub(crate) job_dir: &'a Path,
    /// The logical job's batch script.
    pub(crate) user_script: &'a str,
    /// The round's [`RoundPlan`] as JSON.
    pub(crate) plan: &'a str,
}

/// The heterogeneous batch script that runs one round's copies: one component per copy
/// (its node, its GPUs of one type), each running the fork runner with the user's script
/// as the program, and then, on the first copy's node, `hadar fork-consolidate`, whose
/// report the script puts in its job's `Comment` (see [`crate::fork_consolidate`]).
/// `#HADAR off` keeps the plugin from managing it; the embedded files are base64, so no
/// line of theirs reads as a directive.
pub(crate) fn copy_script(
    round: &ForkRound,
    runner: &Path,
    user_script: &Path,
    steps_done: u64,
    options: &str,
    dir: &Path,
    in_job: &InJob,
) -> String {
    let mut s = String::from("#!/bin/sh\n");
    let n = round.copies.len();
    for (k, c) in round.copies.iter().enumerate() {
        if k > 0 {
            s.push_str("#SBATCH hetjob\n");
        }
        s.push_str(&format!(
            "#SBATCH --job-name={} --nodes=1 --ntasks=1 --nodelist={} --gres=gpu:{}:{}{options} --export=ALL --output=/dev/null\n",
            round.copy_job_name, c.node, c.gpu_type, c.gpus,
        ));
    }
    s.push_str("#HADAR off\n");
    s.push_str(&format!(
        "# hadar: round {} of job {} ({n} copies); written by hadar serve\n",
        round.round, round.job
    ));
    s.push_str(&in_job_setup(in_job, user_script, dir));
    for (k, c) in round.copies.iter().enumerate() {
        // A single copy is an ordinary job: srun refuses --het-group there.
        let group = if n > 1 {
            format!("--het-group={k} ")
        } else {
            String::new()
        };
        let mut start = round
            .start_from
            .as_deref()
            .map(|p| format!(" --start-from {}", quote(p)))
            .unwrap_or_default();
        if let Some(inner) = &c.inner_state_from {
            start.push_str(&format!(" --inner-state-from {}", quote(inner)));
        }
        s.push_str(&format!(
            "srun {group}--ntasks=1 env HADAR_GPU_TYPE={} HADAR_GPUS={} {} --index {k} --copies {n} --round {} --checkpoint-out {} --result {}{start} --step-budget {} --deadline {} --steps-done {steps_done} -- {} &\n",
            quote(&c.gpu_type),
            c.gpus,
            quote(&runner.display().to_string()),
            round.round,
            quote(&c.checkpoint),
            quote(&c.result),
            c.budget,
            round.deadline_unix,
            quote(&user_script.display().to_string()),
        ));
    }
    s.push_str(&format!(
        "wait\nreport=$({} fork-consolidate round.json) || report='{TAG};error=consolidation-did-not-run'\nhadar_report \"$report\"\nexit 0\n",
        quote(&in_job.hadar_bin.display().to_string()),
        TAG = crate::fork_consolidate::TAG,
    ));
    s
}

/// The copy job's first lines: the job's folder (made by the user, refused when someone
/// else owns it), the round's folder as the working directory and output, the user's script
/// (once) and the round's plan.
pub(crate) fn in_job_setup(in_job: &InJob, user_script: &Path, dir: &Path) -> String {
    let tag = crate::fork_consolidate::TAG;
    let job_dir = quote(&in_job.job_dir.display().to_string());
    let script = quote(&user_script.display().to_string());
    format!(
        "set -u\numask 077\n\
         hadar_report() {{ scontrol update JobId=\"$SLURM_JOB_ID\" Comment=\"$1\" || true; }}\n\
         mkdir -p {job_dir} 2>/dev/null\n\
         if [ ! -d {job_dir} ] || [ ! -O {job_dir} ]; then hadar_report '{tag};error=spool-folder-missing-or-not-the-users'; exit 1; fi\n\
         chmod 0700 {job_dir}\n\
         mkdir -p {dir} && cd {dir} || {{ hadar_report '{tag};error=cannot-make-the-round-folder'; exit 1; }}\n\
         exec >>copies.out 2>&1\n\
         if [ ! -f {script} ]; then\n\
         base64 -d >{script}.tmp <<'HADAR_EOF'\n{}\nHADAR_EOF\n\
         chmod 0700 {script}.tmp && mv -f {script}.tmp {script}\n\
         fi\n\
         base64 -d >round.json <<'HADAR_EOF'\n{}\nHADAR_EOF\n",
        crate::fork_consolidate::base64(in_job.user_script.as_bytes()),
        crate::fork_consolidate::base64(in_job.plan.as_bytes()),
        dir = quote(&dir.display().to_string()),
    )
}

/// Single-quotes a word for the shell.
pub(crate) fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}
