//! Hadar directives: what a user tells Hadar about a job, in `#HADAR` lines of the batch script
//! or in a `--comment="hadar: ..."` submission option.
//!
//! Syntax (one or more whitespace-separated words per `#HADAR` line, or after `hadar:` in the
//! comment): `on`, `off`, and `key=value` with the keys of [`KEYS`]: `type`, `throughput`,
//! `steps`, `epochs`, `fork`, `gpu-types`, `model`, `outer` and `restart`. The same `key=value` words make up the directive
//! part of the stored record (see [`crate::record`]), so one parser serves both.

use std::fmt;

/// The keys a directive may set, in the order the record writes them: the one table of the
/// vocabulary (the parser, the record writer, the error messages and [`KEYS`] read it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirectiveKey {
    /// `type=`: the job type whose throughput profile hadar uses.
    Type,
    /// `throughput=`: per-type rate hints.
    Throughput,
    /// `steps=`: the steps the job runs.
    Steps,
    /// `epochs=`: the epochs the job runs.
    Epochs,
    /// `fork=`: whether HadarE may fork it.
    Fork,
    /// `gpu-types=`: the GPU types it may run on.
    GpuTypes,
    /// `model=`: its model's traits, for estimating its rates.
    Model,
    /// `outer=`: how its copies are consolidated.
    Outer,
    /// `restart=`: its own restart cost.
    Restart,
}

impl DirectiveKey {
    /// Every key, in the order the record writes them.
    pub const ALL: [DirectiveKey; 9] = [
        DirectiveKey::Type,
        DirectiveKey::Throughput,
        DirectiveKey::Steps,
        DirectiveKey::Epochs,
        DirectiveKey::Fork,
        DirectiveKey::GpuTypes,
        DirectiveKey::Model,
        DirectiveKey::Outer,
        DirectiveKey::Restart,
    ];

    /// The key as written, before its `=`.
    pub const fn as_str(self) -> &'static str {
        match self {
            DirectiveKey::Type => "type",
            DirectiveKey::Throughput => "throughput",
            DirectiveKey::Steps => "steps",
            DirectiveKey::Epochs => "epochs",
            DirectiveKey::Fork => "fork",
            DirectiveKey::GpuTypes => "gpu-types",
            DirectiveKey::Model => "model",
            DirectiveKey::Outer => "outer",
            DirectiveKey::Restart => "restart",
        }
    }

    /// The key written `word` (any case), if it is one.
    pub fn parse(word: &str) -> Option<DirectiveKey> {
        DirectiveKey::ALL
            .into_iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(word))
    }

    /// The key's value in `d` as the record writes it after `key=`; `None` when unset.
    pub fn value_in(self, d: &JobDirectives) -> Option<String> {
        match self {
            DirectiveKey::Type => d.job_type.clone(),
            DirectiveKey::Throughput => (!d.throughput.is_empty()).then(|| {
                let hints: Vec<String> = d
                    .throughput
                    .iter()
                    .map(|h| format!("{}:{}", h.gpu_type, h.rate))
                    .collect();
                hints.join(",")
            }),
            DirectiveKey::Steps => d.steps.map(|s| s.to_string()),
            DirectiveKey::Epochs => d.epochs.map(|e| e.to_string()),
            DirectiveKey::Fork => d.may_fork.map(|f| if f { "yes" } else { "no" }.to_string()),
            DirectiveKey::GpuTypes => d.gpu_types.as_ref().map(|t| t.join(",")),
            DirectiveKey::Model => d.model.as_ref().map(ToString::to_string),
            DirectiveKey::Outer => d.outer.as_ref().map(ToString::to_string),
            DirectiveKey::Restart => d.restart_s.map(|r| r.to_string()),
        }
    }
}

/// The keys a directive may set, as written, in the order the record writes them.
pub const KEYS: [&str; 9] = {
    let mut out = [""; 9];
    let mut i = 0;
    while i < out.len() {
        out[i] = DirectiveKey::ALL[i].as_str();
        i += 1;
    }
    out
};

/// The largest `restart=` accepted, in seconds: a day.
pub const MAX_RESTART_S: u32 = 86_400;

/// The words a directive line may hold, as an error lists them: `on, off, type=, ...`.
pub fn known_words() -> String {
    let keys: Vec<String> = KEYS.iter().map(|k| format!("{k}=")).collect();
    format!("on, off, {}", keys.join(", "))
}

