//! C strings crossing the FFI edge: read Slurm's, and write ours with Slurm's allocator so
//! that Slurm can free them.

use crate::bindings::{slurm_xfree, slurm_xstrdup};
use std::ffi::{CStr, CString, c_char, c_void};

/// Copies a NUL-terminated C string (lossily, as UTF-8); `None` for NULL.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string valid for the call.
pub unsafe fn read(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: guaranteed by the caller.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Frees `*slot` with Slurm's allocator and stores a Slurm-allocated copy of `value`
/// (interior NULs, which a C string cannot hold, are dropped).
///
/// # Safety
/// `slot` points to a `char *` that is NULL or was allocated by Slurm's allocator.
pub unsafe fn replace(slot: *mut *mut c_char, value: &str) {
    let owned = CString::new(value.replace('\0', "")).unwrap_or_default();
    // SAFETY: guaranteed by the caller; slurm_xstrdup copies `owned` before it is dropped.
    unsafe {
        slurm_xfree(slot.cast::<*mut c_void>());
        *slot = slurm_xstrdup(owned.as_ptr());
    }
}

/// Like [`replace`], but `None` frees the field and leaves it NULL.
///
/// # Safety
/// As for [`replace`].
pub unsafe fn replace_opt(slot: *mut *mut c_char, value: Option<&str>) {
    match value {
        // SAFETY: forwarded.
        Some(v) => unsafe { replace(slot, v) },
        // SAFETY: forwarded; slurm_xfree sets the slot to NULL.
        None => unsafe { slurm_xfree(slot.cast::<*mut c_void>()) },
    }
}
