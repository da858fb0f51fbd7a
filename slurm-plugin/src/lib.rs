//! `job_submit/hadar`: the Slurm job_submit plugin of Hadar, as a Rust cdylib.
//!
//! slurmctld calls [`job_submit`] for every submitted job (once per heterogeneous job
//! component). The decision itself (managed or not, valid or not, what to record) is
//! `hadar_request::decide` (`manage.rs`), a pure function; this crate is only the FFI edge around it:
//! reading the C job description, writing the record and the stripped GPU fields back with
//! Slurm's allocator, holding the job, notifying the sidecar, and logging through Slurm.
//!
//! Rules kept at every exported function: no panic crosses into C (`catch_unwind`), nothing
//! blocks (the sidecar notice has a hard deadline), and a broken configuration leaves every
//! job untouched rather than failing submissions.

#![allow(clippy::missing_safety_doc)]

mod bindings;
mod cstr;
mod log;
mod notify;
mod state;

use bindings::job_desc_msg_t;
use hadar_request::{Decision, Managed, Notice, Submission, TresFields, decide};
use std::cell::RefCell;
use std::ffi::{c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The plugin's human-readable name (Slurm reads the bytes at the symbol's address).
#[unsafe(no_mangle)]
pub static plugin_name: [u8; 48] = *b"Hadar heterogeneity-aware GPU job submit plugin\0";

/// The plugin's type; `JobSubmitPlugins=hadar` selects it.
#[unsafe(no_mangle)]
pub static plugin_type: [u8; 17] = *b"job_submit/hadar\0";

/// The Slurm version the plugin was built against; slurmctld loads it only if this equals its
/// own `SLURM_VERSION_NUMBER` exactly.
#[unsafe(no_mangle)]
pub static plugin_version: u32 = bindings::SLURM_VERSION_NUMBER;

/// Whether the Slurm this plugin is built for drops CPUs and memory per GPU that the daemon
/// gives back to a held job with its placement: 22.05 starts such a job with one CPU, 24.11
/// and 26.05 honour them (docs/slurm-releases.md). Releases between were not tried, so they
/// count as losing them: such jobs are then left to Slurm, which gives them what they ask.
const PER_GPU_LOST_AT_PLACEMENT: bool = bindings::SLURM_VERSION_NUMBER < ((24 << 16) | (11 << 8));

const SLURM_SUCCESS: c_int = bindings::SLURM_SUCCESS as c_int;
const SLURM_ERROR: c_int = bindings::SLURM_ERROR;
const NO_VAL: u32 = bindings::NO_VAL;

/// Called once when slurmctld loads the plugin: reads the configuration and the inventory.
/// Always succeeds: a broken configuration is logged and makes the plugin pass jobs through.
#[unsafe(no_mangle)]
pub extern "C" fn init() -> c_int {
    let outcome = catch_unwind(|| {
        state::reload("init");
    });
    if outcome.is_err() {
        log::error(
            "hadar: internal error while loading the configuration; jobs pass through untouched",
        );
    }
    SLURM_SUCCESS
}

/// Called when slurmctld unloads the plugin.
#[unsafe(no_mangle)]
pub extern "C" fn fini() -> c_int {
    let _ = catch_unwind(|| {
        state::clear();
        log::info("hadar: job_submit/hadar unloaded");
    });
    SLURM_SUCCESS
}

thread_local! {
    /// The last heterogeneous job leader this thread saw: its submitting user and its batch
    /// script (`None` for an interactive allocation). Later components carry no script of
    /// their own, but the leader's `#HADAR` lines apply to them. slurmctld validates all
    /// components of one het job back to back in one loop of the one thread serving that
    /// submission's RPC, under only a read lock; so a process-wide slot could be overwritten
    /// between two components by a second het submission served by another thread at the
    /// same instant, and one per thread cannot.
    static HET_LEADER_SCRIPT: RefCell<Option<(u32, Option<String>)>> = const { RefCell::new(None) };
}

/// Called for each new job (each het job component): decides, and for a managed job records
/// its request, strips its GPUs, holds it and notifies the sidecar.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn job_submit(
    job_desc: *mut job_desc_msg_t,
    submit_uid: u32,
    err_msg: *mut *mut c_char,
) -> c_int {
    let result = catch_unwind(AssertUnwindSafe(|| {
        if job_desc.is_null() {
            return SLURM_SUCCESS;
        }
        // SAFETY: slurmctld passes a valid, exclusively borrowed job description.
        unsafe { submit(&mut *job_desc, submit_uid, err_msg) }
    }));
    result.unwrap_or_else(|_| {
        log::error("hadar: internal error in job_submit; the job passes through untouched");
        SLURM_SUCCESS
    })
}