/// Whether a job opted in to or out of Hadar explicitly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptChoice {
    /// `#HADAR on` or any other Hadar directive: manage this job.
    In,
    /// `#HADAR off`: never manage this job, even in a managed partition.
    Out,
}

/// A per-type throughput hint: the job does `rate` steps per second on one GPU of `gpu_type`.
#[derive(Clone, Debug, PartialEq)]
pub struct ThroughputHint {
    /// The GPU type.
    pub gpu_type: String,
    /// Steps per second; positive and finite.
    pub rate: f64,
}

/// What a job says about its model (`model=`), from which the daemon estimates its
/// throughput on each GPU type before it has run there (the estimator's job traits).
#[derive(Clone, Debug, PartialEq)]
pub struct ModelTraits {
    /// Trainable parameters (`params:25.6M`).
    pub params: f64,
    /// Forward-pass GFLOPs per sample (`gflops:4.1`).
    pub forward_gflops_per_sample: f64,
    /// Samples per step and worker (`batch:64`).
    pub batch_size: u32,
    /// Bytes copied from host to GPU per sample (`input:150K`; default 0).
    pub input_bytes_per_sample: f64,
    /// Layer invocations per forward pass (`layers:160`; default [`DEFAULT_LAYERS`]).
    pub layers_per_step: u32,
    /// Trains in mixed precision (`amp:yes`; default no).
    pub mixed_precision: bool,
}

/// Layers assumed when `model=` does not say (about a ResNet-50's count).
pub const DEFAULT_LAYERS: u32 = 50;

const MODEL_EXPECTED: &str = "params:N,gflops:X,batch:N[,input:BYTES][,layers:N][,amp:yes|no], e.g. params:25.6M,gflops:4.1,batch:64 (N may end in K, M or G)";

impl ModelTraits {
    /// Parses `params:25.6M,gflops:4.1,batch:64[,input:150K][,layers:160][,amp:yes]`.
    pub fn parse(value: &str) -> Option<ModelTraits> {
        let (mut params, mut gflops, mut batch) = (None, None, None);
        let (mut input, mut layers, mut amp) = (None, None, None);
        for item in value.split(',') {
            let (k, v) = item.split_once(':')?;
            let slot_taken = match k.to_ascii_lowercase().as_str() {
                "params" => params.replace(parse_scaled(v)?).is_some(),
                "gflops" => gflops
                    .replace(
                        v.parse::<f64>()
                            .ok()
                            .filter(|x| x.is_finite() && *x > 0.0)?,
                    )
                    .is_some(),
                "batch" => batch
                    .replace(
                        v.parse::<u32>()
                            .ok()
                            .filter(|b| (1..=1 << 20).contains(b))?,
                    )
                    .is_some(),
                "input" => input
                    .replace(if v == "0" { 0.0 } else { parse_scaled(v)? })
                    .is_some(),
                "layers" => layers
                    .replace(
                        v.parse::<u32>()
                            .ok()
                            .filter(|l| (1..=1 << 20).contains(l))?,
                    )
                    .is_some(),
                "amp" => amp
                    .replace(match v.to_ascii_lowercase().as_str() {
                        "yes" | "true" | "1" => true,
                        "no" | "false" | "0" => false,
                        _ => return None,
                    })
                    .is_some(),
                _ => return None,
            };
            if slot_taken {
                return None;
            }
        }
        Some(ModelTraits {
            params: params?,
            forward_gflops_per_sample: gflops?,
            batch_size: batch?,
            input_bytes_per_sample: input.unwrap_or(0.0),
            layers_per_step: layers.unwrap_or(DEFAULT_LAYERS),
            mixed_precision: amp.unwrap_or(false),
        })
    }
}

impl fmt::Display for ModelTraits {
    /// The canonical form the record stores (every field, plain numbers).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "params:{},gflops:{},batch:{},input:{},layers:{},amp:{}",
            self.params,
            self.forward_gflops_per_sample,
            self.batch_size,
            self.input_bytes_per_sample,
            self.layers_per_step,
            if self.mixed_precision { "yes" } else { "no" }
        )
    }
}

