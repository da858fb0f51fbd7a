//! GPU requests: reading them out of the TRES strings Slurm puts in a job description, and
//! stripping them so that Slurm itself never allocates GPUs for a Hadar-managed job.
//!
//! `sbatch` turns `--gres=gpu:2` and `--gpus-per-node=2` into `tres_per_node = "gres:gpu:2"`
//! and `--gpus=v100:3,k80:1` into `tres_per_job = "gres:gpu:v100:3,gres:gpu:k80:1"`; other
//! GRES (`--gres=mps:10`) share the same comma-separated field and must survive stripping.

use std::fmt;

/// Whether the counts of a [`GpuRequest`] are for the whole job or for each of its nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// `--gpus=...`: counts for the whole job, spread over its nodes as the scheduler likes.
    PerJob,
    /// `--gres=gpu:...` or `--gpus-per-node=...`: counts on every node of the job.
    PerNode,
}

/// One count of a GPU request: `count` GPUs of `gpu_type`, or of any type if `None`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GpuCount {
    /// The GPU type name as Slurm's gres.conf spells it (`v100`), or `None` for "any type".
    pub gpu_type: Option<String>,
    /// How many GPUs; never zero in a parsed request.
    pub count: u32,
}

/// A job's GPU request: either all counts typed, or a single untyped count.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GpuRequest {
    /// Whether the counts are per job or per node.
    pub scope: Scope,
    /// The counts; typed counts name distinct types, an untyped request has exactly one count.
    pub counts: Vec<GpuCount>,
}

impl GpuRequest {
    /// The total number of GPUs per scope unit (per job or per node).
    pub fn total(&self) -> u64 {
        self.counts.iter().map(|c| u64::from(c.count)).sum()
    }

    /// Whether the request names GPU types (as opposed to "any type").
    pub fn is_typed(&self) -> bool {
        self.counts.iter().any(|c| c.gpu_type.is_some())
    }
}

impl fmt::Display for GpuRequest {
    /// The counts in `--gpus` syntax: `4` or `v100:2,k80:1`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, c) in self.counts.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match &c.gpu_type {
                Some(t) => write!(f, "{t}:{}", c.count)?,
                None => write!(f, "{}", c.count)?,
            }
        }
        Ok(())
    }
}

/// Why a GPU request was refused. Each message names the option and says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpuRequestError {
    /// A count that is not a plain decimal number.
    #[error(
        "malformed GPU count `{text}` in {option}; give a whole number, e.g. gpu:2 or gpu:v100:2"
    )]
    MalformedCount {
        /// The option the count came from (`--gres/--gpus-per-node`).
        option: &'static str,
        /// The offending text.
        text: String,
    },
    /// A type name with characters Slurm never uses in type names.
    #[error(
        "malformed GPU type `{text}` in {option}; type names use letters, digits, `-`, `_` and `.`"
    )]
    MalformedType {
        /// The option the type came from.
        option: &'static str,
        /// The offending text.
        text: String,
    },
    /// A zero count.
    #[error(
        "zero GPUs requested in {option}; a Hadar-managed job needs at least 1 GPU (or add `#HADAR off`)"
    )]
    ZeroCount {
        /// The option the count came from.
        option: &'static str,
    },
    /// More GPUs than any sensible job asks for.
    #[error(
        "{count} GPUs requested in {option} is more than the limit of {limit}; ask for fewer GPUs"
    )]
    Absurd {
        /// The option the count came from.
        option: &'static str,
        /// The requested count.
        count: u64,
        /// The configured limit (`plugin.max_gpus_per_job`).
        limit: u32,
    },
    /// The same type twice in one request.
    #[error("GPU type `{gpu_type}` appears twice in {option}; give each type once")]
    DuplicateType {
        /// The option.
        option: &'static str,
        /// The repeated type.
        gpu_type: String,
    },
    /// Typed and untyped counts mixed in one request.
    #[error("{option} mixes typed and untyped GPU counts; give either gpu:N or gpu:TYPE:N entries")]
    MixedTyping {
        /// The option.
        option: &'static str,
    },
    /// GPUs requested both per job and per node.
    #[error(
        "GPUs requested both with --gpus and with --gres/--gpus-per-node; use only one of them"
    )]
    BothScopes,
    /// A GPU option Hadar cannot honour.
    #[error(
        "{option} is not supported for Hadar-managed jobs; use --gpus=N or --gres=gpu:N instead"
    )]
    Unsupported {
        /// The option.
        option: &'static str,
    },
}

