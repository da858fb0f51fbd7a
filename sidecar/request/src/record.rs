//! The record of a managed job's request, stored by the plugin in the job's `AdminComment`
//! (which ordinary users cannot change) and parsed back by the sidecar.
//!
//! Format, one line: `hadar:v1` followed by space-separated `key=value` words:
//! `gpus=SPEC` (per job) or `gpus-per-node=SPEC`, then optionally `nodes=N`, `het=OFFSET`
//! and the directive words of [`crate::directive`] (`type=`, `throughput=`, `steps=`,
//! `epochs=`, `fork=`, `gpu-types=`, `model=`, `outer=`). SPEC is `N` or `TYPE:N[,TYPE:N...]`. For example
//! `hadar:v1 gpus-per-node=v100:2 nodes=2 type=resnet50 steps=1000 fork=yes`.

use crate::directive::DirectiveKey;
use crate::directive::{Directives, JobDirectives, Origin};
use crate::gpu::{self, GpuCount, GpuRequest, Scope};

/// The prefix and version tag every record starts with.
pub const TAG: &str = "hadar:v1";

/// A managed job's request, as recorded in the job.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// The GPU request the user submitted (stripped from the job itself).
    pub gpus: GpuRequest,
    /// The node count the user asked for (`-N`), if any.
    pub nodes: Option<u32>,
    /// The offset of this component in a heterogeneous job, if it is one.
    pub het_offset: Option<u32>,
    /// The job's Hadar directives.
    pub directives: JobDirectives,
}

/// Why a stored record could not be read back.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RecordError {
    /// The text does not start with the tag, or with another version's.
    #[error("not a hadar record (expected it to start with `{TAG}`): `{0}`")]
    NotARecord(String),
    /// No GPU request in the record.
    #[error("hadar record has neither gpus= nor gpus-per-node=")]
    NoGpus,
    /// A malformed GPU or node field.
    #[error("hadar record field `{0}` is malformed")]
    Field(String),
    /// A malformed directive word.
    #[error("hadar record: {0}")]
    Directive(#[from] crate::directive::DirectiveError),
}

impl Record {
    /// Writes the record as one line.
    pub fn encode(&self) -> String {
        let mut out = String::from(TAG);
        let key = match self.gpus.scope {
            Scope::PerJob => "gpus",
            Scope::PerNode => "gpus-per-node",
        };
        out.push_str(&format!(" {key}={}", self.gpus));
        if let Some(n) = self.nodes {
            out.push_str(&format!(" nodes={n}"));
        }
        if let Some(h) = self.het_offset {
            out.push_str(&format!(" het={h}"));
        }
        let d = &self.directives;
        for key in DirectiveKey::ALL {
            if let Some(value) = key.value_in(d) {
                out.push_str(&format!(" {}={value}", key.as_str()));
            }
        }
        if let Some(t) = d.tasks {
            out.push_str(&format!(" tasks={t}"));
        }
        if let Some(g) = d.gpus_per_task {
            out.push_str(&format!(" gpus-per-task={g}"));
        }
        if let Some(c) = d.cpus_per_gpu {
            out.push_str(&format!(" cpus-per-gpu={c}"));
        }
        if let Some(m) = d.mem_per_gpu_mb {
            out.push_str(&format!(" mem-per-gpu={m}"));
        }
        if d.user_hold {
            out.push_str(&format!(" {USER_HOLD}"));
        }
        if d.array {
            out.push_str(" array=yes");
        }
        if let Some(n) = d.array_throttle {
            out.push_str(&format!(" array-throttle={n}"));
        }
        if d.exclusive {
            out.push_str(" exclusive=yes");
        }
        out
    }

    /// Reads a record back. Unknown fields are refused: a record is only ever written by the
    /// plugin, so anything unexpected means it was tampered with or comes from a newer version.
    pub fn decode(text: &str) -> Result<Record, RecordError> {
        let mut words = text.split_whitespace();
        if words.next() != Some(TAG) {
            return Err(RecordError::NotARecord(crate::excerpt(text)));
        }
        let mut fields = RecordFields::default();
        for word in words {
            fields.read_word(word)?;
        }
        fields.into_record()
    }
}

