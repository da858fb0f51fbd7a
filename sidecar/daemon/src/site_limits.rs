//! The site's limits as the scheduling core's [`Limit`]s: each QOS, association and
//! partition limit Slurm enforces, with the reason Slurm gives a job it keeps pending for
//! it (`QOSMaxGRESPerUser`, `AssocGrpGRESRunMinutes`, ...) in its label.

use hadar_core::site::{Bound, Limit, Scope};
use hadar_slurm::site::{SiteFigures, TresLimits};

/// Slurm's pending reasons for one `*TRES*` limit: on GPUs, on CPUs, on memory.
struct Reasons {
    gres: &'static str,
    cpu: &'static str,
    mem: &'static str,
}

/// The limits of one TRES list `t` (GPUs, typed GPUs, CPUs, memory) of `who` under `key`
/// (`MaxTRESPerUser`), held at once or (`per_job`) per job.
fn tres(
    out: &mut Vec<Limit>,
    scope: &Scope,
    who: &str,
    key: &str,
    t: &TresLimits,
    per_job: bool,
    r: &Reasons,
) {
    let mut push = |bound: Bound, what: String, reason: &str| {
        out.push(Limit {
            scope: scope.clone(),
            bound,
            label: format!("{who} {key}={what} ({reason})"),
        })
    };
    if let Some(n) = t.gpus {
        let b = if per_job {
            Bound::GpusPerJob(n)
        } else {
            Bound::Gpus(n)
        };
        push(b, format!("gres/gpu={n}"), r.gres);
    }
    for (ty, n) in &t.typed_gpus {
        let b = if per_job {
            Bound::TypedGpusPerJob(ty.clone(), *n)
        } else {
            Bound::TypedGpus(ty.clone(), *n)
        };
        push(b, format!("gres/gpu:{ty}={n}"), r.gres);
    }
    if let Some(n) = t.cpus {
        let b = if per_job {
            Bound::CpusPerJob(n)
        } else {
            Bound::Cpus(n)
        };
        push(b, format!("cpu={n}"), r.cpu);
    }
    if let Some(n) = t.mem_mb {
        let b = if per_job {
            Bound::MemMbPerJob(n)
        } else {
            Bound::MemMb(n)
        };
        push(b, format!("mem={n}M"), r.mem);
    }
}

fn qos_limits(f: &SiteFigures, out: &mut Vec<Limit>) {
    for q in &f.qos {
        let n = &q.name;
        let who = format!("QOS {n}");
        let per_user = Scope::QosPerUser(n.clone());
        let per_account = Scope::QosPerAccount(n.clone());
        let all = Scope::Qos(n.clone());
        #[rustfmt::skip]
        let lists = [
            (&per_user, "MaxTRESPerUser", &q.max_tres_per_user, false,
             Reasons { gres: "QOSMaxGRESPerUser", cpu: "QOSMaxCpuPerUserLimit", mem: "QOSMaxMemoryPerUser" }),
            (&per_account, "MaxTRESPerAccount", &q.max_tres_per_account, false,
             Reasons { gres: "QOSMaxGRESPerAccount", cpu: "QOSMaxCpuPerAccount", mem: "QOSMaxMemoryPerAccount" }),
            (&all, "GrpTRES", &q.grp_tres, false,
             Reasons { gres: "QOSGrpGRES", cpu: "QOSGrpCpuLimit", mem: "QOSGrpMemLimit" }),
            (&all, "MaxTRESPerJob", &q.max_tres_per_job, true,
             Reasons { gres: "QOSMaxGRESPerJob", cpu: "QOSMaxCpuPerJobLimit", mem: "QOSMaxMemoryPerJob" }),
        ];
        for (scope, key, t, per_job, r) in &lists {
            tres(out, scope, &who, key, t, *per_job, r);
        }
        if let Some(m) = q.grp_gpu_run_mins {
            out.push(Limit {
                scope: all.clone(),
                bound: Bound::GpuRunMinutes(m),
                label: format!("{who} GrpTRESRunMins=gres/gpu={m} (QOSGrpGRESRunMinutes)"),
            });
        }
        if let Some(m) = q.max_jobs_per_user {
            out.push(Limit {
                scope: per_user.clone(),
                bound: Bound::Jobs(m),
                label: format!("{who} MaxJobsPerUser={m} (QOSMaxJobsPerUserLimit)"),
            });
        }
        if let Some(s) = q.max_wall_s {
            out.push(Limit {
                scope: all.clone(),
                bound: Bound::WallSeconds(s),
                label: format!("{who} MaxWall ({s} s) (QOSMaxWallDurationPerJobLimit)"),
            });
        }
    }
}

