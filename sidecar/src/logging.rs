//! Where logs go and how they look: standard error, human-readable with timestamps on a
//! terminal or in a file; when standard error is journald's stream (systemd says so in
//! `$JOURNAL_STREAM`), each line starts with its syslog level as `<N>` (which journald reads
//! as the entry's priority) and carries no timestamp of its own, journald adding its own.

use std::fmt;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Logs go to stderr; `HADAR_LOG` (or `RUST_LOG`) sets the filter, `-v` raises the default.
pub fn init(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = std::env::var("HADAR_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| default.to_string());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr);
    let journal = std::env::var("JOURNAL_STREAM").ok();
    let _ = if is_journal_stream(journal.as_deref(), stderr_dev_ino()) {
        builder.with_ansi(false).event_format(Journald).try_init()
    } else {
        builder
            // Colour codes only on a terminal: a log file read by people or tools stays plain.
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init()
    };
}

/// Whether stderr is the stream `$JOURNAL_STREAM` (`DEVICE:INODE`) names: a child that
/// inherited the variable but writes elsewhere (a pipe, a file) keeps the human format.
fn is_journal_stream(var: Option<&str>, stderr: Option<(u64, u64)>) -> bool {
    let parsed = var.and_then(|v| {
        let (dev, ino) = v.split_once(':')?;
        Some((dev.parse::<u64>().ok()?, ino.parse::<u64>().ok()?))
    });
    parsed.is_some() && parsed == stderr
}

fn stderr_dev_ino() -> Option<(u64, u64)> {
    // SAFETY: fstat writes into a zeroed struct we own; fd 2 is only read.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    (unsafe { libc::fstat(2, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// The syslog priority journald reads from a `<N>` line prefix.
fn syslog_priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        _ => 7,
    }
}

/// One line per event: `<N>message key=value ...`.
struct Journald;

impl<S, N> FormatEvent<S, N> for Journald
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        write!(writer, "<{}>", syslog_priority(event.metadata().level()))?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn journald_is_chosen_only_for_the_stream_it_names() {
        assert!(is_journal_stream(Some("8:12345"), Some((8, 12345))));
        assert!(!is_journal_stream(Some("8:12345"), Some((8, 999))));
        assert!(!is_journal_stream(None, Some((8, 12345))));
        assert!(!is_journal_stream(Some("junk"), Some((8, 12345))));
    }

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn journald_lines_carry_the_level_and_no_timestamp() {
        let buf = Buf::default();
        let out = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || buf.clone())
            .with_ansi(false)
            .event_format(Journald)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(job = 7, "held again");
            tracing::info!("round done");
            tracing::error!("round failed");
        });
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            text,
            "<4>held again job=7\n<6>round done\n<3>round failed\n"
        );
    }
}