/// Human names of the options that fill each TRES field, for error messages.
pub const PER_JOB_OPTION: &str = "--gpus";
/// See [`PER_JOB_OPTION`].
pub const PER_NODE_OPTION: &str = "--gres/--gpus-per-node";
/// See [`PER_JOB_OPTION`].
pub const PER_SOCKET_OPTION: &str = "--gpus-per-socket";
/// See [`PER_JOB_OPTION`].
pub const PER_TASK_OPTION: &str = "--gpus-per-task";
/// See [`PER_JOB_OPTION`].
pub const CPUS_PER_GPU_OPTION: &str = "--cpus-per-gpu";
/// See [`PER_JOB_OPTION`].
pub const MEM_PER_GPU_OPTION: &str = "--mem-per-gpu";

/// Whether `s` is a valid GPU type name (the characters Slurm accepts in gres.conf `Type=`).
pub fn is_type_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Splits one TRES field into its GPU entries and everything else.
///
/// Returns the parsed GPU counts of that field (empty if it has no GPU entry) and the other
/// entries joined back with commas (`None` if nothing is left), ready to be written back.
/// Entries are `gres:gpu[:TYPE][:COUNT]`, also accepted without the `gres:` prefix.
pub fn split_field(
    field: Option<&str>,
    option: &'static str,
    max_gpus: u32,
) -> Result<(Vec<GpuCount>, Option<String>), GpuRequestError> {
    let Some(field) = field else {
        return Ok((Vec::new(), None));
    };
    let mut counts: Vec<GpuCount> = Vec::new();
    let mut others: Vec<&str> = Vec::new();
    for entry in field.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let body = entry
            .strip_prefix("gres:")
            .or_else(|| entry.strip_prefix("gres/"))
            .unwrap_or(entry);
        let rest = if body == "gpu" {
            Some("")
        } else {
            body.strip_prefix("gpu:")
        };
        match rest {
            Some(rest) => counts.push(parse_entry(rest, option, max_gpus)?),
            None => others.push(entry),
        }
    }
    let typed = counts.iter().filter(|c| c.gpu_type.is_some()).count();
    if typed != 0 && typed != counts.len() || typed == 0 && counts.len() > 1 {
        return Err(GpuRequestError::MixedTyping { option });
    }
    // A set, not a scan of the earlier entries: a field may hold thousands of entries, and a
    // quadratic check of a hostile one would stall slurmctld's submission path.
    let mut seen = std::collections::HashSet::new();
    for c in &counts {
        if let Some(t) = &c.gpu_type
            && !seen.insert(t.as_str())
        {
            return Err(GpuRequestError::DuplicateType {
                option,
                gpu_type: t.clone(),
            });
        }
    }
    let total: u64 = counts.iter().map(|c| u64::from(c.count)).sum();
    if total > u64::from(max_gpus) {
        return Err(GpuRequestError::Absurd {
            option,
            count: total,
            limit: max_gpus,
        });
    }
    let rest = (!others.is_empty()).then(|| others.join(","));
    Ok((counts, rest))
}

/// Parses what follows `gpu:` in one entry: `N`, `TYPE`, `TYPE:N` (or nothing, meaning 1).
fn parse_entry(
    rest: &str,
    option: &'static str,
    max_gpus: u32,
) -> Result<GpuCount, GpuRequestError> {
    let (gpu_type, count_text) = match rest.rsplit_once(':') {
        Some((t, n)) => (Some(t), Some(n)),
        None if rest.is_empty() => (None, None),
        None if rest.bytes().next().is_some_and(|b| b.is_ascii_digit()) => (None, Some(rest)),
        None => (Some(rest), None),
    };
    if let Some(t) = gpu_type
        && !is_type_name(t)
    {
        return Err(GpuRequestError::MalformedType {
            option,
            text: crate::excerpt(t),
        });
    }
    let count = match count_text {
        None => 1,
        Some(n) => parse_count(n, option, max_gpus)?,
    };
    Ok(GpuCount {
        gpu_type: gpu_type.map(str::to_string),
        count,
    })
}

