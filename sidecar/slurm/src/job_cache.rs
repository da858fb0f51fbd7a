//! Reading only the jobs that changed.
//!
//! A full read of the jobs (`scontrol -d show job --json`) costs about 8 KB of JSON per job,
//! built by the command from slurmctld's answer: at 10,000 jobs some 80 MB and seconds of
//! CPU every round. Between full reads the adapter instead lists every job in one short line
//! of the fields a change of interest shows in ([`LISTING_FORMAT`]: state, reason, limits,
//! partition, nodes, dependency, the job's comment, ...), compares each line with the one
//! the job had when it was last read in full, and reads in full (one `squeue --json --jobs`)
//! only the jobs whose line changed, the jobs that are new, and the jobs this handle acted
//! on since. A running job that reports its progress (`hadar-progress:v1 ...` in its own
//! comment, every few seconds) changes its line and nothing else: the new comment is taken
//! from the line, without a read. A full read still happens every `full_read_every` (and at
//! the first read), which bounds how long a change to a field outside the listing goes
//! unseen.
//!
//! This module is the bookkeeping alone, without IO: which jobs to read in full, and the
//! jobs of the round once they are read.

use crate::job::{JobStatus, SlurmJob};
use std::collections::{BTreeMap, BTreeSet};

/// `squeue -o` fields of the listing, `|`-separated, the job's own id (`%A`) first and its
/// comment (free text, which may hold anything, line breaks too) last. The fields whose
/// value moves while nothing happens to the job (time used, time left, an estimated start)
/// are left out, so that an unchanged job lists the same line round after round.
pub const LISTING_FORMAT: &str = "%A|%T|%r|%l|%P|%q|%a|%v|%E|%N|%D|%C|%m|%f|%b|%W|%K|%k";

/// How many `|` separate the fields before the comment in a line without the id.
const FIELDS_BEFORE_COMMENT: usize = 16;

/// What a progress report's comment starts with (the daemon's `progress` module reads it).
const PROGRESS_TAG: &str = "hadar-progress:v1 ";

/// Each job of the listing and its line; ids that occur more than once (a comment with line
/// breaks can imitate another job's line) are set apart, to be read in full.
#[derive(Debug, Default, PartialEq)]
pub struct Listing {
    /// Job id to its line (the line without the id).
    pub lines: BTreeMap<u64, String>,
    /// Ids listed more than once.
    pub ambiguous: BTreeSet<u64>,
    /// Ids whose line is followed by another job's line or by the end: their comment is
    /// whole (a comment with a line break continues on lines that are not jobs' lines).
    pub whole: BTreeSet<u64>,
}

impl Listing {
    /// Reads `squeue -h -o LISTING_FORMAT`'s answer; lines that do not start with a job id
    /// and `|` (the rest of a comment with line breaks) are not jobs and are skipped.
    pub fn parse(text: &str) -> Listing {
        let mut listing = Listing::default();
        let mut previous: Option<u64> = None;
        for line in text.lines() {
            let job = line
                .split_once('|')
                .and_then(|(id, rest)| Some((id.trim().parse::<u64>().ok()?, rest)));
            let Some((id, rest)) = job else {
                previous = None;
                continue;
            };
            if let Some(p) = previous.replace(id) {
                listing.whole.insert(p);
            }
            if listing.lines.insert(id, rest.to_string()).is_some() {
                listing.ambiguous.insert(id);
            }
        }
        listing.whole.extend(previous);
        listing
    }

    /// The new comment of job `id` when its line differs from `seen` in a whole progress
    /// report alone.
    fn progress_only(&self, id: u64, seen: &str) -> Option<&str> {
        let line = self.lines.get(&id)?;
        if !self.whole.contains(&id) || self.ambiguous.contains(&id) {
            return None;
        }
        let (head, comment) = split_comment(line)?;
        let (seen_head, _) = split_comment(seen)?;
        (head == seen_head && comment.starts_with(PROGRESS_TAG)).then_some(comment)
    }
}

/// A line (without the id) split before its comment.
fn split_comment(line: &str) -> Option<(&str, &str)> {
    let at = line.match_indices('|').nth(FIELDS_BEFORE_COMMENT - 1)?.0;
    Some((&line[..at], &line[at + 1..]))
}

