//! Slurm's advance reservations (`scontrol show reservation`): which nodes are kept for
//! which users and accounts, and when. Read from Slurm's JSON on 24.11 and later (times as
//! epoch seconds, whatever the controller's time zone) and from the one-line text form on
//! older releases (run with `TZ=UTC`, as every command is, so its times read as UTC).
//! Pure parsers of the command's answer; [`crate::Slurm::reservations`] runs it.

use crate::json::{Number, Text, check_version, describe_json_error};
use crate::{SlurmError, hostlist};
use serde::Deserialize;

/// The flags of a reservation that change who may use its nodes, and when.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReservationFlags {
    /// `MAINT`: a maintenance reservation (its nodes are also shown as `MAINT`).
    pub maint: bool,
    /// `IGNORE_JOBS`: created over running jobs, which keep running.
    pub ignore_jobs: bool,
    /// `FLEX`: its jobs may also use nodes outside it.
    pub flex: bool,
    /// `ANY_NODES`: its jobs may use any node (a reservation of licenses or burst buffers).
    pub any_nodes: bool,
    /// `PART_NODES`: it holds all nodes of its partition.
    pub part_nodes: bool,
    /// `MAGNETIC`: jobs of its users and accounts use it without asking for it.
    pub magnetic: bool,
}

impl ReservationFlags {
    /// The flags of a list of flag names (`MAINT`, `SPEC_NODES`, ...); others are ignored.
    pub fn of<'a>(names: impl IntoIterator<Item = &'a str>) -> ReservationFlags {
        let mut f = ReservationFlags::default();
        for n in names {
            match n.trim().to_ascii_uppercase().as_str() {
                "MAINT" => f.maint = true,
                "IGNORE_JOBS" => f.ignore_jobs = true,
                "FLEX" => f.flex = true,
                "ANY_NODES" => f.any_nodes = true,
                "PART_NODES" => f.part_nodes = true,
                "MAGNETIC" => f.magnetic = true,
                _ => {}
            }
        }
        f
    }
}

/// One reservation.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Reservation {
    /// `ReservationName`.
    pub name: String,
    /// Its nodes, expanded from the host list.
    pub nodes: Vec<String>,
    /// `StartTime`, seconds since 1970 (UTC).
    pub start_unix: i64,
    /// `EndTime`, seconds since 1970 (UTC); `None`: no end.
    pub end_unix: Option<i64>,
    /// `Users`, as Slurm lists them: names, or names each prefixed `-` for "everyone but".
    pub users: Vec<String>,
    /// `Accounts`, in the same form as `users`.
    pub accounts: Vec<String>,
    /// The flags hadar acts on.
    pub flags: ReservationFlags,
}

fn bad(detail: String) -> SlurmError {
    SlurmError::Parse {
        what: "scontrol show reservation",
        detail,
    }
}

fn list(text: Option<&str>) -> Vec<String> {
    text.unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty() && *s != "(null)")
        .map(String::from)
        .collect()
}

fn nodes_of(name: &str, list: Option<&str>) -> Result<Vec<String>, SlurmError> {
    hostlist::expand(list.unwrap_or("")).map_err(|e| bad(format!("reservation {name}: {e}")))
}

#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    reservations: Vec<JsonReservation>,
}

#[derive(Deserialize)]
struct JsonReservation {
    name: String,
    #[serde(default)]
    node_list: Text,
    #[serde(default)]
    start_time: Number,
    #[serde(default)]
    end_time: Number,
    #[serde(default)]
    users: Text,
    #[serde(default)]
    accounts: Text,
    #[serde(default)]
    flags: Vec<String>,
}

/// Parses `scontrol show reservation --json` (data_parser v0.0.40 to v0.0.45).
pub fn parse_json(text: &str) -> Result<Vec<Reservation>, SlurmError> {
    check_version("scontrol show reservation", text)?;
    let answer: Answer =
        serde_json::from_str(text).map_err(|e| bad(describe_json_error(text, &e)))?;
    answer
        .reservations
        .into_iter()
        .map(|r| {
            let start_unix = r
                .start_time
                .0
                .ok_or_else(|| bad(format!("reservation {} has no start_time", r.name)))?;
            Ok(Reservation {
                nodes: nodes_of(&r.name, r.node_list.0.as_deref())?,
                start_unix,
                end_unix: r.end_time.0,
                users: list(r.users.get().as_deref()),
                accounts: list(r.accounts.get().as_deref()),
                flags: ReservationFlags::of(r.flags.iter().map(String::as_str)),
                name: r.name,
            })
        })
        .collect()
}

