//! Sia's CSV files as rows of the columns a reader needs, found by header name (Sia's files
//! order their columns differently), each field checked with an error naming the file, line
//! and column.

use crate::error::{FormatError, Location, read_file};
use std::path::Path;

/// A CSV file's rows, with the columns a reader asked for picked out by header name.
pub(super) struct Csv {
    /// The rows, in file order.
    pub(super) rows: Vec<Row>,
}

/// One row: its location and the asked-for fields, in the order asked.
pub(super) struct Row {
    origin: String,
    /// Its 1-based line in the file.
    pub(super) line: usize,
    columns: &'static [&'static str],
    fields: Vec<String>,
}

impl Csv {
    /// Reads `path`, which must have a header naming every column of `columns`.
    pub(super) fn read(path: &Path, columns: &'static [&'static str]) -> Result<Csv, FormatError> {
        let text = read_file(path)?;
        Csv::parse(&text, &path.display().to_string(), columns)
    }

    /// Parses CSV `text`; `origin` names it in errors.
    pub(super) fn parse(
        text: &str,
        origin: &str,
        columns: &'static [&'static str],
    ) -> Result<Csv, FormatError> {
        let origin = origin.to_string();
        let mut reader = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .from_reader(text.as_bytes());
        let at_line = |line: u64| Location::of(&origin).line(line as usize);
        let headers = reader
            .headers()
            .map_err(|e| FormatError::invalid(at_line(1), format!("not CSV: {e}")))?
            .clone();
        let index: Vec<usize> = columns
            .iter()
            .map(|c| {
                headers.iter().position(|h| h == *c).ok_or_else(|| {
                    FormatError::invalid(
                        at_line(1),
                        format!(
                            "no `{c}` column (the header has {})",
                            headers.iter().collect::<Vec<_>>().join(",")
                        ),
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        let mut rows = Vec::new();
        for record in reader.records() {
            let record = record.map_err(|e| {
                let line = e.position().map_or(0, |p| p.line());
                FormatError::invalid(at_line(line), format!("not CSV: {e}"))
            })?;
            let line = record.position().map_or(0, |p| p.line()) as usize;
            rows.push(Row {
                origin: origin.clone(),
                line,
                columns,
                fields: index
                    .iter()
                    .map(|&i| record.get(i).unwrap_or("").to_string())
                    .collect(),
            });
        }
        if rows.is_empty() {
            return Err(FormatError::invalid(Location::of(&origin), "has no rows"));
        }
        Ok(Csv { rows })
    }
}

impl Row {
    pub(super) fn invalid(&self, i: usize, message: impl Into<String>) -> FormatError {
        FormatError::invalid(
            Location::of(&self.origin)
                .line(self.line)
                .field(self.columns[i]),
            message,
        )
    }

    pub(super) fn text(&self, i: usize) -> &str {
        &self.fields[i]
    }

    /// Field `i` as a finite number of at least 0.
    pub(super) fn number(&self, i: usize) -> Result<f64, FormatError> {
        let text = &self.fields[i];
        text.parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| {
                self.invalid(
                    i,
                    format!("expected a number of at least 0, found `{text}`"),
                )
            })
    }

    /// Field `i` as a whole number of at least 1.
    pub(super) fn whole(&self, i: usize) -> Result<u32, FormatError> {
        let v = self.number(i)?;
        if v >= 1.0 && v.fract() == 0.0 && v <= u32::MAX as f64 {
            Ok(v as u32)
        } else {
            Err(self.invalid(
                i,
                format!(
                    "expected a whole number of at least 1, found `{}`",
                    self.fields[i]
                ),
            ))
        }
    }
}