/// The jobs as last read, each with its listing line when it was read.
#[derive(Debug, Default)]
pub struct JobCache {
    jobs: BTreeMap<u64, (Option<String>, SlurmJob)>,
    /// Whether the last merge saw a job take or give back nodes' resources.
    moved: bool,
}

/// Whether a job in `status` holds resources on its nodes (any state hadar does not know
/// is taken to).
fn holds_resources(status: &JobStatus) -> bool {
    !status.is_terminal() && !matches!(status, JobStatus::Pending | JobStatus::Requeued)
}

/// What one incremental read must fetch in full.
#[derive(Debug, PartialEq)]
pub enum Fetch {
    /// Nothing changed: the cached jobs are the answer.
    Nothing,
    /// These jobs (a minority).
    Some(BTreeSet<u64>),
    /// So many jobs changed that one full read is as cheap as naming them.
    All,
}

impl JobCache {
    /// Whether the last merge saw a job start, end, or change while it held resources, or
    /// one that held them leave: what moves the nodes' free CPUs, memory, GPUs and licenses.
    pub fn resources_moved(&self) -> bool {
        self.moved
    }

    /// How many jobs it holds.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Which jobs of `listing` to read in full: those not read before, those whose line
    /// changed (but in a progress report alone), those listed ambiguously, and those in
    /// `acted_on`. All of them when they are more than half the listing.
    pub fn to_fetch(&self, listing: &Listing, acted_on: &BTreeSet<u64>) -> Fetch {
        let mut ids: BTreeSet<u64> = listing
            .lines
            .iter()
            .filter(|(id, line)| match self.jobs.get(id) {
                Some((Some(seen), _)) => {
                    seen != *line && listing.progress_only(**id, seen).is_none()
                }
                _ => true,
            })
            .map(|(id, _)| *id)
            .collect();
        ids.extend(listing.ambiguous.iter().copied());
        ids.extend(acted_on.iter().filter(|id| listing.lines.contains_key(id)));
        if ids.is_empty() {
            Fetch::Nothing
        } else if ids.len() * 2 > listing.lines.len() {
            Fetch::All
        } else {
            Fetch::Some(ids)
        }
    }

    /// Replaces the cache with a full read, `listing` taken just before it.
    pub fn replace(&mut self, listing: &Listing, jobs: Vec<SlurmJob>) -> Vec<SlurmJob> {
        self.jobs.clear();
        self.merge(listing, jobs)
    }