/// Parses `scontrol show reservation --oneliner` (releases without JSON). `No reservations
/// in the system` gives none.
pub fn parse_text(text: &str) -> Result<Vec<Reservation>, SlurmError> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("ReservationName=")) {
        let get = |k: &str| {
            line.split_whitespace()
                .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
        };
        let name = get("ReservationName").unwrap_or("").to_string();
        let time = |k: &str| get(k).and_then(crate::job::parse_time);
        let start_unix = time("StartTime").ok_or_else(|| {
            bad(format!(
                "reservation {name}: StartTime {:?}",
                get("StartTime")
            ))
        })?;
        out.push(Reservation {
            nodes: nodes_of(&name, get("Nodes"))?,
            start_unix,
            end_unix: time("EndTime"),
            users: list(get("Users")),
            accounts: list(get("Accounts")),
            flags: ReservationFlags::of(get("Flags").unwrap_or("").split(',')),
            name,
        });
    }
    Ok(out)
}

impl crate::Slurm {
    /// The reservations Slurm knows (`scontrol show reservation`, as JSON where the release
    /// has it).
    pub fn reservations(&self) -> Result<Vec<Reservation>, SlurmError> {
        self.show_in_read_form("reservation", parse_json, parse_text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const META: &str =
        r#""meta":{"plugin":{"data_parser":"data_parser/v0.0.45"}},"errors":[],"warnings":[]"#;

    #[test]
    fn reads_json_reservations() {
        let text = format!(
            r#"{{"reservations":[{{"accounts":"","flags":["MAINT","SPEC_NODES"],"name":"maint1","node_list":"n[1-2]","start_time":{{"set":true,"infinite":false,"number":1700000000}},"end_time":{{"set":true,"infinite":false,"number":1700003600}},"users":"alice,bob"}},{{"accounts":"-phys","flags":["FLEX","MAGNETIC"],"name":"r2","node_list":"","start_time":{{"set":true,"infinite":false,"number":5}},"end_time":{{"set":false,"infinite":true,"number":0}},"users":""}}],{META}}}"#
        );
        let r = parse_json(&text).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].name, "maint1");
        assert_eq!(r[0].nodes, vec!["n1", "n2"]);
        assert_eq!(
            (r[0].start_unix, r[0].end_unix),
            (1700000000, Some(1700003600))
        );
        assert_eq!(r[0].users, vec!["alice", "bob"]);
        assert!(r[0].accounts.is_empty());
        assert!(r[0].flags.maint && !r[0].flags.flex);
        assert_eq!(r[1].end_unix, None);
        assert_eq!(r[1].accounts, vec!["-phys"]);
        assert!(r[1].flags.flex && r[1].flags.magnetic && r[1].nodes.is_empty());
    }

    #[test]
    fn refuses_bad_json() {
        let no_start = format!(r#"{{"reservations":[{{"name":"x","node_list":"n1"}}],{META}}}"#);
        assert!(
            parse_json(&no_start)
                .unwrap_err()
                .to_string()
                .contains("reservation x")
        );
        let bad_nodes = format!(
            r#"{{"reservations":[{{"name":"y","node_list":"n[1-","start_time":1}}],{META}}}"#
        );
        assert!(parse_json(&bad_nodes).is_err());
        assert!(parse_json("No reservations in the system").is_err());
    }

    #[test]
    fn reads_text_reservations() {
        let text = "ReservationName=r1 StartTime=2026-12-02T07:00:00 EndTime=2026-12-02T08:00:00 Duration=01:00:00 Nodes=n3 NodeCnt=1 CoreCnt=8 Features=(null) PartitionName=(null) Flags=IGNORE_JOBS,SPEC_NODES TRES=cpu=8 Users=(null) Groups=(null) Accounts=phys State=INACTIVE BurstBuffer=(null) MaxStartDelay=(null)\n";
        let r = parse_text(text).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].nodes, vec!["n3"]);
        assert_eq!(r[0].end_unix.unwrap() - r[0].start_unix, 3600);
        assert_eq!(r[0].accounts, vec!["phys"]);
        assert!(r[0].users.is_empty() && r[0].flags.ignore_jobs);
        assert!(
            parse_text("No reservations in the system\n")
                .unwrap()
                .is_empty()
        );
    }
}
