//! The Hadar configuration file (`hadar.toml`), shared by the job_submit plugin and the
//! sidecar daemon. This module reads the parts the plugin needs: `[slurm]`, `[plugin]` and
//! `[sidecar].socket`. Other tables and other `[sidecar]` keys belong to the daemon and are
//! left alone here; unknown keys in `[slurm]` and `[plugin]` are refused so that typos show.
//! The annotated reference file is `etc/hadar.toml`.

use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The parts of `hadar.toml` the plugin uses.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Config {
    /// How Hadar relates to the Slurm cluster.
    #[serde(default)]
    pub slurm: SlurmSection,
    /// Settings of the job_submit plugin itself.
    #[serde(default)]
    pub plugin: PluginSection,
    /// Settings of the sidecar daemon (only `socket` is read here).
    #[serde(default)]
    pub sidecar: SidecarSection,
}

/// `[slurm]`: which jobs Hadar manages and where the cluster's definition is.
#[derive(Clone, Debug, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SlurmSection {
    /// Partitions whose jobs Hadar manages unless they opt out.
    #[serde(default)]
    pub managed_partitions: Vec<String>,
    /// The partition jobs land in when they name none (slurm.conf's `Default=YES` one).
    pub default_partition: Option<String>,
    /// The slurm.conf to read node GPUs from; default: the one slurmctld was started with.
    pub slurm_conf: Option<PathBuf>,
}

/// `[plugin]`: settings of the job_submit plugin.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginSection {
    /// The most time the plugin spends notifying the sidecar, in milliseconds (1 to 1000).
    #[serde(default = "default_notify_timeout_ms")]
    pub notify_timeout_ms: u64,
    /// The most GPUs one job (or one node of a job) may ask for before it is called absurd.
    #[serde(default = "default_max_gpus_per_job")]
    pub max_gpus_per_job: u32,
}

impl Default for PluginSection {
    fn default() -> Self {
        PluginSection {
            notify_timeout_ms: default_notify_timeout_ms(),
            max_gpus_per_job: default_max_gpus_per_job(),
        }
    }
}

fn default_notify_timeout_ms() -> u64 {
    5
}
fn default_max_gpus_per_job() -> u32 {
    1024
}

/// `[sidecar]`: the daemon's settings; the plugin reads only where to notify it.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct SidecarSection {
    /// The daemon's Unix socket, which the plugin notifies of each new managed job.
    #[serde(default = "default_socket")]
    pub socket: PathBuf,
}

impl Default for SidecarSection {
    fn default() -> Self {
        SidecarSection {
            socket: default_socket(),
        }
    }
}

fn default_socket() -> PathBuf {
    PathBuf::from("/run/hadar/hadar.sock")
}

/// Why the configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The TOML is malformed or has wrong keys or types.
    #[error("{path}: {reason}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's message (names line and column).
        reason: String,
    },
    /// A value outside its allowed range.
    #[error("{path}: {key} = {value} is out of range; {expected}")]
    Range {
        /// The file.
        path: String,
        /// The key.
        key: &'static str,
        /// The value.
        value: String,
        /// The allowed range.
        expected: &'static str,
    },
}

/// The longest TOML parser message kept in a [`ConfigError::Parse`], in characters.
const MAX_REASON_CHARS: usize = 240;

/// A parser message as one line of bounded length: the TOML parser quotes the offending
/// source line, which in a hostile or corrupt file may be megabytes long or hold control
/// characters.
pub fn one_line(message: &str) -> String {
    let joined = message
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    crate::excerpt_of(&joined, MAX_REASON_CHARS)
}

impl Config {
    /// Parses configuration text; `path` is used in error messages only.
    pub fn parse(path: &str, text: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_string(),
            reason: one_line(&e.to_string()),
        })?;
        let p = &config.plugin;
        if !(1..=1000).contains(&p.notify_timeout_ms) {
            return Err(ConfigError::Range {
                path: path.to_string(),
                key: "plugin.notify_timeout_ms",
                value: p.notify_timeout_ms.to_string(),
                expected: "give 1 to 1000",
            });
        }
        if p.max_gpus_per_job == 0 {
            return Err(ConfigError::Range {
                path: path.to_string(),
                key: "plugin.max_gpus_per_job",
                value: "0".into(),
                expected: "give at least 1",
            });
        }
        Ok(config)
    }

    /// Reads and parses a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
        Config::parse(&shown, &text)
    }
}

/// Where the plugin and the daemon read `hadar.toml` unless told otherwise.
pub const DEFAULT_PATH: &str = "/etc/hadar/hadar.toml";

/// Which file the plugin reads, and why (said in slurmctld's log).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigLocation {
    /// `$HADAR_CONFIG` in slurmctld's environment.
    Env(PathBuf),
    /// [`DEFAULT_PATH`]; `ignored` is a `hadar.toml` beside slurm.conf that is no longer
    /// read (the admin should remove it, lest someone edit the wrong copy).
    Default {
        /// The file read.
        path: PathBuf,
        /// The old copy beside slurm.conf, present but not read.
        ignored: Option<PathBuf>,
    },
    /// The old place, `hadar.toml` beside slurm.conf, read because [`DEFAULT_PATH`] does
    /// not exist: sites set up before the two programs shared one path keep working (and
    /// are told to move the file).
    BesideSlurmConf(PathBuf),
}

