//! A plain-text table with aligned columns, for output meant for people.

/// Rows of cells under a header; numbers are right-aligned, text left-aligned.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles.
    pub fn new(header: &[&str]) -> Self {
        Table {
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells are blank).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Renders the table with two spaces between columns.
    pub fn render(&self) -> String {
        let cols = self.header.len();
        let mut width: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(cols) {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let numeric =
            |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit() || ".-+x%".contains(c));
        let mut out = String::new();
        let line = |cells: &[String], out: &mut String| {
            let mut l = String::new();
            for (i, w) in width.iter().enumerate() {
                let c = cells.get(i).map(String::as_str).unwrap_or("");
                let pad = w - c.chars().count();
                if i > 0 {
                    l.push_str("  ");
                }
                if i > 0 && numeric(c) {
                    l.push_str(&" ".repeat(pad));
                    l.push_str(c);
                } else {
                    l.push_str(c);
                    l.push_str(&" ".repeat(pad));
                }
            }
            out.push_str(l.trim_end());
            out.push('\n');
        };
        line(&self.header, &mut out);
        for r in &self.rows {
            line(r, &mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn aligns_columns() {
        let mut t = super::Table::new(&["name", "value"]);
        t.row(vec!["a".into(), "1.5".into()]);
        t.row(vec!["longer".into(), "10.25".into()]);
        assert_eq!(t.render(), "name    value\na         1.5\nlonger  10.25\n");
    }
}