/// Parses a decimal GPU count, refusing zero, signs, suffixes and counts over `max_gpus`.
fn parse_count(text: &str, option: &'static str, max_gpus: u32) -> Result<u32, GpuRequestError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(GpuRequestError::MalformedCount {
            option,
            text: crate::excerpt(text),
        });
    }
    let digits = text.trim_start_matches('0');
    // Anything longer than 19 digits overflows u64; it is absurd, not malformed.
    let value: u64 = if digits.len() > 19 {
        u64::MAX
    } else {
        digits.parse().unwrap_or(0)
    };
    if value == 0 {
        return Err(GpuRequestError::ZeroCount { option });
    }
    if value > u64::from(max_gpus) {
        return Err(GpuRequestError::Absurd {
            option,
            count: value,
            limit: max_gpus,
        });
    }
    u32::try_from(value).map_err(|_| GpuRequestError::Absurd {
        option,
        count: value,
        limit: max_gpus,
    })
}

/// The GPU-related TRES fields of a job description.
#[derive(Clone, Copy, Debug, Default)]
pub struct TresFields<'a> {
    /// `tres_per_job` (`--gpus`).
    pub per_job: Option<&'a str>,
    /// `tres_per_node` (`--gres`, `--gpus-per-node`).
    pub per_node: Option<&'a str>,
    /// `tres_per_socket` (`--gpus-per-socket`).
    pub per_socket: Option<&'a str>,
    /// `tres_per_task` (`--gpus-per-task`).
    pub per_task: Option<&'a str>,
    /// `cpus_per_tres` (`--cpus-per-gpu`).
    pub cpus_per_tres: Option<&'a str>,
    /// `mem_per_tres` (`--mem-per-gpu`).
    pub mem_per_tres: Option<&'a str>,
}

/// A job's GPU request read out of its TRES fields, and the fields without it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtractedGpus {
    /// The request, or `None` if the job asks for no GPU.
    pub request: Option<GpuRequest>,
    /// `tres_per_job` with GPU entries removed (`None` if empty).
    pub per_job_rest: Option<String>,
    /// `tres_per_node` with GPU entries removed (`None` if empty).
    pub per_node_rest: Option<String>,
}

/// Reads the GPU request of a job out of its TRES fields.
///
/// Refuses per-socket and per-task GPU counts and per-GPU CPU or memory amounts (Hadar places
/// whole GPUs per job or per node; once the GPU request is stripped, Slurm would reject the
/// per-GPU amounts anyway), and a request given both per job and per node.
pub fn extract(fields: &TresFields<'_>, max_gpus: u32) -> Result<ExtractedGpus, GpuRequestError> {
    for (value, option) in [
        (fields.per_socket, PER_SOCKET_OPTION),
        (fields.per_task, PER_TASK_OPTION),
        (fields.cpus_per_tres, CPUS_PER_GPU_OPTION),
        (fields.mem_per_tres, MEM_PER_GPU_OPTION),
    ] {
        if value.is_some_and(mentions_gpu) {
            return Err(GpuRequestError::Unsupported { option });
        }
    }
    let (job_counts, per_job_rest) = split_field(fields.per_job, PER_JOB_OPTION, max_gpus)?;
    let (node_counts, per_node_rest) = split_field(fields.per_node, PER_NODE_OPTION, max_gpus)?;
    let request = match (job_counts.is_empty(), node_counts.is_empty()) {
        (true, true) => None,
        (false, false) => return Err(GpuRequestError::BothScopes),
        (false, true) => Some(GpuRequest {
            scope: Scope::PerJob,
            counts: job_counts,
        }),
        (true, false) => Some(GpuRequest {
            scope: Scope::PerNode,
            counts: node_counts,
        }),
    };
    Ok(ExtractedGpus {
        request,
        per_job_rest,
        per_node_rest,
    })
}

