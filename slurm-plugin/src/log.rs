//! Logging into slurmctld's own log through `slurm_info` and `slurm_error`.

use crate::bindings::{slurm_error, slurm_info};
use std::ffi::CString;

fn c_message(message: &str) -> CString {
    CString::new(message.replace('\0', "")).unwrap_or_default()
}

/// Logs a message at info level.
pub fn info(message: &str) {
    let m = c_message(message);
    // SAFETY: a constant "%s" format with one valid C string argument.
    unsafe { slurm_info(c"%s".as_ptr(), m.as_ptr()) }
}

/// Logs a message at error level.
pub fn error(message: &str) {
    let m = c_message(message);
    // SAFETY: as in `info`.
    unsafe { slurm_error(c"%s".as_ptr(), m.as_ptr()) }
}