/// A positive count with an optional `K`, `M` or `G` suffix (powers of 1000), below 10^15.
fn parse_scaled(v: &str) -> Option<f64> {
    let (digits, scale) = match v.chars().last()? {
        'k' | 'K' => (&v[..v.len() - 1], 1e3),
        'm' | 'M' => (&v[..v.len() - 1], 1e6),
        'g' | 'G' | 'b' | 'B' => (&v[..v.len() - 1], 1e9),
        _ => (v, 1.0),
    };
    if digits.len() > 24 {
        return None;
    }
    let x = digits.parse::<f64>().ok()? * scale;
    (x.is_finite() && x > 0.0 && x < 1e15).then_some(x)
}

/// How a forked job's copies are consolidated after each round (`outer=`).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Outer {
    /// `outer=mean`: the copies' steps-weighted mean.
    Mean,
    /// `outer=nesterov[:LR:MU]`: an outer Nesterov-momentum step from the round's start
    /// along the mean's update (`hadar average --outer nesterov`).
    Nesterov {
        /// The outer learning rate, in `(0, 10]`.
        lr: f64,
        /// The outer momentum, in `[0, 1)`.
        momentum: f64,
    },
}

/// `outer=nesterov` without parameters: the pair the quality study in
/// docs/hadare-quality.md found best over both of its models.
pub const DEFAULT_NESTEROV: Outer = Outer::Nesterov {
    lr: 1.0,
    momentum: 0.5,
};

const OUTER_EXPECTED: &str =
    "mean, nesterov, or nesterov:LR:MU with LR in (0, 10] and MU in [0, 1), e.g. nesterov:1:0.5";

impl Outer {
    /// Parses `mean`, `nesterov` or `nesterov:LR:MU`.
    pub fn parse(value: &str) -> Option<Outer> {
        let lower = value.to_ascii_lowercase();
        let mut parts = lower.split(':');
        match (parts.next()?, parts.next(), parts.next(), parts.next()) {
            ("mean", None, None, None) => Some(Outer::Mean),
            ("nesterov", None, None, None) => Some(DEFAULT_NESTEROV),
            ("nesterov", Some(lr), Some(mu), None) => {
                let lr: f64 = lr.parse().ok()?;
                let momentum: f64 = mu.parse().ok()?;
                let ok = lr.is_finite()
                    && lr > 0.0
                    && lr <= 10.0
                    && momentum.is_finite()
                    && (0.0..1.0).contains(&momentum);
                ok.then_some(Outer::Nesterov { lr, momentum })
            }
            _ => None,
        }
    }
}

impl fmt::Display for Outer {
    /// The canonical form the record stores.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outer::Mean => f.write_str("mean"),
            Outer::Nesterov { lr, momentum } => write!(f, "nesterov:{lr}:{momentum}"),
        }
    }
}

/// Everything a job's Hadar directives say, apart from the opt-in/opt-out.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobDirectives {
    /// The job type (model name) whose throughput profile Hadar should use.
    pub job_type: Option<String>,
    /// Per-type throughput hints, overriding any profile.
    pub throughput: Vec<ThroughputHint>,
    /// Total training steps the job runs for.
    pub steps: Option<u64>,
    /// Total epochs the job runs for (when it counts in epochs rather than steps).
    pub epochs: Option<u64>,
    /// Whether Hadar may fork the job into copies on several GPU types (HadarE).
    pub may_fork: Option<bool>,
    /// The GPU types the job may run on; `None` means any type.
    pub gpu_types: Option<Vec<String>>,
    /// The job's model, for estimating its throughput before it has run (`model=`).
    pub model: Option<ModelTraits>,
    /// How its copies are consolidated when it runs forked (`outer=`); `None`: the
    /// daemon's `[fork] outer`.
    pub outer: Option<Outer>,
    /// Seconds the job loses to a checkpoint and reload when it is moved or resumed
    /// (`restart=`); `None`: the daemon's `[sidecar] restart_seconds`.
    pub restart_s: Option<u32>,
    /// The task count the user gave (`--ntasks`), kept in the job when hadar places it (an
    /// `srun` per task, per GPU, needs it). Set by the plugin from the job description, never
    /// from a `#HADAR` line.
    pub tasks: Option<u32>,
    /// GPUs per task (`--gpus-per-task`), given back to the job with its placement. Set by
    /// the plugin, never from a `#HADAR` line.
    pub gpus_per_task: Option<u32>,
    /// CPUs per GPU (`--cpus-per-gpu`), given back to the job with its placement. Set by
    /// the plugin, never from a `#HADAR` line.
    pub cpus_per_gpu: Option<u64>,
    /// Memory per GPU in MB (`--mem-per-gpu`), given back to the job with its placement.
    /// Set by the plugin, never from a `#HADAR` line.
    pub mem_per_gpu_mb: Option<u64>,
    /// The user submitted the job held (`sbatch --hold`): hadar leaves it alone until its
    /// user releases it. Set by the plugin, never from a `#HADAR` line.
    pub user_hold: bool,
    /// The job is a job array (`--array`): the record is shared by all its elements, which
    /// the daemon splits off and places one by one. Set by the plugin, never from a `#HADAR`
    /// line.
    pub array: bool,
    /// The array's `%N` throttle: at most N elements run (or are placed) at once.
    pub array_throttle: Option<u32>,
    /// The job asks for whole nodes (`--exclusive`): hadar plans it only onto nodes with no
    /// other job and plans no other job onto its nodes. Set by the plugin.
    pub exclusive: bool,
}

