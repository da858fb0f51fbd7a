//! The site file: what `hadar site capture` writes from a live Slurm and `hadar simulate
//! --site` and `hadar dry-run --site` read. Its `[slurm]` table is Slurm's figures as the
//! daemon reads them every round (priority settings, fair-share, QOS, associations and
//! their limits, partitions, reservations, licenses; [`SiteFigures`]) without Slurm's jobs;
//! its `[[job]]` tables give the simulated jobs who they are to the site:
//!
//! ```toml
//! [[job]]
//! jobs = "0-19,40"        # 0-based indices of the trace's (or queue's) jobs
//! user = "alice"
//! account = "physics"
//! qos = "normal"          # optional: none
//! partition = "gpu"       # optional: none
//! time_limit_s = 7200     # optional: no time limit
//! reservation = "maint"   # optional: none
//! ```
//!
//! A job no `[[job]]` names is one the site knows nothing of, as a job Slurm did not list
//! is to the daemon: weight 1, no limit counts it, no reservation offers it nodes.

use hadar_formats::accounts::{JobSet, job_ranges};
use hadar_formats::{FormatError, Location};
use hadar_slurm::site::{JobAccount, SiteFigures};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

/// A site file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SiteFile {
    /// When it was captured, Unix seconds: a simulation's second 0 (reservations are judged
    /// at their Unix times). Unset: 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub captured_unix: Option<i64>,
    /// Slurm's figures, without its jobs.
    #[serde(default)]
    pub slurm: SiteFigures,
    /// The simulated jobs' identities.
    #[serde(default, rename = "job", skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<JobGroup>,
}

/// Who some of the simulated jobs are to the site.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobGroup {
    /// The jobs, as 0-based indices and ranges (`"0-19,40"`).
    pub jobs: String,
    /// Their user.
    pub user: String,
    /// Their account.
    pub account: String,
    /// Their QOS.
    #[serde(default)]
    pub qos: String,
    /// Their partition.
    #[serde(default)]
    pub partition: String,
    /// Their time limit, seconds.
    #[serde(default)]
    pub time_limit_s: Option<f64>,
    /// The reservation they ask for.
    #[serde(default)]
    pub reservation: Option<String>,
}

/// What `hadar site capture` writes above the figures.
const HEADER: &str = "\
# A site as hadar reads it from Slurm (`hadar site capture`): priority settings, fair-share,
# QOS, associations and their limits, partitions, reservations and licenses, without
# Slurm's jobs. `hadar simulate --site FILE` and `hadar dry-run --site FILE` plan with these
# rules. Give the simulated jobs who they are with [[job]] tables (docs/site-policy.md):
#
# [[job]]
# jobs = \"0-19\"           # 0-based job indices and ranges
# user = \"alice\"
# account = \"physics\"
# qos = \"normal\"
# partition = \"gpu\"
# time_limit_s = 7200
";

impl SiteFile {
    /// The file of a capture at `now_unix`: `figures` without their jobs.
    pub fn captured(mut figures: SiteFigures, now_unix: i64) -> SiteFile {
        figures.jobs.clear();
        SiteFile {
            captured_unix: Some(now_unix),
            slurm: figures,
            jobs: Vec::new(),
        }
    }

    /// The file as TOML, with a header saying what it is.
    pub fn to_toml(&self) -> Result<String, toml::ser::Error> {
        Ok(format!("{HEADER}\n{}", toml::to_string(self)?))
    }