fn assoc_limits(f: &SiteFigures, out: &mut Vec<Limit>) {
    for a in &f.assocs {
        // A user association's limits cover that user's jobs in the account; an account
        // association's Grp limits its jobs and its children's (Slurm checks them up the
        // tree), its Max limits its own jobs.
        let (grp, own, who) = match &a.user {
            Some(u) => {
                let s = Scope::User {
                    account: a.account.clone(),
                    user: u.clone(),
                };
                (s.clone(), s, format!("association {}/{u}", a.account))
            }
            None => (
                Scope::AccountTree(a.account.clone()),
                Scope::Account(a.account.clone()),
                format!("account {}", a.account),
            ),
        };
        #[rustfmt::skip]
        let grp_r = Reasons { gres: "AssocGrpGRES", cpu: "AssocGrpCpuLimit", mem: "AssocGrpMemLimit" };
        #[rustfmt::skip]
        let max_r = Reasons { gres: "AssocMaxGRESPerJob", cpu: "AssocMaxCpuPerJobLimit", mem: "AssocMaxMemPerJob" };
        tres(out, &grp, &who, "GrpTRES", &a.grp_tres, false, &grp_r);
        tres(
            out,
            &own,
            &who,
            "MaxTRES",
            &a.max_tres_per_job,
            true,
            &max_r,
        );
        if let Some(m) = a.grp_gpu_run_mins {
            out.push(Limit {
                scope: grp.clone(),
                bound: Bound::GpuRunMinutes(m),
                label: format!("{who} GrpTRESRunMins=gres/gpu={m} (AssocGrpGRESRunMinutes)"),
            });
        }
        if let Some(m) = a.grp_gpu_mins {
            out.push(Limit {
                scope: grp.clone(),
                bound: Bound::GpuMinutes {
                    limit: m,
                    used: a.used_gpu_mins,
                },
                label: format!(
                    "{who} GrpTRESMins=gres/gpu={m}, {} used (AssocGrpGRESMinutes)",
                    a.used_gpu_mins
                ),
            });
        }
        if let Some(m) = a.grp_jobs {
            out.push(Limit {
                scope: grp.clone(),
                bound: Bound::Jobs(m),
                label: format!("{who} GrpJobs={m} (AssocGrpJobsLimit)"),
            });
        }
        if let Some(m) = a.max_jobs {
            out.push(Limit {
                scope: own.clone(),
                bound: Bound::Jobs(m),
                label: format!("{who} MaxJobs={m} (AssocMaxJobsLimit)"),
            });
        }
        if let Some(s) = a.max_wall_s {
            out.push(Limit {
                scope: own.clone(),
                bound: Bound::WallSeconds(s),
                label: format!("{who} MaxWall ({s} s) (AssocMaxWallDurationPerJobLimit)"),
            });
        }
    }
}

/// The limits of `f` as Slurm enforces them: QOS and association limits only when
/// `AccountingStorageEnforce` has `limits`; partition time limits always.
pub fn limits_of(f: &SiteFigures) -> Vec<Limit> {
    let mut out: Vec<Limit> = f
        .partitions
        .iter()
        .filter_map(|p| {
            Some(Limit {
                scope: Scope::Partition(p.name.clone()),
                bound: Bound::WallSeconds(p.max_time_s?),
                label: format!(
                    "partition {} MaxTime ({} s) (PartitionTimeLimit)",
                    p.name, p.max_time_s?
                ),
            })
        })
        .collect();
    if f.config.enforce_limits {
        qos_limits(f, &mut out);
        assoc_limits(f, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hadar_slurm::site::{AssocFigures, QosFigures, SiteConfig, parse_tres};

    #[test]
    fn every_kind_becomes_a_limit_named_as_slurm_names_it() {
        let f = SiteFigures {
            config: SiteConfig {
                enforce_limits: true,
                ..Default::default()
            },
            qos: vec![QosFigures {
                name: "q".into(),
                max_tres_per_user: parse_tres("cpu=8,mem=4G,gres/gpu=4,gres/gpu:v100=2"),
                grp_gpu_run_mins: Some(600),
                ..Default::default()
            }],
            assocs: vec![AssocFigures {
                account: "dept".into(),
                grp_tres: parse_tres("gres/gpu=3"),
                max_tres_per_job: parse_tres("gres/gpu:k80=1"),
                grp_gpu_mins: Some(100),
                used_gpu_mins: 40,
                ..Default::default()
            }],
            ..Default::default()
        };
        let l = limits_of(&f);
        let labels: Vec<&str> = l.iter().map(|l| l.label.as_str()).collect();
        assert_eq!(
            labels,
            vec![
                "QOS q MaxTRESPerUser=gres/gpu=4 (QOSMaxGRESPerUser)",
                "QOS q MaxTRESPerUser=gres/gpu:v100=2 (QOSMaxGRESPerUser)",
                "QOS q MaxTRESPerUser=cpu=8 (QOSMaxCpuPerUserLimit)",
                "QOS q MaxTRESPerUser=mem=4096M (QOSMaxMemoryPerUser)",
                "QOS q GrpTRESRunMins=gres/gpu=600 (QOSGrpGRESRunMinutes)",
                "account dept GrpTRES=gres/gpu=3 (AssocGrpGRES)",
                "account dept MaxTRES=gres/gpu:k80=1 (AssocMaxGRESPerJob)",
                "account dept GrpTRESMins=gres/gpu=100, 40 used (AssocGrpGRESMinutes)",
            ]
        );
        assert_eq!(l[1].bound, Bound::TypedGpus("v100".into(), 2));
        assert_eq!(l[3].bound, Bound::MemMb(4096));
        assert_eq!(l[5].scope, Scope::AccountTree("dept".into()));
        assert_eq!(l[6].scope, Scope::Account("dept".into()));
        assert_eq!(
            l[7].bound,
            Bound::GpuMinutes {
                limit: 100,
                used: 40
            }
        );
    }
}
