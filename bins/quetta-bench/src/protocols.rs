//! `quetta-bench protocols` and `quetta-bench protocol-cost`.

use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use quetta::{Protocol, RunControl};

/// `quetta-bench protocols`: every protocol, its names and its path.
pub fn list() -> ExitCode {
    print!("{}", quetta::protocols::listing());
    ExitCode::SUCCESS
}

fn protocol_arg(s: &str) -> Result<Protocol, String> {
    Protocol::from_name(s)
        .ok_or_else(|| format!("{s:?} is not a protocol (see quetta-bench protocols)"))
}

#[derive(Debug, Args)]
pub struct CostArgs {
    /// Server root URL.
    #[arg(long)]
    base_url: String,
    /// The generation protocols to compare, the first the baseline.
    #[arg(long, value_delimiter = ',', value_parser = protocol_arg, default_value = "openai-chat,openai-completions,openai-responses,anthropic,llamacpp")]
    protocols: Vec<Protocol>,
    /// Model name (default: the first model the server lists).
    #[arg(long)]
    model: Option<String>,
    /// API key, sent only to the server, as each protocol carries it.
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Requests per protocol (one of each per round, in turn).
    #[arg(long, default_value_t = 20)]
    rounds: u64,
    /// Prompt length: tokens with --tokenizer, else words.
    #[arg(long, default_value_t = 128)]
    input_len: u32,
    /// Output length, forced where the protocol can force it.
    #[arg(long, default_value_t = 32)]
    output_len: u32,
    /// A tokenizer.json (or a cached Hugging Face id) for prompts of exact token lengths.
    #[arg(long)]
    tokenizer: Option<String>,
    /// Print the comparison as JSON.
    #[arg(long)]
    json: bool,
}

/// `quetta-bench protocol-cost`.
pub fn cost(a: &CostArgs) -> Result<ExitCode> {
    let mut t = quetta::Target::openai(&a.base_url);
    t.model.clone_from(&a.model);
    t.api_key = a.api_key.as_deref().filter(|k| !k.is_empty()).map(quetta::ApiKey::new);
    t.preflight = true;
    let mut c = quetta::ProtocolCost::new(t);
    c.protocols.clone_from(&a.protocols);
    (c.rounds, c.input_len, c.output_len) = (a.rounds, a.input_len, a.output_len);
    c.tokenizer.clone_from(&a.tokenizer);
    let r = crate::commands::runtime(Some(2), &RunControl::new())?.block_on(c.run())?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!("== Quetta protocol cost: {} rounds against {} ==", r.rounds, a.base_url);
        print!("{}", r.render());
    }
    let failed = r.rows.iter().any(|row| row.completed == 0);
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