/// The fields of a record being decoded, gathered word by word.
#[derive(Default)]
struct RecordFields<'a> {
    gpus: Option<GpuRequest>,
    nodes: Option<u32>,
    het_offset: Option<u32>,
    tasks: Option<u32>,
    gpus_per_task: Option<u32>,
    cpus_per_gpu: Option<u64>,
    mem_per_gpu_mb: Option<u64>,
    /// The words the directive parser reads, kept for it in their order.
    directive_words: Vec<&'a str>,
    user_hold: bool,
    array: bool,
    array_throttle: Option<u32>,
    exclusive: bool,
}

impl<'a> RecordFields<'a> {
    /// Takes one word of the record, refusing a malformed or repeated field.
    fn read_word(&mut self, word: &'a str) -> Result<(), RecordError> {
        if word == USER_HOLD {
            self.user_hold = true;
            return Ok(());
        }
        let (key, value) = word
            .split_once('=')
            .ok_or_else(|| RecordError::Field(crate::excerpt(word)))?;
        match key {
            "gpus" | "gpus-per-node" => {
                if self.gpus.is_some() {
                    return Err(RecordError::Field(crate::excerpt(word)));
                }
                let scope = if key == "gpus" {
                    Scope::PerJob
                } else {
                    Scope::PerNode
                };
                self.gpus = Some(
                    decode_spec(value, scope)
                        .ok_or_else(|| RecordError::Field(crate::excerpt(word)))?,
                );
            }
            "array" | "exclusive" if value == "yes" => {
                let flag = if key == "array" {
                    &mut self.array
                } else {
                    &mut self.exclusive
                };
                if std::mem::replace(flag, true) {
                    return Err(RecordError::Field(crate::excerpt(word)));
                }
            }
            "nodes" | "het" | "tasks" | "gpus-per-task" | "array-throttle" => {
                let n: u32 = value
                    .parse()
                    .map_err(|_| RecordError::Field(crate::excerpt(word)))?;
                let slot = match key {
                    "nodes" => &mut self.nodes,
                    "het" => &mut self.het_offset,
                    "tasks" => &mut self.tasks,
                    "array-throttle" => &mut self.array_throttle,
                    _ => &mut self.gpus_per_task,
                };
                if slot.replace(n).is_some() {
                    return Err(RecordError::Field(crate::excerpt(word)));
                }
            }
            "cpus-per-gpu" | "mem-per-gpu" => {
                let n: u64 = value
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| RecordError::Field(crate::excerpt(word)))?;
                let slot = match key {
                    "cpus-per-gpu" => &mut self.cpus_per_gpu,
                    _ => &mut self.mem_per_gpu_mb,
                };
                if slot.replace(n).is_some() {
                    return Err(RecordError::Field(crate::excerpt(word)));
                }
            }
            // The fail-open mark is the fail-open command's, not part of the request.
            FAIL_OPEN_RELEASING | FAIL_OPEN_RELEASED => {
                if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(RecordError::Field(crate::excerpt(word)));
                }
            }
            _ => self.directive_words.push(word),
        }
        Ok(())
    }

    /// The record the gathered fields make, its directive words parsed.
    fn into_record(self) -> Result<Record, RecordError> {
        let mut directives = Directives::default();
        directives.add_words(&self.directive_words.join(" "), Origin::Record)?;
        directives.job.tasks = self.tasks;
        directives.job.gpus_per_task = self.gpus_per_task;
        directives.job.cpus_per_gpu = self.cpus_per_gpu;
        directives.job.mem_per_gpu_mb = self.mem_per_gpu_mb;
        directives.job.user_hold = self.user_hold;
        directives.job.array = self.array;
        directives.job.array_throttle = self.array_throttle;
        directives.job.exclusive = self.exclusive;
        Ok(Record {
            gpus: self.gpus.ok_or(RecordError::NoGpus)?,
            nodes: self.nodes,
            het_offset: self.het_offset,
            directives: directives.job,
        })
    }
}