/// Where a directive was written, for error messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A `#HADAR` line of the batch script (1-based line number).
    ScriptLine(usize),
    /// The `--comment` option.
    Comment,
    /// The stored record in the job's admin comment.
    Record,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::ScriptLine(n) => write!(f, "#HADAR line {n} of the batch script"),
            Origin::Comment => f.write_str("--comment"),
            Origin::Record => f.write_str("the hadar record"),
        }
    }
}

/// Why directives were refused. Each message says where and what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DirectiveError {
    /// A word that is not a known directive.
    #[error("unknown directive `{word}` in {origin}; known: {}", known_words())]
    Unknown {
        /// Where.
        origin: Origin,
        /// The word.
        word: String,
    },
    /// A value that does not parse.
    #[error("malformed value `{value}` for `{key}` in {origin}; expected {expected}")]
    Malformed {
        /// Where.
        origin: Origin,
        /// The key.
        key: &'static str,
        /// The offending value.
        value: String,
        /// What a valid value looks like.
        expected: &'static str,
    },
    /// A key given twice.
    #[error("`{key}` given twice ({first} and {second}); give it once")]
    Duplicate {
        /// The key.
        key: &'static str,
        /// Where it was first given.
        first: Origin,
        /// Where it was given again.
        second: Origin,
    },
    /// Both `steps` and `epochs`.
    #[error("both steps= and epochs= given; give only one of them")]
    StepsAndEpochs,
    /// Both `on` and `off`, or `off` together with other directives.
    #[error("`off` cannot be combined with other Hadar directives ({origin}); remove one of them")]
    OffWithOthers {
        /// Where the conflicting word is.
        origin: Origin,
    },
}

/// The parsed directives of one job, with the place each key was set.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Directives {
    /// `Some(In)` if the job has any directive, `Some(Out)` for `off`, `None` if none at all.
    pub choice: Option<OptChoice>,
    /// The settings.
    pub job: JobDirectives,
    origins: Vec<(DirectiveKey, Origin)>,
    off_origin: Option<Origin>,
}

/// The largest `steps=`/`epochs=` value accepted: beyond it a job would never finish.
pub const MAX_WORK: u64 = 1 << 53;

impl Directives {
    /// Parses and adds the words of one directive line (the text after `#HADAR` or `hadar:`).
    pub fn add_words(&mut self, text: &str, origin: Origin) -> Result<(), DirectiveError> {
        for word in text.split_whitespace() {
            if word.starts_with('#') {
                break; // the rest of the line is a comment
            }
            self.add_word(word, &origin)?;
        }
        Ok(())
    }