/// Called on `scontrol update` of a job. Hadar has nothing to check there: users cannot edit
/// the admin comment holding the record, and the sidecar reconciles every job it reads.
#[unsafe(no_mangle)]
pub extern "C" fn job_modify(
    _job_desc: *mut job_desc_msg_t,
    _job_ptr: *mut std::ffi::c_void,
    _submit_uid: u32,
    _err_msg: *mut *mut c_char,
) -> c_int {
    // Nothing here can panic today; the guard keeps the rule "no exported function unwinds
    // into C" true if this ever grows.
    catch_unwind(|| SLURM_SUCCESS).unwrap_or(SLURM_SUCCESS)
}

/// The body of [`job_submit`]: read the description, decide, and hold a managed job.
unsafe fn submit(desc: &mut job_desc_msg_t, submit_uid: u32, err_msg: *mut *mut c_char) -> c_int {
    // Timed so the log shows what the plugin costs each managed submission (the benchmark
    // reads it back); reading the monotonic clock costs tens of nanoseconds.
    let started = std::time::Instant::now();
    let Some(loaded) = state::current() else {
        return SLURM_SUCCESS; // broken configuration: already logged, pass through
    };
    // SAFETY: slurmctld's job description, as `job_submit` received it.
    let strings = unsafe { DescStrings::read(desc, submit_uid) };
    match decide(&strings.submission(desc), &loaded.config, &loaded.inventory) {
        Ok(Decision::Unmanaged(left)) => {
            if let Some(why) = left.logged_reason() {
                log::info(&format!(
                    "hadar: job from uid {submit_uid} left to Slurm: {why}"
                ));
            }
            SLURM_SUCCESS
        }
        Err(e) => {
            let message = format!("hadar: {e}");
            log::info(&format!("{message} (uid {submit_uid})"));
            if !err_msg.is_null() {
                // SAFETY: err_msg points to a Slurm-owned `char *` slot.
                unsafe { cstr::replace(err_msg, &message) };
            }
            SLURM_ERROR
        }
        Ok(Decision::Managed(managed)) => {
            let record = managed.record.encode();
            // SAFETY: as above.
            unsafe { hold(desc, &managed, &record) };
            let notice = Notice {
                uid: submit_uid,
                record: managed.record,
            };
            let sent = notify::send(
                &loaded.config.sidecar.socket,
                &notice.encode(),
                loaded.notify_timeout,
            );
            let micros = started.elapsed().as_micros();
            log::info(&format!(
                "hadar: managed job from uid {submit_uid} held in {micros} us: {record}{}",
                match sent {
                    Ok(()) => String::new(),
                    Err(e) => format!(" (sidecar not notified: {e})"),
                }
            ));
            SLURM_SUCCESS
        }
    }
}

/// The strings of a job description the decision reads, copied out of Slurm's memory.
struct DescStrings {
    partition: Option<String>,
    comment: Option<String>,
    /// The batch script whose `#HADAR` lines apply: the job's own, or for a later het job
    /// component its leader's; `None` for an interactive allocation.
    script: Option<String>,
    array: Option<String>,
    /// `--nodelist`, if given.
    node_list: Option<String>,
    /// `--constraint`, if given.
    constraint: Option<String>,
    /// `--licenses`, if given.
    licenses: Option<String>,
    /// `tres_per_job`, `_node`, `_socket`, `_task`, `cpus_per_tres`, `mem_per_tres`.
    tres: [Option<String>; 6],
}

impl DescStrings {
    /// Copies the strings out of `desc`, and keeps a het job leader's script for its later
    /// components (which carry none of their own).
    ///
    /// # Safety
    /// `desc`'s strings are NUL-terminated or NULL, as slurmctld passes them.
    unsafe fn read(desc: &job_desc_msg_t, submit_uid: u32) -> Self {
        // SAFETY: the strings of a job description are NUL-terminated or NULL.
        let (partition, comment, own_script, array) = unsafe {
            (
                cstr::read(desc.partition),
                cstr::read(desc.comment),
                cstr::read(desc.script),
                cstr::read(desc.array_inx),
            )
        };
        // SAFETY: as above.
        let (node_list, constraint, licenses) = unsafe {
            (
                cstr::read(desc.req_nodes),
                cstr::read(desc.features),
                cstr::read(desc.licenses),
            )
        };
        let script = match het_offset(desc) {
            Some(0) => {
                HET_LEADER_SCRIPT.with(|slot| {
                    *slot.borrow_mut() = Some((submit_uid, own_script.clone()));
                });
                own_script
            }
            Some(_) => HET_LEADER_SCRIPT.with(|slot| {
                slot.borrow()
                    .as_ref()
                    .filter(|(uid, _)| *uid == submit_uid)
                    .and_then(|(_, s)| s.clone())
            }),
            None => own_script,
        };
        // SAFETY: as above.
        let tres = unsafe {
            [
                cstr::read(desc.tres_per_job),
                cstr::read(desc.tres_per_node),
                cstr::read(desc.tres_per_socket),
                cstr::read(desc.tres_per_task),
                cstr::read(desc.cpus_per_tres),
                cstr::read(desc.mem_per_tres),
            ]
        };
        DescStrings {
            partition,
            comment,
            script,
            array,
            node_list,
            constraint,
            licenses,
            tres,
        }
    }

