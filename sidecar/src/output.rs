//! Writing a command's output.

use crate::Failure;

/// Writes to standard output; a reader that went away (`| head`) is not an error.
pub(crate) fn emit(text: &str) -> Result<(), Failure> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.map_err(Failure::runtime),
    }
}
