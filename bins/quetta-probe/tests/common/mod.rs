//! What the tests against the real llama.cpp server share.

/// The server's URL (`QUETTA_LLAMA_URL`, set by `.ci/run`). Outside CI a missing server
/// skips the test, saying so; under CI it is a failure.
pub fn llama_url() -> Option<String> {
    match std::env::var("QUETTA_LLAMA_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must start the llama.cpp server and set QUETTA_LLAMA_URL"
            );
            eprintln!("SKIPPED: QUETTA_LLAMA_URL is not set (start scripts/llama-server-start.sh)");
            None
        }
    }
}
