//! What can go wrong while writing a report.

use std::path::{Path, PathBuf};

/// An error writing a report, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// Nothing to report.
    #[error("no run to report")]
    Empty,
    /// A file or folder could not be written.
    #[error("writing {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The CSV writer failed.
    #[error("writing {path}")]
    Csv {
        path: PathBuf,
        #[source]
        source: csv::Error,
    },
    /// A plot could not be drawn.
    #[error("drawing {path}: {message}")]
    Plot { path: PathBuf, message: String },
}

impl ReportError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        ReportError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    pub(crate) fn plot(path: &Path, e: impl std::fmt::Display) -> Self {
        ReportError::Plot {
            path: path.to_path_buf(),
            message: e.to_string(),
        }
    }
}
