//! [`Tool`]: the program that wrote a file of results, one shape for every layer that
//! stamps one (a run directory, a probe's findings).

/// The program that wrote a file of results: `tool` and `tool_version` of a run's
/// `run.json` and `summary.json` and of a probe's `meta.json`, given by whoever runs it
/// (`quetta-bench`, `quetta-probe`, or an embedder's own program; [`Tool::library`] when it
/// names none).
///
/// ```
/// let t = quetta_engine::tool::Tool::new("my-harness", "2.1.0");
/// assert_eq!((t.name.as_str(), t.version.as_str()), ("my-harness", "2.1.0"));
/// assert_eq!(quetta_engine::tool::Tool::default().name, "quetta");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tool {
    pub name: String,
    pub version: String,
}

impl Tool {
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Self { name: name.into(), version: version.into() }
    }

    /// The Quetta library itself, at this version.
    pub fn library() -> Self {
        Self::new("quetta", env!("CARGO_PKG_VERSION"))
    }
}

impl Default for Tool {
    fn default() -> Self {
        Self::library()
    }
}