/// The record word of a job its user submitted held (`sbatch --hold`).
pub const USER_HOLD: &str = "hold=user";

/// The record word of a job the fail-open command is handing to Slurm: its GPU request is
/// restored, its release not yet confirmed (`failing-open=UNIX_SECONDS`).
pub const FAIL_OPEN_RELEASING: &str = "failing-open";
/// The record word of a job the fail-open command handed to Slurm (`failed-open=UNIX_SECONDS`).
pub const FAIL_OPEN_RELEASED: &str = "failed-open";

/// Where a managed job stands with the fail-open command, read from the mark it appends to
/// the job's record (the admin comment, which only root and Slurm's operators can change).
/// Two steps, because a hold placed by the job's owner after the release must be told apart
/// from a release the command did not get to do: the command marks the job `Releasing` in
/// the same update that gives it back its GPU request, releases it, then marks it `Released`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailOpenMark {
    /// GPU request restored; the release may not have happened (a crash in between).
    Releasing(u64),
    /// Released to Slurm's own scheduling at this Unix time.
    Released(u64),
}

impl FailOpenMark {
    /// When the job was failed open (Unix seconds).
    pub fn at(self) -> u64 {
        match self {
            FailOpenMark::Releasing(t) | FailOpenMark::Released(t) => t,
        }
    }

    /// The mark on a record text, if any.
    pub fn of(text: &str) -> Option<FailOpenMark> {
        text.split_whitespace().rev().find_map(|w| {
            let (k, v) = w.split_once('=')?;
            let t: u64 = v.parse().ok()?;
            match k {
                FAIL_OPEN_RELEASING => Some(FailOpenMark::Releasing(t)),
                FAIL_OPEN_RELEASED => Some(FailOpenMark::Released(t)),
                _ => None,
            }
        })
    }

