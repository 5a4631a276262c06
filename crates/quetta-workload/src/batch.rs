//! Requests that carry several inputs: an embedding of a batch of texts, a ranking of
//! documents against a query. [`Batched`] makes each request of another workload's prompts,
//! addressed by index as every workload is: request `i` of a batch of `n` embeds the inner
//! workload's prompts `i·n .. i·n+n`; a ranking of `n` documents takes prompt `i·(n+1)` as
//! its query and the `n` after it as its documents (so queries and documents are prompts of
//! the same lengths). A last batch the inner workload cannot fill is sent as it is. A batch
//! of one is the prompt itself (a text, or token ids). Nothing is generated: no request
//! asks for output tokens.

use quetta_engine::{Message, Prompt, RequestKind};

use crate::{PlannedRequest, Workload, WorkloadError};

/// See the module documentation.
pub struct Batched {
    inner: Box<dyn Workload>,
    per_request: u64,
    rank: bool,
    error: Option<WorkloadError>,
}

impl std::fmt::Debug for Batched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batched")
            .field("per_request", &self.per_request)
            .field("rank", &self.rank)
            .finish_non_exhaustive()
    }
}

impl Batched {
    /// Requests of `kind` with `per_request` inputs each (texts to embed, documents to
    /// rank); the workload itself back for a kind that sends one prompt a request.
    pub fn new(
        inner: Box<dyn Workload>,
        kind: RequestKind,
        per_request: u32,
    ) -> Result<Self, Box<dyn Workload>> {
        let rank = match kind {
            RequestKind::Rank => true,
            RequestKind::Embed => false,
            _ => return Err(inner),
        };
        Ok(Self { inner, per_request: u64::from(per_request.max(1)), rank, error: None })
    }

    fn text(&mut self, index: u64, p: PlannedRequest) -> Option<(String, u32)> {
        let t = match p.prompt {
            Prompt::Text(t) => t,
            Prompt::Chat(m) => m.iter().map(Message::text_content).collect::<Vec<_>>().join("\n"),
            _ => {
                self.error = Some(WorkloadError::Request {
                    index,
                    source: Box::new(WorkloadError::Invalid {
                        name: "prompt",
                        reason: "prompts of token ids cannot be batched or ranked: send text"
                            .into(),
                    }),
                });
                return None;
            }
        };
        Some((t, p.input_tokens))
    }
}

impl Workload for Batched {
    fn request(&mut self, index: u64) -> Option<PlannedRequest> {
        let n = self.per_request;
        let first = index.checked_mul(n + u64::from(self.rank))?;
        let mut exact = true;
        let mut take = |me: &mut Self, i: u64| {
            let p = me.inner.request(i)?;
            exact &= p.input_tokens_exact;
            me.text(i, p)
        };
        if self.rank {
            let (query, q_tokens) = take(self, first)?;
            let mut documents = Vec::with_capacity(n as usize);
            let mut tokens = 0u32;
            for i in first + 1..=first + n {
                let Some((d, t)) = take(self, i) else { break };
                documents.push(d);
                // a reranker reads the query with each document
                tokens = tokens.saturating_add(t).saturating_add(q_tokens);
            }
            if documents.is_empty() {
                return None;
            }
            return Some(PlannedRequest {
                index,
                prompt: Prompt::Rank { query, documents },
                input_tokens: tokens,
                input_tokens_exact: exact,
                max_tokens: 0,
            });
        }
        if n == 1 {
            // one input: the prompt as it is (a text, or token ids), generating nothing
            let p = self.inner.request(first)?;
            return Some(PlannedRequest { index, max_tokens: 0, ..p });
        }
        let mut texts = Vec::with_capacity(n as usize);
        let mut tokens = 0u32;
        for i in first..first + n {
            let Some((t, k)) = take(self, i) else { break };
            texts.push(t);
            tokens = tokens.saturating_add(k);
        }
        if texts.is_empty() {
            return None;
        }
        Some(PlannedRequest {
            index,
            prompt: Prompt::Inputs(texts),
            input_tokens: tokens,
            input_tokens_exact: exact,
            max_tokens: 0,
        })
    }

    fn error(&self) -> Option<WorkloadError> {
        self.error.clone().or_else(|| self.inner.error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Prompt `i` is the text "p{i}" of `i + 1` tokens; 7 prompts in all.
    struct Seven;
    impl Workload for Seven {
        fn request(&mut self, index: u64) -> Option<PlannedRequest> {
            (index < 7).then(|| PlannedRequest {
                index,
                prompt: Prompt::Text(format!("p{index}")),
                input_tokens: index as u32 + 1,
                input_tokens_exact: true,
                max_tokens: 16,
            })
        }
    }

    #[test]
    fn batches_take_consecutive_prompts_and_the_last_is_what_is_left() {
        let mut b = Batched::new(Box::new(Seven), RequestKind::Embed, 3).ok().unwrap();
        let r = b.request(1).unwrap();
        assert_eq!(r.prompt, Prompt::Inputs(vec!["p3".into(), "p4".into(), "p5".into()]));
        assert_eq!((r.input_tokens, r.max_tokens), (4 + 5 + 6, 0));
        assert_eq!(b.request(2).unwrap().prompt, Prompt::Inputs(vec!["p6".into()]));
        assert!(b.request(3).is_none());
        let mut one = Batched::new(Box::new(Seven), RequestKind::Embed, 1).ok().unwrap();
        let r = one.request(2).unwrap();
        assert_eq!((r.prompt, r.max_tokens), (Prompt::Text("p2".into()), 0));
        assert!(Batched::new(Box::new(Seven), RequestKind::Generate, 4).is_err());
    }

    #[test]
    fn a_ranking_is_a_query_and_the_documents_after_it() {
        let mut b = Batched::new(Box::new(Seven), RequestKind::Rank, 2).ok().unwrap();
        let r = b.request(1).unwrap();
        assert_eq!(
            r.prompt,
            Prompt::Rank { query: "p3".into(), documents: vec!["p4".into(), "p5".into()] }
        );
        assert_eq!(r.input_tokens, (5 + 4) + (6 + 4), "the query is read with each document");
        assert!(b.request(2).is_none(), "p6 alone has no document");
    }
}
