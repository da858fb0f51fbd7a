//! The one error type of input readers: what is wrong, and where.

use std::fmt;

/// Where in an input a problem was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// The file (or `<embedded ...>`, `--cluster`) the input came from.
    pub origin: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// The field at fault, when known.
    pub field: Option<String>,
}

impl Location {
    /// A location in `origin` with no line or field.
    pub fn of(origin: &str) -> Self {
        Location {
            origin: origin.to_string(),
            line: None,
            field: None,
        }
    }

    /// The same location at a line.
    pub fn line(mut self, line: usize) -> Self {
        self.line = Some(line);
        self
    }

    /// The same location naming a field (a name taken from the input is shortened and its
    /// control characters escaped, see [`bounded`]).
    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(bounded(&field.into(), 64));
        self
    }
}

impl fmt::Display for Location {
    /// `file:line: field `name`` (parts omitted when unknown).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.origin)?;
        if let Some(l) = self.line {
            write!(f, ":{l}")?;
        }
        if let Some(field) = &self.field {
            write!(f, ": field `{field}`")?;
        }
        Ok(())
    }
}

/// An input that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// The file could not be read at all.
    #[error("{path}: cannot read: {reason}")]
    Io {
        /// The path.
        path: String,
        /// The OS error. Not a `source`: the message already says it, and the CLI prints
        /// an error's sources after it, which said it twice.
        reason: std::io::Error,
    },
    /// The content is wrong somewhere.
    #[error("{at}: {message}")]
    Invalid {
        /// Where.
        at: Location,
        /// What is wrong and, where it helps, how to fix it.
        message: String,
    },
}

impl FormatError {
    /// An `Invalid` error at `at`.
    /// The message is kept to one line of at most 300 characters: it may quote the input,
    /// which in a corrupt or hostile file can be megabytes long or hold control characters.
    pub fn invalid(at: Location, message: impl Into<String>) -> Self {
        FormatError::Invalid {
            at,
            message: bounded(&message.into(), 300),
        }
    }
}

/// `text` on one line of at most `max` characters (then `...`), control characters (line
/// breaks included) escaped.
pub fn bounded(text: &str, max: usize) -> String {
    hadar_request::excerpt_of(text, max)
}

/// Reads a whole file, naming it in the error.
pub(crate) fn read_file(path: &std::path::Path) -> Result<String, FormatError> {
    std::fs::read_to_string(path).map_err(|reason| FormatError::Io {
        path: path.display().to_string(),
        reason,
    })
}

/// The 1-based line of byte offset `pos` in `text`.
pub fn line_of(text: &str, pos: usize) -> usize {
    text.as_bytes()[..pos.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}
