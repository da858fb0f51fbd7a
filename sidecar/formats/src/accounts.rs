//! `hadar simulate --accounts FILE`: accounts for a trace, so that fair-share and QOS can
//! weigh its jobs as the site's multifactor priority would ([`hadar_core::site::priority`]).
//!
//! ```toml
//! [weights]                 # optional: the site's PriorityWeight*
//! fairshare = 10000         # default 10000
//! qos = 0                   # default 0
//!
//! [[account]]
//! name = "light"
//! shares = 1                # fair-share shares (> 0)
//! usage_gpu_hours = 0       # past usage (>= 0)
//! qos_priority = 0          # optional, the priority of the account's QOS
//! jobs = "0-19,40"          # trace job indices (0-based) as ranges, or:
//! # every = [2, 1]          # every 2nd job starting at index 1
//! ```
//!
//! Each account's fair-share factor is Slurm's classic one, `2^(-U/S)` with `U` its share of
//! the usage and `S` its share of the shares (an account with no usage, or when no account
//! has any, gets 1). A job in no account has every factor 0.

use crate::error::{FormatError, Location, read_file};
use hadar_core::site::{Factors, PriorityInputs, PriorityWeights};
use serde::Deserialize;

/// One account of the file.
#[derive(Clone, Debug, PartialEq)]
pub struct Account {
    /// Its name.
    pub name: String,
    /// Fair-share shares.
    pub shares: f64,
    /// Past usage in GPU-hours.
    pub usage_gpu_hours: f64,
    /// The priority of its QOS.
    pub qos_priority: f64,
    /// The trace job indices that belong to it.
    pub jobs: JobSet,
}

/// Which trace jobs belong to an account.
#[derive(Clone, Debug, PartialEq)]
pub enum JobSet {
    /// Inclusive index ranges.
    Ranges(Vec<(usize, usize)>),
    /// Every `n`th index from `k`.
    Every { n: usize, k: usize },
}

impl JobSet {
    /// Whether trace job `i` is in the set.
    pub fn contains(&self, i: usize) -> bool {
        match self {
            JobSet::Ranges(r) => r.iter().any(|&(a, b)| a <= i && i <= b),
            JobSet::Every { n, k } => i >= *k && (i - k) % n == 0,
        }
    }
}

/// An accounts file.
#[derive(Clone, Debug, PartialEq)]
pub struct AccountsFile {
    /// The site's weights (only fair-share and QOS are used).
    pub weights: PriorityWeights,
    /// The accounts.
    pub accounts: Vec<Account>,
    /// Where it came from.
    pub origin: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWeights {
    fairshare: Option<f64>,
    qos: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAccount {
    name: String,
    shares: f64,
    usage_gpu_hours: f64,
    qos_priority: Option<f64>,
    jobs: Option<String>,
    every: Option<Vec<usize>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    weights: Option<RawWeights>,
    account: Vec<RawAccount>,
}

/// Reads an accounts file.
pub fn load_accounts(path: &std::path::Path) -> Result<AccountsFile, FormatError> {
    parse_accounts(&read_file(path)?, &path.display().to_string())
}

/// Parses trace job indices and ranges such as `"0-19,40"`; `at` names the field in errors.
pub fn job_ranges(spec: &str, at: &Location) -> Result<JobSet, FormatError> {
    ranges(spec, at).map(JobSet::Ranges)
}

fn ranges(spec: &str, at: &Location) -> Result<Vec<(usize, usize)>, FormatError> {
    let bad = |what: &str| {
        FormatError::invalid(
            at.clone(),
            format!("`{spec}`: {what}; write 0-based job indices and ranges such as \"0-19,40\""),
        )
    };
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let a: usize = a.trim().parse().map_err(|_| bad("not a job index"))?;
        let b: usize = b.trim().parse().map_err(|_| bad("not a job index"))?;
        if b < a {
            return Err(bad("a range ends before it starts"));
        }
        out.push((a, b));
    }
    Ok(out)
}

fn non_negative(x: f64, positive: bool, at: Location) -> Result<f64, FormatError> {
    if x.is_finite() && x >= 0.0 && (!positive || x > 0.0) {
        Ok(x)
    } else {
        let want = if positive {
            "a positive"
        } else {
            "a non-negative"
        };
        Err(FormatError::invalid(
            at,
            format!("must be {want} number, got {x}"),
        ))
    }
}

fn account(raw: RawAccount, i: usize, origin: &str) -> Result<Account, FormatError> {
    let at = |key: &str| Location::of(origin).field(format!("account[{i}].{key}"));
    let jobs = match (raw.jobs, raw.every) {
        (Some(s), None) => JobSet::Ranges(ranges(&s, &at("jobs"))?),
        (None, Some(e)) => match e.as_slice() {
            [n, k] if *n > 0 => JobSet::Every { n: *n, k: *k },
            _ => {
                return Err(FormatError::invalid(
                    at("every"),
                    "must be [n, k] with n > 0: every nth job from index k",
                ));
            }
        },
        _ => {
            return Err(FormatError::invalid(
                at("jobs"),
                "give exactly one of `jobs = \"0-19\"` or `every = [n, k]`",
            ));
        }
    };
    Ok(Account {
        shares: non_negative(raw.shares, true, at("shares"))?,
        usage_gpu_hours: non_negative(raw.usage_gpu_hours, false, at("usage_gpu_hours"))?,
        qos_priority: non_negative(raw.qos_priority.unwrap_or(0.0), false, at("qos_priority"))?,
        name: raw.name,
        jobs,
    })
}

/// Parses an accounts file's text; `origin` names it in errors.
pub fn parse_accounts(text: &str, origin: &str) -> Result<AccountsFile, FormatError> {
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let at = match e.span() {
            Some(s) => Location::of(origin).line(crate::error::line_of(text, s.start)),
            None => Location::of(origin),
        };
        FormatError::invalid(at, e.message().to_string())
    })?;
    let w = raw.weights.unwrap_or(RawWeights {
        fairshare: None,
        qos: None,
    });
    let weights = PriorityWeights {
        fairshare: non_negative(
            w.fairshare.unwrap_or(10000.0),
            false,
            Location::of(origin).field("weights.fairshare"),
        )?,
        qos: non_negative(
            w.qos.unwrap_or(0.0),
            false,
            Location::of(origin).field("weights.qos"),
        )?,
        ..PriorityWeights::default()
    };
    let accounts = raw
        .account
        .into_iter()
        .enumerate()
        .map(|(i, a)| account(a, i, origin))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(AccountsFile {
        weights,
        accounts,
        origin: origin.to_string(),
    })
}

