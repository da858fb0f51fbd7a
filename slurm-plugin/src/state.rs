//! The plugin's loaded configuration and inventory, reloaded when slurmctld re-reads
//! slurm.conf.
//!
//! Slurm 22.05 calls no plugin function on `scontrol reconfigure` when `JobSubmitPlugins` is
//! unchanged, but it does re-read slurm.conf, which stamps `slurm_conf.last_update` (and
//! recomputes `hash_val`). Each `job_submit` compares that stamp, two integer reads, with the
//! one of the last load and reloads when it moved; so the config is read at `init` and on
//! every reconfigure, and never on the submission fast path otherwise.

use crate::bindings::slurm_conf;
use crate::log;
use hadar_request::{Config, ConfigLocation, Inventory};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// A usable configuration.
pub struct Loaded {
    /// The parsed hadar.toml.
    pub config: Config,
    /// The node GPUs from slurm.conf.
    pub inventory: Inventory,
    /// `plugin.notify_timeout_ms` as a duration.
    pub notify_timeout: Duration,
}

/// The slurm.conf stamp a load was made under, and its result (`None`: broken, pass through).
type Slot = Option<((i64, u32), Option<Arc<Loaded>>)>;

static STATE: RwLock<Slot> = RwLock::new(None);

/// The stamp of slurmctld's current reading of slurm.conf.
fn conf_stamp() -> (i64, u32) {
    // SAFETY: slurm_conf is slurmctld's global configuration; job_submit runs under the
    // config read lock, so it is not being rewritten while we read two scalars.
    unsafe {
        let conf = &slurm_conf;
        (conf.last_update, conf.hash_val)
    }
}

/// The current configuration, reloaded first if slurm.conf was re-read since the last load.
/// `None` means the configuration is broken (and was logged when loaded).
pub fn current() -> Option<Arc<Loaded>> {
    let stamp = conf_stamp();
    if let Ok(guard) = STATE.read()
        && let Some((loaded_stamp, loaded)) = guard.as_ref()
        && *loaded_stamp == stamp
    {
        return loaded.clone();
    }
    reload("reconfigure")
}

/// Forgets the loaded configuration.
pub fn clear() {
    if let Ok(mut guard) = STATE.write() {
        *guard = None;
    }
}

/// Loads the configuration and inventory now and logs the outcome; `why` names the trigger.
pub fn reload(why: &str) -> Option<Arc<Loaded>> {
    let stamp = conf_stamp();
    let slurm_conf_path = slurm_conf_path();
    let location = config_location(slurm_conf_path.as_deref());
    if let Some(warning) = location.warning() {
        log::info(&format!("hadar: {why}: {warning}"));
    }
    let config_path = location.path();
    let loaded = match load(config_path, slurm_conf_path.as_deref()) {
        Ok(l) => {
            log::info(&format!(
                "hadar: {why}: loaded {} (managed partitions: [{}]; {} nodes, GPU types: {}; sidecar socket {})",
                config_path.display(),
                l.config.slurm.managed_partitions.join(", "),
                l.inventory.nodes.len(),
                l.inventory.type_names().join(", "),
                l.config.sidecar.socket.display()
            ));
            Some(Arc::new(l))
        }
        Err(reason) => {
            log::error(&format!(
                "hadar: {why}: configuration unusable, every job passes through untouched: {reason}"
            ));
            None
        }
    };
    if let Ok(mut guard) = STATE.write() {
        *guard = Some((stamp, loaded.clone()));
    }
    loaded
}

/// The slurm.conf slurmctld is using.
fn slurm_conf_path() -> Option<PathBuf> {
    // SAFETY: as in conf_stamp; the field is NULL or a NUL-terminated path.
    let path = unsafe { crate::cstr::read(slurm_conf.slurm_conf) };
    path.map(PathBuf::from)
}

/// `$HADAR_CONFIG` if set (in slurmctld's environment), else `/etc/hadar/hadar.toml` (the
/// daemon's path), else an old `hadar.toml` beside slurm.conf; see [`ConfigLocation`].
fn config_location(slurm_conf_file: Option<&Path>) -> ConfigLocation {
    ConfigLocation::resolve(
        std::env::var_os("HADAR_CONFIG").map(PathBuf::from),
        slurm_conf_file,
        Path::exists,
    )
}

fn load(config_path: &Path, slurmctld_conf: Option<&Path>) -> Result<Loaded, String> {
    let config = Config::load(config_path).map_err(|e| e.to_string())?;
    let conf_path = config
        .slurm
        .slurm_conf
        .clone()
        .or_else(|| slurmctld_conf.map(Path::to_path_buf))
        .ok_or("slurmctld reports no slurm.conf path and slurm.slurm_conf is not set")?;
    let text = std::fs::read_to_string(&conf_path)
        .map_err(|e| format!("cannot read {}: {e}", conf_path.display()))?;
    let base = conf_path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let mut read_include = |p: &str| {
        let path = base.join(p);
        std::fs::read_to_string(&path).map_err(|e| e.to_string())
    };
    let inventory =
        Inventory::from_slurm_conf(&conf_path.display().to_string(), &text, &mut read_include)
            .map_err(|e| e.to_string())?;
    if inventory
        .nodes
        .iter()
        .all(|n| n.typed.is_empty() && n.untyped == 0)
    {
        return Err(format!(
            "{} defines no node with GPUs (Gres=gpu:...)",
            conf_path.display()
        ));
    }
    let notify_timeout = Duration::from_millis(config.plugin.notify_timeout_ms);
    Ok(Loaded {
        config,
        inventory,
        notify_timeout,
    })
}