    fn add_word(&mut self, word: &str, origin: &Origin) -> Result<(), DirectiveError> {
        let lower = word.to_ascii_lowercase();
        match lower.as_str() {
            "off" => {
                if self.choice == Some(OptChoice::In) {
                    return Err(DirectiveError::OffWithOthers {
                        origin: origin.clone(),
                    });
                }
                self.choice = Some(OptChoice::Out);
                self.off_origin = Some(origin.clone());
                return Ok(());
            }
            "on" => return self.opt_in(origin),
            _ => {}
        }
        let Some((key, value)) = word.split_once('=') else {
            return Err(DirectiveError::Unknown {
                origin: origin.clone(),
                word: crate::excerpt(word),
            });
        };
        let Some(key) = DirectiveKey::parse(key) else {
            return Err(DirectiveError::Unknown {
                origin: origin.clone(),
                word: crate::excerpt(word),
            });
        };
        if let Some((_, first)) = self.origins.iter().find(|(k, _)| *k == key) {
            return Err(DirectiveError::Duplicate {
                key: key.as_str(),
                first: first.clone(),
                second: origin.clone(),
            });
        }
        self.set(key, value, origin)
    }

    /// Sets `key` (not set before) to `value`, checked.
    fn set(
        &mut self,
        key: DirectiveKey,
        value: &str,
        origin: &Origin,
    ) -> Result<(), DirectiveError> {
        let malformed = |expected| DirectiveError::Malformed {
            origin: origin.clone(),
            key: key.as_str(),
            value: crate::excerpt(value),
            expected,
        };
        match key {
            DirectiveKey::Type => {
                if !is_name(value) {
                    return Err(malformed(
                        "a job type name (letters, digits, `-`, `_`, `.`, `/`)",
                    ));
                }
                self.job.job_type = Some(value.to_string());
            }
            DirectiveKey::Throughput => {
                self.job.throughput = parse_throughput(value).map_err(malformed)?
            }
            DirectiveKey::Steps | DirectiveKey::Epochs => {
                let n = parse_work(value)
                    .ok_or_else(|| malformed("a whole number between 1 and 2^53"))?;
                if key == DirectiveKey::Steps {
                    self.job.steps = Some(n);
                } else {
                    self.job.epochs = Some(n);
                }
                if self.job.steps.is_some() && self.job.epochs.is_some() {
                    return Err(DirectiveError::StepsAndEpochs);
                }
            }
            DirectiveKey::Fork => {
                self.job.may_fork = Some(match value.to_ascii_lowercase().as_str() {
                    "yes" | "true" | "1" => true,
                    "no" | "false" | "0" => false,
                    _ => return Err(malformed("yes or no")),
                });
            }
            DirectiveKey::GpuTypes => {
                self.job.gpu_types = Some(parse_gpu_types(value).map_err(malformed)?)
            }
            DirectiveKey::Model => {
                self.job.model =
                    Some(ModelTraits::parse(value).ok_or_else(|| malformed(MODEL_EXPECTED))?);
            }
            DirectiveKey::Outer => {
                self.job.outer =
                    Some(Outer::parse(value).ok_or_else(|| malformed(OUTER_EXPECTED))?);
            }
            DirectiveKey::Restart => {
                self.job.restart_s =
                    Some(parse_restart(value).ok_or_else(|| {
                        malformed("whole seconds from 0 to 86400, e.g. 120 or 120s")
                    })?);
            }
        }
        self.origins.push((key, origin.clone()));
        self.opt_in(origin)
    }

    fn opt_in(&mut self, origin: &Origin) -> Result<(), DirectiveError> {
        if self.choice == Some(OptChoice::Out) {
            return Err(DirectiveError::OffWithOthers {
                origin: self.off_origin.clone().unwrap_or_else(|| origin.clone()),
            });
        }
        self.choice = Some(OptChoice::In);
        Ok(())
    }
}

/// Whether `s` is a plausible job type name.
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

/// Parses a positive decimal work amount up to [`MAX_WORK`].
fn parse_work(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<u64>().ok().filter(|n| (1..=MAX_WORK).contains(n))
}

/// Reads the `#HADAR` lines of a batch script into `into`.
///
/// Like `sbatch` with `#SBATCH`, only the leading block of comment lines counts: reading stops
/// at the first line that is neither blank nor a `#` comment.
pub fn read_script(script: &str, into: &mut Directives) -> Result<(), DirectiveError> {
    for (i, line) in script.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() {
            continue;
        }
        if !trimmed.starts_with('#') {
            break;
        }
        if let Some(rest) = trimmed.strip_prefix("#HADAR") {
            if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
                // `#HADARX`: not our directive, like `#SBATCHX` is not sbatch's.
                continue;
            }
            into.add_words(rest, Origin::ScriptLine(i + 1))?;
            if rest.trim().is_empty() || rest.trim_start().starts_with('#') {
                into.opt_in(&Origin::ScriptLine(i + 1))?;
            }
        }
    }
    Ok(())
}