impl AccountsFile {
    /// Each account's fair-share factor, `2^(-U/S)` (classic fair-share).
    pub fn fairshare(&self) -> Vec<f64> {
        let shares: f64 = self.accounts.iter().map(|a| a.shares).sum();
        let usage: f64 = self.accounts.iter().map(|a| a.usage_gpu_hours).sum();
        self.accounts
            .iter()
            .map(|a| {
                if usage <= 0.0 || shares <= 0.0 {
                    return 1.0;
                }
                (-(a.usage_gpu_hours / usage) / (a.shares / shares)).exp2()
            })
            .collect()
    }

    /// For each of `n` trace jobs, its account's index (`None`: in no account), checking
    /// that no job is in two accounts and no account names a job past the trace.
    pub fn assign(&self, n: usize) -> Result<Vec<Option<usize>>, FormatError> {
        for (i, a) in self.accounts.iter().enumerate() {
            if let JobSet::Ranges(r) = &a.jobs
                && let Some(&(_, b)) = r.iter().find(|&&(_, b)| b >= n)
            {
                return Err(FormatError::invalid(
                    Location::of(&self.origin).field(format!("account[{i}].jobs")),
                    format!(
                        "job index {b} is past the trace's {n} jobs (indices 0 to {})",
                        n.saturating_sub(1)
                    ),
                ));
            }
        }
        (0..n)
            .map(|j| {
                let mut of = self
                    .accounts
                    .iter()
                    .enumerate()
                    .filter(|(_, a)| a.jobs.contains(j));
                let first = of.next().map(|(i, _)| i);
                match of.next() {
                    Some((i, _)) => Err(FormatError::invalid(
                        Location::of(&self.origin).field(format!("account[{i}].jobs")),
                        format!(
                            "job {j} is already in account `{}`",
                            self.accounts[first.unwrap_or(0)].name
                        ),
                    )),
                    None => Ok(first),
                }
            })
            .collect()
    }

    /// The factors of a job of account `a` (all 0 for a job in no account).
    pub fn factors(&self, a: Option<usize>) -> Factors {
        let Some(a) = a else {
            return Factors::default();
        };
        let max_qos = self
            .accounts
            .iter()
            .map(|x| x.qos_priority)
            .fold(0.0, f64::max);
        Factors::from_inputs(
            &self.weights,
            &PriorityInputs {
                fairshare: self.fairshare()[a],
                qos_priority: self.accounts[a].qos_priority,
                max_qos_priority: max_qos,
                ..PriorityInputs::default()
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = r#"
[[account]]
name = "light"
shares = 1
usage_gpu_hours = 0
every = [2, 0]

[[account]]
name = "heavy"
shares = 1
usage_gpu_hours = 5000
jobs = "1,3,5"
"#;

    #[test]
    fn the_light_account_weighs_more() {
        let f = parse_accounts(TWO, "a.toml").unwrap();
        let fs = f.fairshare();
        assert_eq!(fs[0], 1.0);
        assert!((fs[1] - 0.25).abs() < 1e-12, "{fs:?}");
        let who = f.assign(6).unwrap();
        assert_eq!(
            who,
            vec![Some(0), Some(1), Some(0), Some(1), Some(0), Some(1)]
        );
        let (l, h) = (f.factors(Some(0)), f.factors(Some(1)));
        assert!(l.weight(&f.weights, 1.0) > h.weight(&f.weights, 1.0));
        assert_eq!(f.factors(None).weight(&f.weights, 1.0), 1.0);
    }

    #[test]
    fn errors_name_the_key() {
        let bad = TWO.replace(
            "shares = 1\nusage_gpu_hours = 5000",
            "shares = 0\nusage_gpu_hours = 5000",
        );
        let e = parse_accounts(&bad, "a.toml").unwrap_err().to_string();
        assert!(
            e.contains("a.toml") && e.contains("account[1].shares"),
            "{e}"
        );
        let e = parse_accounts(&TWO.replace("1,3,5", "3-1"), "a.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("account[1].jobs"), "{e}");
        let e = parse_accounts(TWO, "a.toml")
            .unwrap()
            .assign(5)
            .unwrap_err()
            .to_string();
        assert!(e.contains("account[1].jobs") && e.contains("past"), "{e}");
        let e = parse_accounts(&TWO.replace("1,3,5", "0-1"), "a.toml")
            .unwrap()
            .assign(6)
            .unwrap_err()
            .to_string();
        assert!(e.contains("already in account `light`"), "{e}");
        let e = parse_accounts(
            &TWO.replace("shares = 1\nusage_gpu_hours = 0", "shares = 1"),
            "a.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("a.toml:") && e.contains("usage_gpu_hours"),
            "{e}"
        );
    }
}