    /// The submission the decision sees: these strings and `desc`'s numbers.
    fn submission(&self, desc: &job_desc_msg_t) -> Submission<'_> {
        let array = self.array.as_deref();
        Submission {
            partition: self.partition.as_deref(),
            comment: self.comment.as_deref(),
            script: self.script.as_deref(),
            tres: TresFields {
                per_job: self.tres[0].as_deref(),
                per_node: self.tres[1].as_deref(),
                per_socket: self.tres[2].as_deref(),
                per_task: self.tres[3].as_deref(),
                cpus_per_tres: self.tres[4].as_deref(),
                mem_per_tres: self.tres[5].as_deref(),
            },
            min_nodes: (desc.min_nodes != NO_VAL && desc.min_nodes != 0).then_some(desc.min_nodes),
            het_offset: het_offset(desc),
            interactive: self.script.is_none(),
            num_tasks: (desc.num_tasks != NO_VAL && desc.num_tasks != 0).then_some(desc.num_tasks),
            array: array.is_some_and(|a| !a.is_empty()),
            // `--array=0-7%2`: slurmctld hands the plugin the `%N` suffix with the indices.
            array_throttle: array
                .and_then(|a| a.rsplit_once('%'))
                .and_then(|(_, n)| n.trim().parse().ok())
                .filter(|n| *n > 0),
            user_hold: desc.priority == 0,
            // JOB_SHARED_NONE: `--exclusive` (whole nodes).
            exclusive: desc.shared == 0,
            per_gpu_lost_at_placement: PER_GPU_LOST_AT_PLACEMENT,
            node_list: self.node_list.as_deref(),
            constraint: self.constraint.as_deref(),
            deadline: desc.deadline != 0,
            // `--no-requeue`; unset is NO_VAL16, which slurmctld turns into `JobRequeue`.
            no_requeue: desc.requeue == 0,
            licenses: self.licenses.as_deref(),
        }
    }
}

/// The job's offset in its heterogeneous job, if it is a component of one.
fn het_offset(desc: &job_desc_msg_t) -> Option<u32> {
    (desc.het_job_offset != NO_VAL).then_some(desc.het_job_offset)
}

/// Writes a managed job's record and stripped GPU fields into `desc` and holds it.
///
/// # Safety
/// `desc`'s string fields are Slurm-allocated strings or NULL.
unsafe fn hold(desc: &mut job_desc_msg_t, managed: &Managed, record: &str) {
    // SAFETY: the fields are Slurm-allocated strings or NULL; replace frees and
    // reallocates them with Slurm's own allocator.
    unsafe {
        cstr::replace(&mut desc.admin_comment, record);
        cstr::replace_opt(&mut desc.tres_per_job, managed.tres_per_job.as_deref());
        cstr::replace_opt(&mut desc.tres_per_node, managed.tres_per_node.as_deref());
        if managed.record.directives.gpus_per_task.is_some() {
            cstr::replace_opt(&mut desc.tres_per_task, managed.tres_per_task.as_deref());
        }
        // Given back with the placement: Slurm refuses them without a GPU request.
        if managed.record.directives.cpus_per_gpu.is_some() {
            cstr::replace_opt(&mut desc.cpus_per_tres, None);
        }
        if managed.record.directives.mem_per_gpu_mb.is_some() {
            cstr::replace_opt(&mut desc.mem_per_tres, None);
        }
    }
    // hadar preempts a job by requeueing it, which slurmctld refuses for a job that may not
    // be requeued: a site's `JobRequeue=0` must not make managed jobs unpreemptible (a job
    // that asked for --no-requeue is left to Slurm instead).
    desc.requeue = 1;
    desc.priority = 0;
}
