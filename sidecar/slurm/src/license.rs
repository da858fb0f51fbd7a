//! The cluster's licenses (`scontrol show licenses`: how many of each are free) and what a
//! job asks for (its `Licenses=` field, `--licenses`). Read from Slurm's JSON on 24.11 and
//! later and from the one-line text form on older releases. Pure parsers of the command's
//! answer; [`crate::Slurm::licenses`] runs it.

use crate::SlurmError;
use crate::json::{check_version, describe_json_error};
use serde::Deserialize;

/// One license of the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct License {
    /// `LicenseName` (`matlab`, or `name@server` for a remote one).
    pub name: String,
    /// `Total`.
    pub total: u32,
    /// `Free`: not in use by running jobs nor reserved.
    pub free: u32,
}

fn bad(detail: String) -> SlurmError {
    SlurmError::Parse {
        what: "scontrol show licenses",
        detail,
    }
}

#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    licenses: Vec<JsonLicense>,
}

#[derive(Deserialize)]
struct JsonLicense {
    #[serde(rename = "LicenseName")]
    name: String,
    #[serde(rename = "Total", default)]
    total: u32,
    #[serde(rename = "Free", default)]
    free: u32,
}

/// Parses `scontrol show licenses --json` (data_parser v0.0.40 to v0.0.45).
pub fn parse_json(text: &str) -> Result<Vec<License>, SlurmError> {
    check_version("scontrol show licenses", text)?;
    let answer: Answer =
        serde_json::from_str(text).map_err(|e| bad(describe_json_error(text, &e)))?;
    Ok(answer
        .licenses
        .into_iter()
        .map(|l| License {
            name: l.name,
            total: l.total,
            free: l.free,
        })
        .collect())
}

/// Parses `scontrol show licenses --oneliner` (releases without JSON). No licenses give an
/// empty answer.
pub fn parse_text(text: &str) -> Result<Vec<License>, SlurmError> {
    crate::text_records::parse(text, "LicenseName")
        .iter()
        .map(|r| {
            let name = r.get("LicenseName").unwrap_or("").to_string();
            let count = |k: &str| -> Result<u32, SlurmError> {
                r.get(k)
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| bad(format!("license {name}: {k}={:?}", r.get(k))))
            };
            Ok(License {
                total: count("Total")?,
                free: count("Free")?,
                name: name.clone(),
            })
        })
        .collect()
}

/// What a job's `Licenses=` asks for: all of the listed licenses (`a:1,b:2`), or any one of
/// them (`a:1|b:1`, Slurm 23.02 and later). A name without a count asks for one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LicenseRequest {
    /// `(name, count)` in the order written.
    pub items: Vec<(String, u32)>,
    /// `true` for `|` (any one of them), `false` for `,` (all of them).
    pub any_of: bool,
}

impl LicenseRequest {
    /// Parses a job's `Licenses=` value; `None` for an empty one or one that is not a
    /// license list (`(null)`).
    pub fn parse(text: &str) -> Option<LicenseRequest> {
        let text = text.trim();
        if text.is_empty() || text == "(null)" {
            return None;
        }
        let any_of = text.contains('|');
        let items = text
            .split([',', '|'])
            .map(|item| {
                let item = item.trim();
                match item.rsplit_once(':') {
                    Some((name, n)) => Some((name.to_string(), n.parse().ok()?)),
                    None => Some((item.to_string(), 1)),
                }
            })
            .collect::<Option<Vec<(String, u32)>>>()?;
        (!items.is_empty() && items.iter().all(|(n, _)| !n.is_empty()))
            .then_some(LicenseRequest { items, any_of })
    }

    /// The `(name, count)` pairs to take from `free` for this request, if it can be met:
    /// all items, or the first item that fits when any one will do. A license the cluster
    /// does not list is never free.
    pub fn take_from(&self, free: &[License]) -> Option<Vec<(String, u32)>> {
        let fits = |(name, n): &(String, u32)| {
            free.iter()
                .find(|l| l.name == *name)
                .is_some_and(|l| l.free >= *n)
        };
        if self.any_of {
            self.items.iter().find(|i| fits(i)).map(|i| vec![i.clone()])
        } else {
            self.items.iter().all(fits).then(|| self.items.clone())
        }
    }
}

impl crate::Slurm {
    /// The cluster's licenses (`scontrol show licenses`, as JSON where the release has it).
    pub fn licenses(&self) -> Result<Vec<License>, SlurmError> {
        self.show_in_read_form("licenses", parse_json, parse_text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lic(name: &str, total: u32, free: u32) -> License {
        License {
            name: name.into(),
            total,
            free,
        }
    }

    #[test]
    fn text_and_json_read_alike() {
        let text = "LicenseName=matlab Total=2 Used=1 Free=1 Reserved=0 Remote=no\n\
                    LicenseName=fluent@db Total=5 Used=0 Free=5 Reserved=0 Remote=yes LastConsumed=0 LastDeficit=0 LastUpdate=2026-12-06T12:00:00\n";
        let json = r#"{"licenses":[{"LicenseName":"matlab","Total":2,"Used":1,"Free":1,"Remote":false,"Reserved":0,"LastConsumed":0,"LastDeficit":0,"LastUpdate":0},{"LicenseName":"fluent@db","Total":5,"Used":0,"Free":5,"Remote":true,"Reserved":0}],"meta":{"plugin":{"data_parser":"data_parser/v0.0.45"}},"errors":[],"warnings":[]}"#;
        let want = vec![lic("matlab", 2, 1), lic("fluent@db", 5, 5)];
        assert_eq!(parse_text(text).unwrap(), want);
        assert_eq!(parse_json(json).unwrap(), want);
        assert_eq!(parse_text("").unwrap(), vec![]);
        assert_eq!(
            parse_text("No licenses configured in Slurm.\n").unwrap(),
            vec![]
        );
        let e = parse_text("LicenseName=matlab Total=two Free=1\n").unwrap_err();
        assert!(e.to_string().contains("license matlab: Total"), "{e}");
    }

    #[test]
    fn a_jobs_request_is_all_or_any_of_its_licenses() {
        let all = LicenseRequest::parse("matlab:1,fluent@db:2").unwrap();
        assert!(!all.any_of);
        assert_eq!(
            all.items,
            [("matlab".to_string(), 1), ("fluent@db".to_string(), 2)]
        );
        assert_eq!(
            LicenseRequest::parse("matlab").unwrap().items,
            [("matlab".to_string(), 1)]
        );
        assert!(LicenseRequest::parse("a:1|b:1").unwrap().any_of);
        for none in ["", "(null)", "matlab:x", ",", "a:1,"] {
            assert_eq!(LicenseRequest::parse(none), None, "{none:?}");
        }

        let free = [lic("matlab", 2, 1), lic("fluent@db", 5, 1)];
        assert_eq!(all.take_from(&free), None, "fluent@db: 1 free of 2 asked");
        let one = LicenseRequest::parse("matlab:1").unwrap();
        assert_eq!(one.take_from(&free), Some(vec![("matlab".to_string(), 1)]));
        let either = LicenseRequest::parse("fluent@db:2|matlab:1").unwrap();
        assert_eq!(
            either.take_from(&free),
            Some(vec![("matlab".to_string(), 1)])
        );
        let unknown = LicenseRequest::parse("ansys:1").unwrap();
        assert_eq!(unknown.take_from(&free), None);
    }
}