    /// The jobs of `listing`: `fresh` where read just now, else as cached, with the new
    /// comment of a job whose line changed in a progress report alone. A cached job the
    /// listing no longer shows has left Slurm and is dropped; a fresh job carries the
    /// listing's line (none when it was not listed: it is read again next time).
    pub fn merge(&mut self, listing: &Listing, fresh: Vec<SlurmJob>) -> Vec<SlurmJob> {
        let fresh_ids: BTreeSet<u64> = fresh.iter().map(|j| j.id).collect();
        let holding = |jobs: &BTreeMap<u64, (Option<String>, SlurmJob)>, id: &u64| {
            jobs.get(id)
                .is_some_and(|(_, j)| holds_resources(&j.status))
        };
        self.moved = fresh
            .iter()
            .any(|j| holds_resources(&j.status) || holding(&self.jobs, &j.id))
            || self
                .jobs
                .iter()
                .any(|(id, (_, j))| !listing.lines.contains_key(id) && holds_resources(&j.status));
        self.jobs
            .retain(|id, _| listing.lines.contains_key(id) && !fresh_ids.contains(id));
        for (id, (seen, job)) in self.jobs.iter_mut() {
            let Some(old) = seen.as_deref() else { continue };
            if let Some(comment) = listing.progress_only(*id, old) {
                job.comment = Some(comment.to_string());
                *seen = listing.lines.get(id).cloned();
            }
        }
        for job in fresh {
            let line = match listing.ambiguous.contains(&job.id) {
                true => None,
                false => listing.lines.get(&job.id).cloned(),
            };
            self.jobs.insert(job.id, (line, job));
        }
        self.jobs.values().map(|(_, j)| j.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: u64) -> SlurmJob {
        SlurmJob::held_with_record(id, "hadar v1")
    }

    fn listing(lines: &[(u64, &str)]) -> Listing {
        let text: String = lines.iter().map(|(id, l)| format!("{id}|{l}\n")).collect();
        Listing::parse(&text)
    }

    fn filled(lines: &[(u64, &str)]) -> JobCache {
        let mut cache = JobCache::default();
        let l = listing(lines);
        cache.replace(&l, lines.iter().map(|(id, _)| job(*id)).collect());
        cache
    }

    #[test]
    fn an_unchanged_listing_fetches_nothing() {
        let lines = [(1, "PENDING|a"), (2, "RUNNING|b"), (3, "RUNNING|c")];
        let cache = filled(&lines);
        assert_eq!(
            cache.to_fetch(&listing(&lines), &BTreeSet::new()),
            Fetch::Nothing
        );
    }

    #[test]
    fn changed_new_and_acted_on_jobs_are_fetched_and_departed_ones_dropped() {
        let cache_lines: Vec<(u64, String)> =
            (1..=10).map(|i| (i, format!("PENDING|{i}"))).collect();
        let refs: Vec<(u64, &str)> = cache_lines.iter().map(|(i, l)| (*i, l.as_str())).collect();
        let mut cache = filled(&refs);
        let mut now = refs.clone();
        now[1].1 = "RUNNING|2"; // job 2 started
        now.retain(|(id, _)| *id != 10); // job 10 left Slurm
        now.push((11, "PENDING|11")); // job 11 is new
        let l = listing(&now);
        let fetch = cache.to_fetch(&l, &BTreeSet::from([5, 99]));
        assert_eq!(fetch, Fetch::Some(BTreeSet::from([2, 5, 11])));
        let mut started = job(2);
        started.status = JobStatus::Running;
        let jobs = cache.merge(&l, vec![started, job(5), job(11)]);
        let ids: Vec<u64> = jobs.iter().map(|j| j.id).collect();
        assert_eq!(ids, vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 11]);
        assert_eq!(jobs[1].status, JobStatus::Running);
        assert!(cache.resources_moved(), "job 2 started");
        // Read in full with their new lines: nothing to fetch next time.
        assert_eq!(cache.to_fetch(&l, &BTreeSet::new()), Fetch::Nothing);
    }

    #[test]
    fn a_new_or_cancelled_pending_job_moves_no_resources() {
        let mut cache = filled(&[(1, "PENDING|"), (2, "PENDING|"), (3, "PENDING|")]);
        let now = listing(&[
            (1, "PENDING|"),
            (2, "CANCELLED|"),
            (3, "PENDING|"),
            (4, "PENDING|"),
        ]);
        let mut cancelled = job(2);
        cancelled.status = JobStatus::Cancelled;
        cache.merge(&now, vec![cancelled, job(4)]);
        assert!(!cache.resources_moved());
        // A running job that leaves Slurm's listing gives its resources back.
        let mut running = job(5);
        running.status = JobStatus::Running;
        let with_5 = listing(&[(1, "PENDING|"), (5, "RUNNING|")]);
        cache.merge(&with_5, vec![running]);
        assert!(cache.resources_moved());
        cache.merge(&listing(&[(1, "PENDING|")]), Vec::new());
        assert!(cache.resources_moved(), "job 5 left");
    }

    #[test]
    fn a_majority_of_changes_asks_for_a_full_read() {
        let cache = filled(&[(1, "PENDING|"), (2, "PENDING|"), (3, "PENDING|")]);
        let now = listing(&[(1, "RUNNING|"), (2, "RUNNING|"), (3, "PENDING|")]);
        assert_eq!(cache.to_fetch(&now, &BTreeSet::new()), Fetch::All);
    }

