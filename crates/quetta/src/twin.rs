//! A twin of a real server, as the binaries and embedders open one: its model file with
//! what-if changes, and the tokenizer that counts its prompts.

use std::path::Path;
use std::sync::Arc;

use quetta_sim::model::{ServerModel, WhatIf};
use quetta_sim::{SimConfig, TokenCounter};

use crate::{Result, Target};

/// A calibrated server model (`quetta-probe calibrate`) ready to serve live
/// ([`Twin::target`]) or to predict with ([`crate::Benchmark::predict`]).
#[derive(Debug, Clone)]
pub struct Twin {
    /// The model, what-if changes applied.
    pub model: ServerModel,
    /// Counts a prompt's tokens as the server would; without one a word is a token.
    pub token_counter: Option<TokenCounter>,
}

impl Twin {
    /// Read `path` (refused naming file, line and field), apply `what_if`, and count
    /// prompts with `tokenizer` (a `tokenizer.json` path or a known id) when given.
    pub fn load(path: &Path, what_if: WhatIf, tokenizer: Option<&str>) -> Result<Self> {
        let model = ServerModel::load_with(path, what_if)?;
        let token_counter = tokenizer.map(token_counter).transpose()?;
        Ok(Self { model, token_counter })
    }

    /// The embedded simulator serving this twin live, its other settings `base`'s.
    pub fn sim_config(&self, base: SimConfig) -> SimConfig {
        SimConfig {
            server_model: Some(self.model.clone()),
            token_counter: self.token_counter.clone(),
            ..base
        }
    }

    /// What a reader must know when the twin counts prompts by words (no tokenizer): its
    /// model was calibrated in the server's tokens, so its prompts look shorter than the
    /// server's and its prefill too fast. `None` with a tokenizer.
    pub fn counting_warning(&self) -> Option<quetta_report::Note> {
        counting_warning(&self.sim_config(SimConfig::default()))
    }

    /// A target served by this twin live.
    pub fn target(&self) -> Target {
        Target::simulator(self.sim_config(SimConfig::default()))
    }
}

/// [`Twin::counting_warning`] of the simulator `cfg` describes (`None` for one that serves
/// no twin): the one place that decides it, for the binaries' banner and the run's notes.
pub(crate) fn counting_warning(cfg: &SimConfig) -> Option<quetta_report::Note> {
    (cfg.server_model.is_some() && cfg.token_counter.is_none())
        .then_some(quetta_report::Note::TwinCountsWords)
}

/// A prompt-token counter backed by a real tokenizer (a `tokenizer.json` path or a known id).
pub fn token_counter(tokenizer: &str) -> Result<TokenCounter> {
    let tok = Arc::new(quetta_workload::tokenizer::Tokenizer::resolve(tokenizer)?);
    Ok(TokenCounter(Arc::new(move |s: &str| tok.count(s) as u64)))
}
