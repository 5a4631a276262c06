//! A tokenizer named by its Hugging Face model id is looked up in the local cache; when it
//! is not there it is downloaded into the cache (`HF_ENDPOINT`, default the hub; `HF_TOKEN`
//! for gated models), within 30 seconds. The workload crate itself never touches the network.

use std::path::Path;
use std::time::Duration;

use quetta_http::fetch::ApiKey;
use quetta_workload::tokenizer::{hf_cache_dir, Tokenizer};

use quetta_engine::setting::Setting;

use crate::{Error, Result};

/// Make `spec` (a path or `org/name`) resolvable locally, downloading its `tokenizer.json`
/// into the Hugging Face cache when it is a model id not in the cache.
pub async fn ensure_tokenizer(spec: Option<&str>) -> Result<()> {
    let Some(spec) = spec else { return Ok(()) };
    let local = Tokenizer::resolve(spec);
    let looks_like_id =
        !spec.contains("..") && spec.split('/').count() == 2 && !Path::new(spec).exists();
    let Err(local_err) = local else { return Ok(()) };
    if !looks_like_id {
        return Err(local_err.into());
    }
    let endpoint = std::env::var("HF_ENDPOINT").unwrap_or_else(|_| "https://huggingface.co".into());
    let url = format!("{}/{spec}/resolve/main/tokenizer.json", endpoint.trim_end_matches('/'));
    let token = std::env::var("HF_TOKEN").ok().filter(|t| !t.is_empty()).map(ApiKey::new);
    let bytes = quetta_http::fetch::get(&url, token.as_ref(), Duration::from_secs(30), 64 << 20)
        .await
        .map_err(|source| {
            Error::Target(crate::TargetError::Download {
                spec: spec.to_owned(),
                url: url.clone(),
                source,
            })
        })?;
    let cache = hf_cache_dir().ok_or_else(|| {
        Error::invalid(
            Setting::Tokenizer,
            format!("{spec}: no cache directory to download it to (set HF_HOME or HOME)"),
        )
    })?;
    let (org, name) = spec.split_once('/').ok_or_else(|| {
        Error::invalid(Setting::Tokenizer, format!("{spec}: a model id is org/name"))
    })?;
    let dir =
        cache.join(format!("models--{org}--{name}")).join("snapshots").join("quetta-download");
    let werr = |p: &Path, source: std::io::Error| Error::Write { path: p.to_owned(), source };
    std::fs::create_dir_all(&dir).map_err(|e| werr(&dir, e))?;
    let file = dir.join("tokenizer.json");
    std::fs::write(&file, &bytes).map_err(|e| werr(&file, e))?;
    Tokenizer::from_file(&file).map(|_| ()).map_err(|e| {
        Error::invalid(
            quetta_engine::setting::Setting::Tokenizer,
            format!("{spec}: the downloaded file does not load: {e}"),
        )
    })
}
