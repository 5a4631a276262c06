//! The request bodies of `InvokeModel` and `InvokeModelWithResponseStream`, which are the
//! model provider's own: data per model family (a body template and where the answer's text
//! and stop reason are), chosen from the model id and overridable.
//!
//! Templates use the placeholders of [`crate::payload`]: `{{prompt}}` (also inside a
//! string), `{{chat}}`/`{{chat_blocks}}` (the conversation without its system messages,
//! content as a string or as `[{"text": …}]`), `{{system}}`/`{{system_blocks}}`,
//! `{{max_tokens}}`, `{{temperature}}`, `{{top_p}}`, `{{seed}}`. An object member whose
//! placeholder has no value (no system prompt, no temperature) is left out.

use serde_json::{json, Value};

use crate::AwsError;

/// A model family's request body and answer shape.
///
/// ```
/// let f = quetta_aws::Family::for_model("us.anthropic.claude-3-5-haiku-20241022-v1:0").unwrap();
/// assert_eq!(f.name, "anthropic");
/// assert!(quetta_aws::Family::for_model("arn:aws:bedrock:us-east-1:123456789012:provisioned-model/abc").is_none());
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Family {
    pub name: String,
    /// The request body, with placeholders.
    pub body: Value,
    /// JSON pointer to the generated text in each streamed chunk.
    pub chunk_text: String,
    /// JSON pointer to reasoning text in a streamed chunk, where the family streams it.
    pub chunk_reasoning: Option<String>,
    /// JSON pointers to a streamed chunk's stop reason (the first present, non-null wins).
    pub chunk_stop: Vec<String>,
    /// JSON pointer to the text of a whole (non-streamed) answer.
    pub whole_text: String,
    /// JSON pointer to the stop reason of a whole answer.
    pub whole_stop: String,
}

/// Model id prefixes (after any geography prefix of a cross-region profile) and families.
const PREFIXES: [(&str, &str); 5] = [
    ("anthropic.", "anthropic"),
    ("meta.", "llama"),
    ("mistral.", "mistral"),
    ("amazon.titan-text", "titan"),
    ("amazon.nova", "nova"),
];

/// The built-in families' names.
pub const FAMILIES: [&str; 5] = ["anthropic", "llama", "mistral", "titan", "nova"];

fn p(s: &str) -> String {
    s.to_owned()
}

