//! Build a workload from a named profile and print its first requests with their intended
//! send times: `cargo run -p quetta-workload --example plan -- [PROFILE] [RATE]`.

use std::time::Duration;

use quetta_engine::Prompt;
use quetta_workload::arrival::{Arrival, Schedule};
use quetta_workload::profiles;
use quetta_workload::synthetic::SyntheticSpec;
use quetta_workload::trace::TraceWorkload;
use quetta_workload::Workload;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "chat-short".into());
    let rate: f64 = args.next().map_or(Ok(4.0), |r| r.parse())?;
    let profile = profiles::find(&name)?;
    println!("profile {} — {} ({})", profile.name, profile.description, profile.dataset());
    // A trace profile brings its own times; a synthetic one gets Poisson arrivals at `rate`.
    let (mut workload, times): (Box<dyn Workload>, Vec<Duration>) = match profile.trace()? {
        Some(rows) => {
            let w = TraceWorkload::new(rows, 512, 0, true, None);
            let t = w.offsets(1.0);
            (Box::new(w), t)
        }
        None => {
            let spec = SyntheticSpec {
                input_len: profile.input_len,
                input_stddev: profile.input_stddev,
                output_len: profile.output_len,
                output_stddev: profile.output_stddev,
                chat: true,
                seed: 0,
                ..SyntheticSpec::default()
            };
            (Box::new(spec), Schedule::new(Arrival::Poisson, rate, 0)?.take_n(10))
        }
    };
    for (i, t) in times.iter().take(10).enumerate() {
        let p = workload.request(i as u64).ok_or("workload exhausted")?;
        let preview = match &p.prompt {
            Prompt::Chat(m) => m[0].text_content(),
            Prompt::Text(t) => t.clone(),
            Prompt::TokenIds(ids) => format!("{} token ids", ids.len()),
            _ => String::new(),
        };
        let preview: String = preview.chars().take(48).collect();
        println!(
            "#{i:<3} at {:>9.3} s  input {:>6} tokens{}  max_tokens {:>5}  {preview}…",
            t.as_secs_f64(),
            p.input_tokens,
            if p.input_tokens_exact { "" } else { " (approx.)" },
            p.max_tokens
        );
    }
    Ok(())
}