    #[test]
    fn a_forged_line_in_a_comment_cannot_hide_a_change() {
        let mut cache = filled(&[
            (1, "RUNNING|x"),
            (2, "PENDING|"),
            (3, "PENDING|"),
            (4, "PENDING|"),
        ]);
        // Job 1 ended; job 2's comment holds a line break and a copy of job 1's old line.
        let text = "1|COMPLETED|x\n2|PENDING|hi\n1|RUNNING|x\n3|PENDING|\n4|PENDING|\nnot a job\n";
        let l = Listing::parse(text);
        assert_eq!(l.ambiguous, BTreeSet::from([1]));
        let fetch = cache.to_fetch(&l, &BTreeSet::new());
        assert_eq!(fetch, Fetch::Some(BTreeSet::from([1, 2])));
        cache.merge(&l, vec![job(1), job(2)]);
        // Still ambiguous next time: read again rather than trusted.
        assert_eq!(
            cache.to_fetch(&l, &BTreeSet::new()),
            Fetch::Some(BTreeSet::from([1]))
        );
    }

    /// A line (without the id) of the listing's 17 fields, with `comment` last.
    fn line(state: &str, comment: &str) -> String {
        format!(
            "{state}|None|1:00:00|gpu|normal|acct|(null)|(null)|n1|1|1|4000M|(null)|gres/gpu:1|(null)|N/A|{comment}"
        )
    }

    #[test]
    fn a_progress_report_is_taken_from_the_listing_without_a_read() {
        let before = [
            (1, line("RUNNING", "hadar-progress:v1 steps=10 rate=2")),
            (2, line("PENDING", "")),
            (3, line("PENDING", "")),
        ];
        let refs: Vec<(u64, &str)> = before.iter().map(|(i, l)| (*i, l.as_str())).collect();
        let mut cache = filled(&refs);
        let report = "hadar-progress:v1 steps=30 rate=2.5";
        let now = [
            (1, line("RUNNING", report)),
            (2, line("PENDING", "")),
            (3, line("PENDING", "")),
        ];
        let refs: Vec<(u64, &str)> = now.iter().map(|(i, l)| (*i, l.as_str())).collect();
        let l = listing(&refs);
        assert_eq!(cache.to_fetch(&l, &BTreeSet::new()), Fetch::Nothing);
        let jobs = cache.merge(&l, Vec::new());
        assert_eq!(jobs[0].comment.as_deref(), Some(report));
        assert_eq!(cache.to_fetch(&l, &BTreeSet::new()), Fetch::Nothing);

        // Anything else changed with it, a user's own comment, or a comment that goes on
        // past a line break: read in full.
        for (changed, text) in [
            (
                line("COMPLETING", report),
                format!(
                    "1|{}\n2|{}\n3|{}\n",
                    line("COMPLETING", report),
                    line("PENDING", ""),
                    line("PENDING", "")
                ),
            ),
            (
                line("RUNNING", "my note"),
                format!(
                    "1|{}\n2|{}\n3|{}\n",
                    line("RUNNING", "my note"),
                    line("PENDING", ""),
                    line("PENDING", "")
                ),
            ),
            (
                line("RUNNING", "hadar-progress:v1 steps=40 rate=1"),
                format!(
                    "2|{}\n1|{}\nmore text\n3|{}\n",
                    line("PENDING", ""),
                    line("RUNNING", "hadar-progress:v1 steps=40 rate=1"),
                    line("PENDING", "")
                ),
            ),
        ] {
            let l = Listing::parse(&text);
            assert_eq!(l.lines[&1], changed);
            assert_eq!(
                cache.to_fetch(&l, &BTreeSet::new()),
                Fetch::Some(BTreeSet::from([1])),
                "{text}"
            );
        }
    }

    #[test]
    fn a_job_read_in_full_but_not_yet_listed_is_read_again() {
        // Job 2 was submitted between the listing and the full read.
        let mut cache = JobCache::default();
        let before = listing(&[(1, "PENDING|"), (3, "PENDING|"), (4, "PENDING|")]);
        let read = cache.replace(&before, vec![job(1), job(2), job(3), job(4)]);
        assert_eq!(read.len(), 4);
        let now = listing(&[
            (1, "PENDING|"),
            (2, "PENDING|"),
            (3, "PENDING|"),
            (4, "PENDING|"),
        ]);
        assert_eq!(
            cache.to_fetch(&now, &BTreeSet::new()),
            Fetch::Some(BTreeSet::from([2]))
        );
    }
}