impl Family {
    /// A built-in family by name.
    pub fn named(name: &str) -> Result<Self, AwsError> {
        let f =
            |body: Value, chunk_text: &str, stop: &[&str], whole_text: &str, whole_stop: &str| {
                Self {
                    name: name.to_owned(),
                    body,
                    chunk_text: p(chunk_text),
                    chunk_reasoning: None,
                    chunk_stop: stop.iter().map(|s| p(s)).collect(),
                    whole_text: p(whole_text),
                    whole_stop: p(whole_stop),
                }
            };
        Ok(match name {
            // Anthropic's Messages API on Bedrock: its SSE events' JSON, one per chunk.
            "anthropic" => Self {
                chunk_reasoning: Some(p("/delta/thinking")),
                ..f(
                    json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": "{{max_tokens}}",
                           "system": "{{system}}", "messages": "{{chat}}",
                           "temperature": "{{temperature}}", "top_p": "{{top_p}}"}),
                    "/delta/text",
                    &["/delta/stop_reason"],
                    "/content/0/text",
                    "/stop_reason",
                )
            },
            // Llama 3's chat template around the prompt.
            "llama" => f(
                json!({"prompt": "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n{{prompt}}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
                       "max_gen_len": "{{max_tokens}}", "temperature": "{{temperature}}", "top_p": "{{top_p}}"}),
                "/generation",
                &["/stop_reason"],
                "/generation",
                "/stop_reason",
            ),
            "mistral" => f(
                json!({"prompt": "<s>[INST] {{prompt}} [/INST]", "max_tokens": "{{max_tokens}}",
                       "temperature": "{{temperature}}", "top_p": "{{top_p}}"}),
                "/outputs/0/text",
                &["/outputs/0/stop_reason"],
                "/outputs/0/text",
                "/outputs/0/stop_reason",
            ),
            "titan" => f(
                json!({"inputText": "{{prompt}}",
                       "textGenerationConfig": {"maxTokenCount": "{{max_tokens}}",
                                                "temperature": "{{temperature}}", "topP": "{{top_p}}"}}),
                "/outputText",
                &["/completionReason"],
                "/results/0/outputText",
                "/results/0/completionReason",
            ),
            // Nova's native body; its stream is Converse's events, one per chunk.
            "nova" => Self {
                chunk_reasoning: Some(p("/contentBlockDelta/delta/reasoningContent/text")),
                ..f(
                    json!({"schemaVersion": "messages-v1", "system": "{{system_blocks}}",
                           "messages": "{{chat_blocks}}",
                           "inferenceConfig": {"maxTokens": "{{max_tokens}}",
                                               "temperature": "{{temperature}}", "topP": "{{top_p}}"}}),
                    "/contentBlockDelta/delta/text",
                    &["/messageStop/stopReason"],
                    "/output/message/content/0/text",
                    "/stopReason",
                )
            },
            _ => {
                return Err(AwsError::NoSuchFamily {
                    name: name.to_owned(),
                    known: FAMILIES.join(", "),
                })
            }
        })
    }

    /// The family of a model id, a cross-region inference profile id (`us.anthropic.…`) or
    /// a foundation-model or inference-profile ARN; `None` where the id does not say
    /// (provisioned throughput, application inference profiles, custom models).
    pub fn for_model(model_id: &str) -> Option<Self> {
        let id = model_id.rsplit('/').next().unwrap_or(model_id);
        let stripped = ["us.", "eu.", "apac.", "us-gov.", "global.", "jp.", "au.", "ca."]
            .iter()
            .find_map(|g| id.strip_prefix(g))
            .unwrap_or(id);
        let name = PREFIXES.iter().find(|(pre, _)| stripped.starts_with(pre)).map(|(_, n)| *n)?;
        Self::named(name).ok()
    }

    /// A user-given family: a JSON body template and pointers to the text of each streamed
    /// chunk and of a whole answer.
    pub fn custom(body: Value, chunk_text: &str, whole_text: &str) -> Self {
        Self {
            name: "custom".into(),
            body,
            chunk_text: p(chunk_text),
            chunk_reasoning: None,
            chunk_stop: Vec::new(),
            whole_text: p(whole_text),
            whole_stop: String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_told_from_ids_profiles_and_arns() {
        let name = |id: &str| Family::for_model(id).map(|f| f.name);
        assert_eq!(name("anthropic.claude-3-haiku-20240307-v1:0").as_deref(), Some("anthropic"));
        assert_eq!(
            name("eu.anthropic.claude-3-7-sonnet-20250219-v1:0").as_deref(),
            Some("anthropic")
        );
        assert_eq!(name("us.meta.llama3-3-70b-instruct-v1:0").as_deref(), Some("llama"));
        assert_eq!(name("mistral.mistral-7b-instruct-v0:2").as_deref(), Some("mistral"));
        assert_eq!(name("amazon.titan-text-express-v1").as_deref(), Some("titan"));
        assert_eq!(name("amazon.nova-lite-v1:0").as_deref(), Some("nova"));
        assert_eq!(
            name("arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.meta.llama3-1-8b-instruct-v1:0").as_deref(),
            Some("llama")
        );
        assert_eq!(
            name("arn:aws:bedrock:us-west-2::foundation-model/anthropic.claude-v2").as_deref(),
            Some("anthropic")
        );
        assert_eq!(name("arn:aws:bedrock:us-east-1:123456789012:provisioned-model/a1b2c3"), None);
        assert_eq!(name("cohere.command-r-v1:0"), None);
        let e = Family::named("gpt").unwrap_err().to_string();
        assert!(e.contains("\"gpt\"") && e.contains("anthropic, llama"), "{e}");
    }
}