/// Reads the Hadar part of a job's `--comment` into `into`, if the comment is a Hadar one.
///
/// A Hadar comment is `hadar` alone or `hadar:` followed by directive words (`hadar` in any
/// case). Any other comment is not Hadar's business and is ignored.
pub fn read_comment(comment: &str, into: &mut Directives) -> Result<(), DirectiveError> {
    let trimmed = comment.trim();
    let Some(prefix) = trimmed.get(..5) else {
        return Ok(());
    };
    if !prefix.eq_ignore_ascii_case("hadar") {
        return Ok(());
    }
    let rest = &trimmed[5..];
    if rest.is_empty() {
        return into.opt_in(&Origin::Comment);
    }
    let Some(words) = rest.strip_prefix(':') else {
        return Ok(()); // e.g. "hadarized": someone else's comment
    };
    if words.trim().is_empty() {
        return into.opt_in(&Origin::Comment);
    }
    into.add_words(&words.replace(';', " "), Origin::Comment)
}

/// `TYPE:RATE[,TYPE:RATE...]` (`throughput=`), or what a valid value looks like.
fn parse_throughput(value: &str) -> Result<Vec<ThroughputHint>, &'static str> {
    let mut hints: Vec<ThroughputHint> = Vec::new();
    for item in value.split(',') {
        let (t, r) = item
            .split_once(':')
            .ok_or("TYPE:RATE[,TYPE:RATE...], e.g. v100:12.5,k80:3")?;
        let rate: f64 = r
            .parse()
            .map_err(|_| "TYPE:RATE with RATE a positive number")?;
        if !(crate::gpu::is_type_name(t) && rate.is_finite() && rate > 0.0) {
            return Err("TYPE:RATE with RATE a positive number");
        }
        if hints.iter().any(|h| h.gpu_type == t) {
            return Err("each GPU type once");
        }
        hints.push(ThroughputHint {
            gpu_type: t.to_string(),
            rate,
        });
    }
    Ok(hints)
}

/// `TYPE[,TYPE...]` (`gpu-types=`), each once, or what a valid value looks like.
fn parse_gpu_types(value: &str) -> Result<Vec<String>, &'static str> {
    let mut types: Vec<String> = Vec::new();
    for t in value.split(',') {
        if !crate::gpu::is_type_name(t) {
            return Err("a comma-separated list of GPU types, e.g. v100,p100");
        }
        if !types.iter().any(|u| u == t) {
            types.push(t.to_string());
        }
    }
    Ok(types)
}

