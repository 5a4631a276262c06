//! What Quetta's own tests share. A dev-dependency of the crates whose tests run against the
//! real llama.cpp server; nothing outside the workspace's tests uses it.

/// The variable `.ci/run` sets to the URL of the llama.cpp server it started
/// (`scripts/llama-server-start.sh`).
pub const LLAMA_URL_VAR: &str = "QUETTA_LLAMA_URL";

/// The real llama.cpp server's URL (`QUETTA_LLAMA_URL`). Outside CI a missing server skips
/// the test, saying so on stderr; under CI (`CI` set) it is a failure, so a CI run cannot
/// pass without the tests against the real server.
pub fn llama_url() -> Option<String> {
    llama_url_from(std::env::var(LLAMA_URL_VAR).ok(), std::env::var_os("CI").is_some())
}

fn llama_url_from(url: Option<String>, ci: bool) -> Option<String> {
    match url {
        Some(u) if !u.is_empty() => Some(u),
        _ => {
            assert!(
                !ci,
                "CI must start the llama.cpp server (scripts/llama-server-start.sh) and set \
                 {LLAMA_URL_VAR}"
            );
            eprintln!("SKIPPED: {LLAMA_URL_VAR} is not set (start scripts/llama-server-start.sh)");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::llama_url_from;

    #[test]
    fn a_set_url_is_used_and_a_missing_one_skips_outside_ci() {
        assert_eq!(
            llama_url_from(Some("http://127.0.0.1:8089".into()), true).as_deref(),
            Some("http://127.0.0.1:8089")
        );
        assert_eq!(llama_url_from(Some(String::new()), false), None);
        assert_eq!(llama_url_from(None, false), None);
    }

    #[test]
    #[should_panic(expected = "CI must start the llama.cpp server")]
    fn a_missing_url_fails_under_ci() {
        let _ = llama_url_from(None, true);
    }
}