/// The per-GPU amount of a `cpus_per_tres` or `mem_per_tres` field (`--cpus-per-gpu=N`,
/// `--mem-per-gpu=M`): `gres:gpu:N`, `gres/gpu:N` or `gres/gpu=N` (memory in MB, or with
/// a K/M/G/T suffix). `None` when the field names no GPU; an error for anything else
/// (another GRES beside it, a typed or unreadable amount), naming `option`.
pub fn per_gpu_amount(
    field: Option<&str>,
    option: &'static str,
) -> Result<Option<u64>, GpuRequestError> {
    let Some(field) = field.filter(|f| mentions_gpu(f)) else {
        return Ok(None);
    };
    let unsupported = GpuRequestError::Unsupported { option };
    let [entry] = field.split(',').map(str::trim).collect::<Vec<_>>()[..] else {
        return Err(unsupported);
    };
    let value = ["gres:gpu:", "gres/gpu:", "gres/gpu=", "gpu:", "gpu="]
        .iter()
        .find_map(|p| entry.strip_prefix(p))
        .ok_or(GpuRequestError::Unsupported { option })?;
    let (digits, unit) = value.split_at(
        value
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(value.len()),
    );
    let scale: u64 = match unit {
        "" | "M" | "m" => 1,
        "G" | "g" => 1024,
        "T" | "t" => 1024 * 1024,
        _ => return Err(unsupported),
    };
    match digits.parse::<u64>() {
        Ok(n) if n > 0 => n.checked_mul(scale).map(Some).ok_or(unsupported),
        _ => Err(unsupported),
    }
}

