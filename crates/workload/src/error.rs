//! Input errors that point at the place in a file (or flag) that is wrong.
//!
//! Every parser of this crate reports bad input as an [`InputError`]: one line naming the
//! origin (a file name, `--set`, a built-in spec), the line or field, and what was expected.

use std::fmt;

/// Bad input: `ORIGIN:LINE: problem`, `ORIGIN: FIELD: problem` or `ORIGIN:LINE: FIELD: problem`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputError {
    /// File name (or `--set`, or `spec NAME`) the input came from.
    pub origin: String,
    /// 1-based line number, when known.
    pub line: Option<usize>,
    /// Dotted field path (`sessions.request`), when the problem is a field's value.
    pub field: Option<String>,
    /// What is wrong and what was expected.
    pub problem: String,
}

impl InputError {
    pub fn at_line(origin: &str, line: usize, problem: impl Into<String>) -> Self {
        InputError {
            origin: origin.to_string(),
            line: Some(line),
            field: None,
            problem: one_line(problem.into()),
        }
    }

    pub fn in_field(origin: &str, field: &str, problem: impl Into<String>) -> Self {
        InputError {
            origin: origin.to_string(),
            line: None,
            field: Some(field.to_string()),
            problem: one_line(problem.into()),
        }
    }

    pub fn whole(origin: &str, problem: impl Into<String>) -> Self {
        InputError {
            origin: origin.to_string(),
            line: None,
            field: None,
            problem: one_line(problem.into()),
        }
    }

    /// The same error with a line number attached.
    pub fn with_line(mut self, line: Option<usize>) -> Self {
        if self.line.is_none() {
            self.line = line;
        }
        self
    }
}

fn one_line(s: String) -> String {
    if s.contains('\n') {
        s.split('\n')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .collect::<Vec<_>>()
            .join("; ")
    } else {
        s
    }
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.origin)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        write!(f, ": ")?;
        if let Some(field) = &self.field {
            write!(f, "{field}: ")?;
        }
        f.write_str(&self.problem)
    }
}

impl std::error::Error for InputError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_on_one_line_with_location() {
        let e = InputError::at_line("a.log", 3, "bad\nthing");
        assert_eq!(e.to_string(), "a.log:3: bad; thing");
        let e = InputError::in_field("spec.toml", "sessions.count", "expected an integer")
            .with_line(Some(9));
        assert_eq!(
            e.to_string(),
            "spec.toml:9: sessions.count: expected an integer"
        );
    }
}
