//! Where keys stand in a TOML file's text, so that a problem with a value can name its line.

/// Line numbers of keys in the file's text.
pub struct Lines<'a> {
    text: &'a str,
    table: Option<toml::de::DeTable<'a>>,
}

impl<'a> Lines<'a> {
    pub fn new(text: &'a str) -> Self {
        let table = toml::de::DeTable::parse(text).ok().map(|t| t.into_inner());
        Lines { text, table }
    }

    /// The file's text.
    pub fn text(&self) -> &'a str {
        self.text
    }

    /// The line of `text` holding byte `offset`.
    fn line_of(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())]
            .matches('\n')
            .count()
            + 1
    }

    /// The key at `path` and its value.
    fn find(
        &self,
        path: &[&str],
    ) -> Option<(
        &toml::Spanned<toml::de::DeString<'a>>,
        &toml::Spanned<toml::de::DeValue<'a>>,
    )> {
        let (first, rest) = path.split_first()?;
        let mut here = self
            .table
            .as_ref()?
            .iter()
            .find(|(k, _)| k.get_ref() == first)?;
        for part in rest {
            let toml::de::DeValue::Table(t) = here.1.get_ref() else {
                return None;
            };
            here = t.iter().find(|(k, _)| k.get_ref() == part)?;
        }
        Some(here)
    }

    /// The line of the key at `path`, if the file writes it.
    pub fn key(&self, path: &[&str]) -> Option<usize> {
        self.find(path).map(|(k, _)| self.line_of(k.span().start))
    }

    /// The line of the string `value` in the array at `path`, else the key's line.
    pub fn element(&self, path: &[&str], value: &str) -> Option<usize> {
        let (k, v) = self.find(path)?;
        let at = match v.get_ref() {
            toml::de::DeValue::Array(a) => a
                .into_iter()
                .find(|e| matches!(e.get_ref(), toml::de::DeValue::String(s) if s == value))
                .map(|e| e.span().start),
            _ => None,
        };
        Some(self.line_of(at.unwrap_or(k.span().start)))
    }
}