impl ConfigLocation {
    /// Decides which file to read: `$HADAR_CONFIG` (`env`) if set; else [`DEFAULT_PATH`]
    /// if it exists or the old place does not; else `hadar.toml` beside `slurm_conf`.
    /// `exists` is asked about at most two paths (no reading; the plugin calls this at load
    /// and reconfigure only).
    pub fn resolve(
        env: Option<PathBuf>,
        slurm_conf: Option<&Path>,
        exists: impl Fn(&Path) -> bool,
    ) -> ConfigLocation {
        if let Some(p) = env.filter(|p| !p.as_os_str().is_empty()) {
            return ConfigLocation::Env(p);
        }
        let default = PathBuf::from(DEFAULT_PATH);
        let old = slurm_conf
            .and_then(Path::parent)
            .map(|d| d.join("hadar.toml"))
            .filter(|p| *p != default && exists(p));
        match old {
            Some(old) if !exists(&default) => ConfigLocation::BesideSlurmConf(old),
            ignored => ConfigLocation::Default {
                path: default,
                ignored,
            },
        }
    }

    /// The file to read.
    pub fn path(&self) -> &Path {
        match self {
            ConfigLocation::Env(p) | ConfigLocation::BesideSlurmConf(p) => p,
            ConfigLocation::Default { path, .. } => path,
        }
    }

    /// A warning for the log when the file is at the old place or an old copy lingers.
    pub fn warning(&self) -> Option<String> {
        match self {
            ConfigLocation::BesideSlurmConf(p) => Some(format!(
                "reading {} from its old place; move it to {DEFAULT_PATH}, where hadar serve and hadar check-config read it too",
                p.display()
            )),
            ConfigLocation::Default {
                ignored: Some(old), ..
            } => Some(format!(
                "{} is not read ({DEFAULT_PATH} is); remove it so that nobody edits the wrong copy",
                old.display()
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_all_keys_and_ignores_the_daemons_tables() {
        let c = Config::parse(
            "h.toml",
            r#"
            [slurm]
            managed_partitions = ["gpu"]
            default_partition = "gpu"
            [plugin]
            notify_timeout_ms = 5
            max_gpus_per_job = 64
            [sidecar]
            socket = "/tmp/x.sock"
            round_seconds = 360
            [policy]
            name = "hadar"
            "#,
        )
        .unwrap();
        assert_eq!(c.slurm.managed_partitions, vec!["gpu"]);
        assert_eq!(c.slurm.default_partition.as_deref(), Some("gpu"));
        assert_eq!(c.plugin.notify_timeout_ms, 5);
        assert_eq!(c.plugin.max_gpus_per_job, 64);
        assert_eq!(c.sidecar.socket, PathBuf::from("/tmp/x.sock"));
    }

    #[test]
    fn the_documented_example_file_parses() {
        let c = Config::parse("etc/hadar.toml", include_str!("../../../etc/hadar.toml")).unwrap();
        assert_eq!(c.slurm.managed_partitions, vec!["gpu"]);
        assert_eq!(
            c.plugin,
            PluginSection::default(),
            "the example states the defaults"
        );
        assert_eq!(
            c.sidecar,
            SidecarSection::default(),
            "the example states the defaults"
        );
    }

    #[test]
    fn empty_file_gives_defaults() {
        let c = Config::parse("h.toml", "").unwrap();
        assert!(c.slurm.managed_partitions.is_empty());
        assert_eq!(c.plugin, PluginSection::default());
    }

    #[test]
    fn typos_and_bad_values_are_refused_with_the_place() {
        let e = Config::parse("h.toml", "[slurm]\nmanaged_partition = [\"gpu\"]\n").unwrap_err();
        assert!(e.to_string().starts_with("h.toml: "), "{e}");
        assert!(e.to_string().contains("managed_partition"), "{e}");
        assert!(e.to_string().contains("line 2"), "{e}");
        let e = Config::parse("h.toml", "[plugin]\nnotify_timeout_ms = 0\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "h.toml: plugin.notify_timeout_ms = 0 is out of range; give 1 to 1000"
        );
        let e = Config::load(Path::new("/nonexistent/hadar.toml")).unwrap_err();
        assert!(matches!(e, ConfigError::Read { .. }));
    }

    #[test]
    fn the_plugin_reads_the_daemons_path_and_falls_back_to_the_old_place() {
        let conf = Path::new("/etc/slurm/slurm.conf");
        let old = PathBuf::from("/etc/slurm/hadar.toml");
        let present =
            |list: &'static [&'static str]| move |p: &Path| list.iter().any(|l| Path::new(l) == p);
        let env = ConfigLocation::resolve(
            Some("/x/h.toml".into()),
            Some(conf),
            present(&[DEFAULT_PATH]),
        );
        assert_eq!(env, ConfigLocation::Env("/x/h.toml".into()));
        let both = ConfigLocation::resolve(
            None,
            Some(conf),
            present(&[DEFAULT_PATH, "/etc/slurm/hadar.toml"]),
        );
        assert_eq!(both.path(), Path::new(DEFAULT_PATH));
        assert!(
            both.warning()
                .unwrap()
                .contains("/etc/slurm/hadar.toml is not read")
        );
        let only_old =
            ConfigLocation::resolve(None, Some(conf), present(&["/etc/slurm/hadar.toml"]));
        assert_eq!(only_old, ConfigLocation::BesideSlurmConf(old));
        assert!(
            only_old
                .warning()
                .unwrap()
                .contains("move it to /etc/hadar/hadar.toml")
        );
        let neither = ConfigLocation::resolve(Some("".into()), Some(conf), present(&[]));
        assert_eq!(neither.path(), Path::new(DEFAULT_PATH));
        assert_eq!(neither.warning(), None);
        let new_only = ConfigLocation::resolve(None, None, present(&[DEFAULT_PATH]));
        assert_eq!(new_only.warning(), None);
    }
}