/// `restart=` seconds: a whole number up to [`MAX_RESTART_S`], optionally ending in `s`.
fn parse_restart(value: &str) -> Option<u32> {
    let seconds = value.strip_suffix('s').unwrap_or(value);
    seconds.parse::<u32>().ok().filter(|s| *s <= MAX_RESTART_S)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn script(s: &str) -> Result<Directives, DirectiveError> {
        let mut d = Directives::default();
        read_script(s, &mut d).map(|()| d)
    }

    #[test]
    fn a_job_names_its_own_restart_cost_in_whole_seconds() {
        let d = script("#!/bin/bash\n#HADAR restart=120\n").unwrap();
        assert_eq!(d.job.restart_s, Some(120));
        let d = script("#!/bin/bash\n#HADAR restart=25s steps=10\n").unwrap();
        assert_eq!((d.job.restart_s, d.job.steps), (Some(25), Some(10)));
        for bad in [
            "restart=-1",
            "restart=1.5",
            "restart=86401",
            "restart=two",
            "restart=",
        ] {
            let e = script(&format!("#!/bin/bash\n#HADAR {bad}\n")).unwrap_err();
            assert!(
                e.to_string().contains("for `restart`") && e.to_string().contains("0 to 86400"),
                "{bad}: {e}"
            );
        }
        let e = script("#!/bin/bash\n#HADAR restart=10\n#HADAR restart=20\n").unwrap_err();
        assert!(e.to_string().contains("`restart` given twice"), "{e}");
    }

    #[test]
    fn reads_leading_hadar_lines() {
        let d = script(
            "#!/bin/bash\n#SBATCH --gres=gpu:2\n#HADAR type=resnet50 steps=1000\n\n#HADAR fork=yes gpu-types=v100,k80 # why\necho hi\n#HADAR epochs=3\n",
        )
        .unwrap();
        assert_eq!(d.choice, Some(OptChoice::In));
        assert_eq!(d.job.job_type.as_deref(), Some("resnet50"));
        assert_eq!(d.job.steps, Some(1000));
        assert_eq!(
            d.job.epochs, None,
            "directives after the first command are ignored"
        );
        assert_eq!(d.job.may_fork, Some(true));
        assert_eq!(
            d.job.gpu_types,
            Some(vec!["v100".to_string(), "k80".to_string()])
        );
    }

    #[test]
    fn bare_hadar_line_opts_in_and_off_opts_out() {
        assert_eq!(
            script("#!/bin/sh\n#HADAR\n").unwrap().choice,
            Some(OptChoice::In)
        );
        assert_eq!(
            script("#!/bin/sh\n#HADAR off\n").unwrap().choice,
            Some(OptChoice::Out)
        );
        assert_eq!(script("#!/bin/sh\n#HADARS x\n").unwrap().choice, None);
        assert_eq!(script("#!/bin/sh\necho\n").unwrap().choice, None);
    }

    #[test]
    fn errors_name_the_line_and_the_fix() {
        let e = script("#!/bin/sh\n#SBATCH -N1\n#HADAR stepz=4\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown directive `stepz=4` in #HADAR line 3 of the batch script; known: on, off, type=, throughput=, steps=, epochs=, fork=, gpu-types=, model=, outer=, restart="
        );
        let e = script("#!/bin/sh\n#HADAR steps=12k\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "malformed value `12k` for `steps` in #HADAR line 2 of the batch script; expected a whole number between 1 and 2^53"
        );
        assert!(matches!(
            script("#HADAR steps=0").unwrap_err(),
            DirectiveError::Malformed { key: "steps", .. }
        ));
        assert!(matches!(
            script("#HADAR fork=maybe").unwrap_err(),
            DirectiveError::Malformed { key: "fork", .. }
        ));
        assert!(matches!(
            script("#HADAR throughput=v100:-1").unwrap_err(),
            DirectiveError::Malformed { .. }
        ));
        assert!(matches!(
            script("#HADAR throughput=v100:1,v100:2").unwrap_err(),
            DirectiveError::Malformed { .. }
        ));
        assert_eq!(
            script("#HADAR steps=1 epochs=2").unwrap_err(),
            DirectiveError::StepsAndEpochs
        );
        assert!(matches!(
            script("#HADAR steps=1\n#HADAR steps=2").unwrap_err(),
            DirectiveError::Duplicate { key: "steps", .. }
        ));
        assert!(matches!(
            script("#HADAR off type=x").unwrap_err(),
            DirectiveError::OffWithOthers { .. }
        ));
        assert!(matches!(
            script("#HADAR type=x\n#HADAR off").unwrap_err(),
            DirectiveError::OffWithOthers { .. }
        ));
    }

    #[test]
    fn model_traits_parse_with_suffixes_and_defaults() {
        let d = script("#HADAR model=params:25.6M,gflops:4.1,batch:64,input:150K").unwrap();
        assert_eq!(
            d.job.model,
            Some(ModelTraits {
                params: 25.6e6,
                forward_gflops_per_sample: 4.1,
                batch_size: 64,
                input_bytes_per_sample: 150e3,
                layers_per_step: DEFAULT_LAYERS,
                mixed_precision: false,
            })
        );
        let m = ModelTraits::parse("batch:8,gflops:0.5,params:1.2G,layers:300,amp:yes").unwrap();
        assert_eq!(
            (m.params, m.layers_per_step, m.mixed_precision),
            (1.2e9, 300, true)
        );
        for bad in [
            "params:25M,gflops:4",                  // no batch
            "params:25M,gflops:4,batch:64,batch:8", // twice
            "params:25M,gflops:4,batch:64,color:red",
            "params:-1,gflops:4,batch:64",
            "params:25X,gflops:4,batch:64",
            "params:25M,gflops:inf,batch:64",
            "params:25M,gflops:4,batch:0",
            "params:25M,gflops:4,batch:64,amp:maybe",
        ] {
            let e = script(&format!("#HADAR model={bad}"))
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("malformed value")
                    && e.contains("for `model` in #HADAR line 1")
                    && e.contains("params:N,gflops:X,batch:N"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn outer_chooses_the_consolidation() {
        let outer = |v: &str| script(&format!("#HADAR fork=yes outer={v}")).map(|d| d.job.outer);
        assert_eq!(outer("mean").unwrap(), Some(Outer::Mean));
        assert_eq!(outer("Nesterov").unwrap(), Some(DEFAULT_NESTEROV));
        assert_eq!(
            outer("nesterov:0.7:0.9").unwrap(),
            Some(Outer::Nesterov {
                lr: 0.7,
                momentum: 0.9
            })
        );
        assert_eq!(script("#HADAR fork=yes").unwrap().job.outer, None);
        // The canonical form reads back as itself.
        for o in [Outer::Mean, DEFAULT_NESTEROV] {
            assert_eq!(Outer::parse(&o.to_string()), Some(o));
        }
        for bad in [
            "median",
            "nesterov:0:0.5",
            "nesterov:1:1",
            "nesterov:1",
            "nesterov:1:0.5:2",
            "nesterov:x:0",
            "nesterov:11:0",
            "nesterov:1:-0.1",
            "nesterov:nan:0",
        ] {
            let e = script(&format!("#!/bin/sh\n#HADAR outer={bad}"))
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with(&format!("malformed value `{bad}` for `outer` in #HADAR line 2 of the batch script; expected mean, nesterov, or nesterov:LR:MU")),
                "{e}"
            );
            assert!(!e.contains('\n'));
        }
    }

    #[test]
    fn throughput_hints_parse() {
        let d = script("#HADAR throughput=v100:12.5,k80:3").unwrap();
        assert_eq!(
            d.job.throughput,
            vec![
                ThroughputHint {
                    gpu_type: "v100".into(),
                    rate: 12.5
                },
                ThroughputHint {
                    gpu_type: "k80".into(),
                    rate: 3.0
                }
            ]
        );
    }

    #[test]
    fn comment_form() {
        let mut d = Directives::default();
        read_comment("hadar", &mut d).unwrap();
        assert_eq!(d.choice, Some(OptChoice::In));
        let mut d = Directives::default();
        read_comment("HADAR: type=bert;steps=50", &mut d).unwrap();
        assert_eq!(
            (d.job.job_type.as_deref(), d.job.steps),
            (Some("bert"), Some(50))
        );
        let mut d = Directives::default();
        read_comment("hadar:off", &mut d).unwrap();
        assert_eq!(d.choice, Some(OptChoice::Out));
        let mut d = Directives::default();
        read_comment("my notes about hadar", &mut d).unwrap();
        assert_eq!(d.choice, None);
        read_comment("hadarized", &mut d).unwrap();
        assert_eq!(d.choice, None);
        let mut d = Directives::default();
        assert!(matches!(
            read_comment("hadar: bogus", &mut d),
            Err(DirectiveError::Unknown {
                origin: Origin::Comment,
                ..
            })
        ));
    }

    #[test]
    fn script_and_comment_may_not_set_the_same_key() {
        let mut d = script("#HADAR steps=5").unwrap();
        let e = read_comment("hadar: steps=6", &mut d).unwrap_err();
        assert_eq!(
            e.to_string(),
            "`steps` given twice (#HADAR line 1 of the batch script and --comment); give it once"
        );
    }

    proptest! {
        #[test]
        fn script_parser_never_panics(s in "(#HADAR ?)?.{0,80}(\n(#HADAR|#SBATCH|#)? ?.{0,40}){0,5}") {
            let _ = script(&s);
        }

        #[test]
        fn word_parser_never_panics(words in proptest::collection::vec("(type|throughput|steps|epochs|fork|gpu-types|model|on|off|x)(=[a-z0-9:.,\\-]{0,12})?", 0..6)) {
            let mut d = Directives::default();
            let _ = d.add_words(&words.join(" "), Origin::Comment);
        }

        #[test]
        fn comment_parser_never_panics(s in "\\PC{0,60}") {
            let mut d = Directives::default();
            let _ = read_comment(&s, &mut d);
        }
    }
}