    /// Reads a site file.
    pub fn load(path: &Path) -> Result<SiteFile, FormatError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            FormatError::invalid(Location::of(&path.display().to_string()), e.to_string())
        })?;
        SiteFile::parse(&text, &path.display().to_string())
    }

    /// Parses a site file's text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<SiteFile, FormatError> {
        let file: SiteFile = toml::from_str(text).map_err(|e| {
            let at = match e.span() {
                Some(s) => Location::of(origin).line(hadar_formats::error::line_of(text, s.start)),
                None => Location::of(origin),
            };
            FormatError::invalid(at, e.message().to_string())
        })?;
        if !file.slurm.jobs.is_empty() {
            return Err(FormatError::invalid(
                Location::of(origin).field("slurm.jobs"),
                "a site file names its jobs in [[job]] tables by index, not Slurm's jobs",
            ));
        }
        Ok(file)
    }

    /// Each of `count` jobs' identity, by index, from the `[[job]]` tables; `origin` names
    /// the file in errors. A job two tables name, or a table naming a job past the last, is
    /// an error.
    pub fn identities(
        &self,
        count: usize,
        origin: &str,
    ) -> Result<HashMap<u64, JobAccount>, FormatError> {
        let mut out = HashMap::new();
        for (i, g) in self.jobs.iter().enumerate() {
            let at = |key: &str| Location::of(origin).field(format!("job[{i}].{key}"));
            let set = job_ranges(&g.jobs, &at("jobs"))?;
            if let JobSet::Ranges(r) = &set
                && let Some(&(_, last)) = r.iter().find(|(_, b)| *b >= count)
            {
                return Err(FormatError::invalid(
                    at("jobs"),
                    format!(
                        "job {last} is past the last job ({})",
                        count.saturating_sub(1)
                    ),
                ));
            }
            if let Some(t) = g.time_limit_s.filter(|t| !(t.is_finite() && *t > 0.0)) {
                return Err(FormatError::invalid(
                    at("time_limit_s"),
                    format!("must be a positive number of seconds, got {t}"),
                ));
            }
            for j in (0..count).filter(|j| set.contains(*j)) {
                let account = JobAccount {
                    user: g.user.clone(),
                    account: g.account.clone(),
                    qos: g.qos.clone(),
                    partition: g.partition.clone(),
                    time_limit_s: g.time_limit_s,
                    reservation: g.reservation.clone(),
                    time_left_s: g.time_limit_s,
                };
                if out.insert(j as u64, account).is_some() {
                    return Err(FormatError::invalid(
                        at("jobs"),
                        format!("job {j} is named by an earlier [[job]] table too"),
                    ));
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hadar_slurm::site::{PartitionFigures, PartitionState, QosFigures};

    #[test]
    fn a_captured_site_reads_back_as_written() {
        let mut figures = SiteFigures::default();
        figures.config.multifactor = true;
        figures.config.weight_fairshare = 1000.0;
        figures
            .fairshare
            .insert(("physics".into(), "alice".into()), 0.25);
        figures.qos.push(QosFigures {
            name: "normal".into(),
            priority: 10.0,
            ..Default::default()
        });
        figures.partitions.push(PartitionFigures {
            name: "gpu".into(),
            state: PartitionState::Down,
            ..Default::default()
        });
        figures.jobs.insert(
            7,
            JobAccount {
                user: "bob".into(),
                account: "a".into(),
                qos: String::new(),
                partition: String::new(),
                time_limit_s: None,
                reservation: None,
                time_left_s: None,
            },
        );
        let file = SiteFile::captured(figures.clone(), 1_700_000_000);
        let text = file.to_toml().unwrap();
        assert!(text.starts_with("# A site as hadar reads it"), "{text}");
        let back = SiteFile::parse(&text, "site.toml").unwrap();
        figures.jobs.clear();
        assert_eq!(back.slurm, figures);
        assert_eq!(back.captured_unix, Some(1_700_000_000));
    }

    #[test]
    fn jobs_get_their_identities_and_bad_tables_are_named() {
        let text = "[[job]]\njobs = \"0-1\"\nuser = \"alice\"\naccount = \"physics\"\ntime_limit_s = 60\n\
                    [[job]]\njobs = \"3\"\nuser = \"bob\"\naccount = \"chem\"\nqos = \"high\"\n";
        let f = SiteFile::parse(text, "s.toml").unwrap();
        let ids = f.identities(4, "s.toml").unwrap();
        assert_eq!(ids.len(), 3);
        assert_eq!(ids[&1].user, "alice");
        assert_eq!(ids[&1].time_limit_s, Some(60.0));
        assert_eq!(ids[&3].qos, "high");
        assert!(!ids.contains_key(&2));
        let e = f.identities(3, "s.toml").unwrap_err().to_string();
        assert!(
            e.contains("job[1].jobs") && e.contains("past the last"),
            "{e}"
        );
        let twice = format!("{text}[[job]]\njobs = \"1\"\nuser = \"c\"\naccount = \"d\"\n");
        let e = SiteFile::parse(&twice, "s.toml")
            .unwrap()
            .identities(4, "s.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("job[2].jobs") && e.contains("job 1"), "{e}");
        let e = SiteFile::parse(
            "[[job]]\njobs = \"0\"\nuser = \"a\"\naccount = \"b\"\nqoss = \"x\"\n",
            "s.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("s.toml") && e.contains("qoss"), "{e}");
        let e = SiteFile::parse("[slurm.config]\nweight_fairshar = 3\n", "s.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("weight_fairshar"), "{e}");
    }
}
