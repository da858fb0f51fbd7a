//! Splits the multi-line output of `scontrol show node|job` into records of fields.
//!
//! Each record starts with a line `FirstKey=...` (`NodeName=` or `JobId=`); its fields are
//! `Key=value` words separated by spaces. A few keys hold free text that may contain spaces
//! (`Comment`, `AdminComment`, `Reason`, ...): Slurm prints each of them on a line of its own
//! and its value is the rest of that line. A field appearing twice in one record is kept as a
//! duplicate so that callers can refuse records a user tried to forge by putting a newline and
//! `AdminComment=...` into a comment (see [`Record::is_ambiguous`]).

/// Keys whose value is the rest of the line.
const REST_OF_LINE: [&str; 10] = [
    "Comment",
    "AdminComment",
    "Reason",
    "OS",
    "Command",
    "WorkDir",
    "StdErr",
    "StdIn",
    "StdOut",
    "SystemComment",
];

/// One `scontrol show` record.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Record {
    /// The fields in order of appearance.
    pub fields: Vec<(String, String)>,
    /// Detail lines of `scontrol -d show job` (`Nodes=... CPU_IDs=... GRES=...`), each as its
    /// own list of fields.
    pub details: Vec<Vec<(String, String)>>,
}

impl Record {
    /// The first value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The value of `key`, `None` also when Slurm prints `(null)`, `N/A`, `None` or nothing.
    pub fn value(&self, key: &str) -> Option<&str> {
        self.get(key)
            .filter(|v| !matches!(*v, "" | "(null)" | "N/A" | "None" | "Unknown"))
    }

    /// True when one of the free-text keys, or the record's first key, appears more than once:
    /// then a user-written text spans lines and the record cannot be trusted.
    pub fn is_ambiguous(&self) -> bool {
        let first = self.fields.first().map(|(k, _)| k.as_str());
        let mut keys: Vec<&str> = REST_OF_LINE.to_vec();
        keys.extend(first);
        keys.iter()
            .any(|key| self.fields.iter().filter(|(k, _)| k == key).count() > 1)
    }
}

/// Splits `text` into records that start with `first_key=`.
pub fn parse(text: &str, first_key: &str) -> Vec<Record> {
    let head = format!("{first_key}=");
    let mut records: Vec<Record> = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() {
            continue;
        }
        let first_line = line.starts_with(&head);
        if first_line {
            records.push(Record::default());
        }
        let Some(rec) = records.last_mut() else {
            continue;
        };
        // `JobName` ends the first line of a job and is the user's free text: it may hold
        // spaces and `Key=value` words, so it is the rest of the line (a name such as
        // `x UserId=root(0) JobState=RUNNING` must not forge those fields).
        if first_line && let Some(at) = trimmed.find(" JobName=") {
            rec.fields.extend(split_words(&trimmed[..at]));
            rec.fields.push((
                "JobName".to_string(),
                trimmed[at + " JobName=".len()..].trim_end().to_string(),
            ));
            continue;
        }
        if let Some((key, rest)) = trimmed.split_once('=')
            && REST_OF_LINE.contains(&key)
        {
            rec.fields
                .push((key.to_string(), rest.trim_end().to_string()));
            continue;
        }
        let words = split_words(trimmed);
        // A detail line of `-d show job` starts with Nodes= and names CPU_IDs.
        if words.first().is_some_and(|(k, _)| k == "Nodes")
            && words.iter().any(|(k, _)| k == "CPU_IDs")
        {
            rec.details.push(words);
        } else {
            rec.fields.extend(words);
        }
    }
    records
}

/// `Key=value` words; a word without `=` is appended to the previous value (Slurm prints a
/// few values with spaces mid-line, e.g. `AllocNode:Sid=host:123`).
fn split_words(line: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for word in line.split_whitespace() {
        match word.split_once('=') {
            Some((k, v)) => out.push((k.to_string(), v.to_string())),
            None => {
                if let Some(last) = out.last_mut() {
                    last.1.push(' ');
                    last.1.push_str(word);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_records_and_keeps_free_text_whole() {
        let text = "JobId=5 JobName=a b\n   Comment=hello world \n   AdminComment=hadar:v1 gpus=2\n\nJobId=6 JobName=x\n   Priority=0 Nice=0\n";
        let recs = parse(text, "JobId");
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].get("JobName"), Some("a b"));
        assert_eq!(recs[0].get("Comment"), Some("hello world"));
        assert_eq!(recs[0].get("AdminComment"), Some("hadar:v1 gpus=2"));
        assert_eq!(recs[1].get("Priority"), Some("0"));
        assert!(!recs[0].is_ambiguous());
    }

    #[test]
    fn a_comment_with_a_forged_line_makes_the_record_ambiguous() {
        let text = "JobId=5 JobName=a\n   AdminComment=hadar:v1 gpus=1\n   Comment=x\n   AdminComment=hadar:v1 gpus=64\n";
        assert!(parse(text, "JobId")[0].is_ambiguous());
    }

    #[test]
    fn a_job_name_cannot_forge_fields() {
        let text = "JobId=5 JobName=x UserId=root(0) JobState=RUNNING AdminComment=hadar:v1 gpus=8\n   UserId=alice(1000) GroupId=alice(1000)\n   JobState=PENDING Reason=None\n";
        let r = &parse(text, "JobId")[0];
        assert_eq!(
            r.get("JobName"),
            Some("x UserId=root(0) JobState=RUNNING AdminComment=hadar:v1 gpus=8")
        );
        assert_eq!(r.get("UserId"), Some("alice(1000)"));
        assert_eq!(r.get("JobState"), Some("PENDING"));
        assert_eq!(r.get("AdminComment"), None);
        let het = "JobId=7 HetJobId=7 HetJobOffset=0 JobName=a b\n   UserId=u(1)\n";
        let r = &parse(het, "JobId")[0];
        assert_eq!(
            (r.get("HetJobOffset"), r.get("JobName")),
            (Some("0"), Some("a b"))
        );
    }

    #[test]
    fn detail_lines_are_kept_apart() {
        let text = "JobId=5 JobName=a\n   NodeList=n[1,4]\n     Nodes=n1 CPU_IDs=0 Mem=0 GRES=gpu:v100:2(IDX:0-1)\n     Nodes=n4 CPU_IDs=0 Mem=0 GRES=gpu:k80:2(IDX:2-3)\n   MinCPUsNode=1\n";
        let r = &parse(text, "JobId")[0];
        assert_eq!(r.details.len(), 2);
        assert_eq!(r.get("NodeList"), Some("n[1,4]"));
        assert_eq!(r.get("Nodes"), None);
        assert_eq!(r.value("MinCPUsNode"), Some("1"));
    }
}