/// Whether a TRES field has a GPU entry (`gres:gpu`, `gres:gpu:...`, `gpu:...`).
pub fn mentions_gpu(field: &str) -> bool {
    field.split(',').map(str::trim).any(|e| {
        let body = e
            .strip_prefix("gres:")
            .or_else(|| e.strip_prefix("gres/"))
            .unwrap_or(e);
        body == "gpu" || body.starts_with("gpu:") || body.starts_with("gpu=")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn typed(t: &str, n: u32) -> GpuCount {
        GpuCount {
            gpu_type: Some(t.into()),
            count: n,
        }
    }
    fn any(n: u32) -> GpuCount {
        GpuCount {
            gpu_type: None,
            count: n,
        }
    }
    fn node(field: &str) -> Result<ExtractedGpus, GpuRequestError> {
        extract(
            &TresFields {
                per_node: Some(field),
                ..Default::default()
            },
            64,
        )
    }

    #[test]
    fn untyped_gres_is_a_per_node_count() {
        let got = node("gres:gpu:2").unwrap();
        assert_eq!(
            got.request,
            Some(GpuRequest {
                scope: Scope::PerNode,
                counts: vec![any(2)]
            })
        );
        assert_eq!(got.per_node_rest, None);
    }

    #[test]
    fn typed_gres_and_bare_type_mean_count_one() {
        assert_eq!(
            node("gres:gpu:v100:3").unwrap().request.unwrap().counts,
            vec![typed("v100", 3)]
        );
        assert_eq!(
            node("gres:gpu:k80").unwrap().request.unwrap().counts,
            vec![typed("k80", 1)]
        );
        assert_eq!(
            node("gres:gpu").unwrap().request.unwrap().counts,
            vec![any(1)]
        );
        assert_eq!(node("gpu:2").unwrap().request.unwrap().counts, vec![any(2)]);
    }

    #[test]
    fn other_gres_survive_stripping() {
        let got = node("gres:mps:100,gres:gpu:v100:2,license:x").unwrap();
        assert_eq!(got.request.unwrap().counts, vec![typed("v100", 2)]);
        assert_eq!(got.per_node_rest.as_deref(), Some("gres:mps:100,license:x"));
    }

    #[test]
    fn per_job_multi_type_request() {
        let got = extract(
            &TresFields {
                per_job: Some("gres:gpu:v100:3,gres:gpu:k80:1"),
                ..Default::default()
            },
            64,
        )
        .unwrap();
        let req = got.request.unwrap();
        assert_eq!(req.scope, Scope::PerJob);
        assert_eq!(req.counts, vec![typed("v100", 3), typed("k80", 1)]);
        assert_eq!(req.total(), 4);
        assert_eq!(req.to_string(), "v100:3,k80:1");
    }

    #[test]
    fn bad_counts_are_refused_with_their_reason() {
        assert_eq!(
            node("gres:gpu:0"),
            Err(GpuRequestError::ZeroCount {
                option: PER_NODE_OPTION
            })
        );
        assert!(matches!(
            node("gres:gpu:v100:2x"),
            Err(GpuRequestError::MalformedCount { .. })
        ));
        assert!(matches!(
            node("gres:gpu:v100:-1"),
            Err(GpuRequestError::MalformedCount { .. })
        ));
        assert!(matches!(
            node("gres:gpu:1000"),
            Err(GpuRequestError::Absurd { count: 1000, .. })
        ));
        assert!(matches!(
            node("gres:gpu:99999999999999999999999"),
            Err(GpuRequestError::Absurd {
                count: u64::MAX,
                ..
            })
        ));
        assert!(matches!(
            node("gres:gpu:v1/00:1"),
            Err(GpuRequestError::MalformedType { .. })
        ));
        assert!(matches!(
            node("gres:gpu:v100:40,gres:gpu:k80:40"),
            Err(GpuRequestError::Absurd { count: 80, .. })
        ));
    }

    #[test]
    fn inconsistent_requests_are_refused() {
        assert!(matches!(
            node("gres:gpu:2,gres:gpu:v100:1"),
            Err(GpuRequestError::MixedTyping { .. })
        ));
        assert!(matches!(
            node("gres:gpu:v100:2,gres:gpu:v100:1"),
            Err(GpuRequestError::DuplicateType { .. })
        ));
        let both = TresFields {
            per_job: Some("gres:gpu:2"),
            per_node: Some("gres:gpu:1"),
            ..Default::default()
        };
        assert_eq!(extract(&both, 64), Err(GpuRequestError::BothScopes));
        let per_task = TresFields {
            per_task: Some("gres:gpu:1"),
            ..Default::default()
        };
        assert_eq!(
            extract(&per_task, 64),
            Err(GpuRequestError::Unsupported {
                option: PER_TASK_OPTION
            })
        );
        let cpus = TresFields {
            per_node: Some("gres:gpu:1"),
            cpus_per_tres: Some("gres:gpu:4"),
            ..Default::default()
        };
        assert_eq!(
            extract(&cpus, 64),
            Err(GpuRequestError::Unsupported {
                option: CPUS_PER_GPU_OPTION
            })
        );
    }

    #[test]
    fn per_gpu_amounts_read_in_every_releases_form() {
        for f in ["gres:gpu:2", "gres/gpu:2", "gres/gpu=2"] {
            assert_eq!(per_gpu_amount(Some(f), CPUS_PER_GPU_OPTION), Ok(Some(2)));
        }
        assert_eq!(
            per_gpu_amount(Some("gres/gpu:2G"), MEM_PER_GPU_OPTION),
            Ok(Some(2048))
        );
        assert_eq!(per_gpu_amount(None, MEM_PER_GPU_OPTION), Ok(None));
        assert_eq!(
            per_gpu_amount(Some("gres:mps:2"), MEM_PER_GPU_OPTION),
            Ok(None)
        );
        for bad in [
            "gres:gpu:v100:2",
            "gres:gpu:0",
            "gres:gpu:2,gres:mps:1",
            "gres:gpu:x",
        ] {
            assert_eq!(
                per_gpu_amount(Some(bad), CPUS_PER_GPU_OPTION),
                Err(GpuRequestError::Unsupported {
                    option: CPUS_PER_GPU_OPTION
                }),
                "{bad}"
            );
        }
    }

    #[test]
    fn no_gpu_fields_means_no_request() {
        let got = extract(
            &TresFields {
                per_node: Some("gres:mps:10"),
                ..Default::default()
            },
            64,
        )
        .unwrap();
        assert_eq!(got.request, None);
        assert_eq!(got.per_node_rest.as_deref(), Some("gres:mps:10"));
    }

    proptest! {
        #[test]
        fn extract_never_panics(a in ".{0,40}", b in "(gres:)?gpu(:[a-z0-9:,]{0,12})?(,[a-z:0-9]{0,8}){0,3}") {
            let _ = extract(&TresFields { per_job: Some(&a), per_node: Some(&b), ..Default::default() }, 1024);
            let _ = extract(&TresFields { per_node: Some(&a), per_task: Some(&b), ..Default::default() }, 1024);
        }

        #[test]
        fn parsed_counts_are_positive_and_within_limit(field in "(gres:gpu(:(v100|k80|[0-9]{1,3}))?(:[0-9]{1,4})?,?){1,4}") {
            if let Ok(got) = extract(&TresFields { per_node: Some(&field), ..Default::default() }, 128) {
                if let Some(req) = got.request {
                    prop_assert!(req.counts.iter().all(|c| c.count > 0));
                    prop_assert!(req.total() <= 128);
                }
            }
        }
    }
}