    /// `text` without any fail-open mark: the record as the plugin wrote it.
    pub fn strip(text: &str) -> String {
        text.split_whitespace()
            .filter(|w| {
                !w.split_once('=')
                    .is_some_and(|(k, _)| k == FAIL_OPEN_RELEASING || k == FAIL_OPEN_RELEASED)
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// `text` carrying this mark (and no other).
    pub fn apply(self, text: &str) -> String {
        let (k, t) = match self {
            FailOpenMark::Releasing(t) => (FAIL_OPEN_RELEASING, t),
            FailOpenMark::Released(t) => (FAIL_OPEN_RELEASED, t),
        };
        format!("{} {k}={t}", Self::strip(text))
    }
}

/// Parses `N` or `TYPE:N[,TYPE:N...]`.
fn decode_spec(value: &str, scope: Scope) -> Option<GpuRequest> {
    let mut counts = Vec::new();
    for item in value.split(',') {
        let (gpu_type, n) = match item.rsplit_once(':') {
            Some((t, n)) if gpu::is_type_name(t) => (Some(t.to_string()), n),
            Some(_) => return None,
            None => (None, item),
        };
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let count: u32 = n.parse().ok().filter(|&c| c > 0)?;
        counts.push(GpuCount { gpu_type, count });
    }
    let typed = counts.iter().filter(|c| c.gpu_type.is_some()).count();
    if counts.is_empty()
        || (typed != 0 && typed != counts.len())
        || (typed == 0 && counts.len() != 1)
    {
        return None;
    }
    Some(GpuRequest { scope, counts })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::directive::ThroughputHint;
    use proptest::prelude::*;

    #[test]
    fn encodes_compactly_and_decodes_back() {
        let rec = Record {
            gpus: GpuRequest {
                scope: Scope::PerNode,
                counts: vec![GpuCount {
                    gpu_type: Some("v100".into()),
                    count: 2,
                }],
            },
            nodes: Some(2),
            het_offset: None,
            directives: JobDirectives {
                job_type: Some("resnet50".into()),
                throughput: vec![ThroughputHint {
                    gpu_type: "k80".into(),
                    rate: 2.5,
                }],
                steps: Some(1000),
                epochs: None,
                may_fork: Some(true),
                gpu_types: Some(vec!["v100".into(), "k80".into()]),
                model: crate::ModelTraits::parse("params:25.6M,gflops:4.1,batch:64,amp:yes"),
                outer: Some(crate::Outer::Nesterov {
                    lr: 0.7,
                    momentum: 0.9,
                }),
                restart_s: Some(120),
                tasks: Some(4),
                gpus_per_task: Some(1),
                cpus_per_gpu: Some(2),
                mem_per_gpu_mb: Some(1024),
                user_hold: true,
                array: true,
                array_throttle: Some(2),
                exclusive: true,
            },
        };
        let text = rec.encode();
        assert_eq!(
            text,
            "hadar:v1 gpus-per-node=v100:2 nodes=2 type=resnet50 throughput=k80:2.5 steps=1000 fork=yes gpu-types=v100,k80 model=params:25600000,gflops:4.1,batch:64,input:0,layers:50,amp:yes outer=nesterov:0.7:0.9 restart=120 tasks=4 gpus-per-task=1 cpus-per-gpu=2 mem-per-gpu=1024 hold=user array=yes array-throttle=2 exclusive=yes"
        );
        assert_eq!(Record::decode(&text).unwrap(), rec);
    }

    #[test]
    fn refuses_foreign_or_broken_records() {
        assert!(matches!(
            Record::decode("hadar:v2 gpus=1"),
            Err(RecordError::NotARecord(_))
        ));
        assert_eq!(Record::decode("hadar:v1 steps=3"), Err(RecordError::NoGpus));
        assert!(Record::decode("hadar:v1 gpus=1 array=no").is_err());
        assert!(Record::decode("hadar:v1 gpus=1 exclusive=yes exclusive=yes").is_err());
        assert!(matches!(
            Record::decode("hadar:v1 gpus=0"),
            Err(RecordError::Field(_))
        ));
        assert!(matches!(
            Record::decode("hadar:v1 gpus=2,v100:1"),
            Err(RecordError::Field(_))
        ));
        assert!(matches!(
            Record::decode("hadar:v1 gpus=1 gpus=2"),
            Err(RecordError::Field(_))
        ));
        assert!(matches!(
            Record::decode("hadar:v1 gpus=1 color=red"),
            Err(RecordError::Directive(_))
        ));
    }

    #[test]
    fn fail_open_marks_are_read_applied_and_stripped() {
        let plain = "hadar:v1 gpus=v100:2 steps=10";
        assert_eq!(FailOpenMark::of(plain), None);
        let releasing = FailOpenMark::Releasing(1700).apply(plain);
        assert_eq!(releasing, "hadar:v1 gpus=v100:2 steps=10 failing-open=1700");
        assert_eq!(
            FailOpenMark::of(&releasing),
            Some(FailOpenMark::Releasing(1700))
        );
        let released = FailOpenMark::Released(1701).apply(&releasing);
        assert_eq!(released, "hadar:v1 gpus=v100:2 steps=10 failed-open=1701");
        assert_eq!(FailOpenMark::strip(&released), plain);
        // The mark does not change the request; a malformed one is refused like any field.
        assert_eq!(
            Record::decode(&released).unwrap(),
            Record::decode(plain).unwrap()
        );
        assert!(matches!(
            Record::decode("hadar:v1 gpus=1 failed-open=soon"),
            Err(RecordError::Field(_))
        ));
    }

    fn arb_record() -> impl Strategy<Value = Record> {
        let types = prop::sample::subsequence(vec!["v100", "p100", "k80", "a100-80g"], 1..=3);
        let counts = prop_oneof![
            (1u32..1000).prop_map(|n| vec![GpuCount {
                gpu_type: None,
                count: n
            }]),
            (types, 1u32..64).prop_map(|(ts, n)| ts
                .into_iter()
                .map(|t| GpuCount {
                    gpu_type: Some(t.to_string()),
                    count: n
                })
                .collect()),
        ];
        let scope = prop_oneof![Just(Scope::PerJob), Just(Scope::PerNode)];
        let directives = (
            proptest::option::of("[a-z][a-z0-9_]{0,10}"),
            proptest::collection::vec(
                (prop::sample::select(vec!["v100", "k80"]), 0.001f64..1e6),
                0..2,
            ),
            proptest::option::of(1u64..=crate::directive::MAX_WORK),
            proptest::option::of(any::<bool>()),
            proptest::option::of(prop::sample::subsequence(
                vec!["v100", "p100", "k80"],
                1..=3,
            )),
            proptest::option::of((
                1.0f64..1e12,
                1e-3f64..1e4,
                1u32..4096,
                prop_oneof![Just(0.0), 1.0f64..1e9],
                1u32..2000,
                any::<bool>(),
            )),
        )
            .prop_map(|(job_type, hints, steps, may_fork, gpu_types, model)| {
                let mut throughput: Vec<ThroughputHint> = Vec::new();
                for (t, rate) in hints {
                    if !throughput.iter().any(|h| h.gpu_type == t) {
                        throughput.push(ThroughputHint {
                            gpu_type: t.to_string(),
                            rate,
                        });
                    }
                }
                JobDirectives {
                    job_type,
                    throughput,
                    steps,
                    epochs: None,
                    may_fork,
                    gpu_types: gpu_types.map(|v| v.into_iter().map(String::from).collect()),
                    model: model.map(|(params, gflops, batch, input, layers, amp)| {
                        crate::ModelTraits {
                            params,
                            forward_gflops_per_sample: gflops,
                            batch_size: batch,
                            input_bytes_per_sample: input,
                            layers_per_step: layers,
                            mixed_precision: amp,
                        }
                    }),
                    // The outer step's canonical form must read back as the same value.
                    outer: match steps.map(|s| s % 3) {
                        Some(0) => Some(crate::Outer::Mean),
                        Some(1) => Some(crate::Outer::Nesterov {
                            lr: 0.7,
                            momentum: 0.9,
                        }),
                        _ => None,
                    },
                    restart_s: steps.filter(|s| s % 2 == 1).map(|s| (s % 86_401) as u32),
                    tasks: steps.map(|s| (s % 5) as u32 + 1),
                    gpus_per_task: None,
                    cpus_per_gpu: steps.map(|s| s % 4 + 1),
                    mem_per_gpu_mb: steps.filter(|s| s % 3 == 0).map(|s| s + 1),
                    user_hold: steps.is_some_and(|s| s % 2 == 0),
                    array: steps.is_some_and(|s| s % 3 == 0),
                    array_throttle: steps.filter(|s| s % 3 == 0).map(|s| (s % 4) as u32 + 1),
                    exclusive: steps.is_some_and(|s| s % 7 == 0),
                }
            });
        (
            counts,
            scope,
            proptest::option::of(1u32..100),
            proptest::option::of(0u32..8),
            directives,
        )
            .prop_map(|(counts, scope, nodes, het_offset, directives)| Record {
                gpus: GpuRequest { scope, counts },
                nodes,
                het_offset,
                directives,
            })
    }

    proptest! {
        #[test]
        fn every_record_round_trips(rec in arb_record()) {
            prop_assert_eq!(Record::decode(&rec.encode()).unwrap(), rec);
        }

        #[test]
        fn decode_never_panics(s in "(hadar:v1 )?[a-z=:,0-9. \\-]{0,60}") {
            let _ = Record::decode(&s);
        }
    }
}
