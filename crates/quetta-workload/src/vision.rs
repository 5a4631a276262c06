//! Vision requests: any chat workload with images attached to the last user message, as
//! base64 `data:` URLs (the bundled test image, or the user's files). Image tokens are not
//! planned here: the server's `usage.prompt_tokens` reports them.

use std::path::Path;

use base64::Engine as _;
use quetta_engine::{ContentPart, ImageRef, MessageContent, Prompt};

use crate::{read_bytes, PlannedRequest, Workload, WorkloadError};

/// The bundled 96×96 PNG test image (made for this project; no licence restrictions).
pub const TEST_IMAGE_PNG: &[u8] = include_bytes!("../assets/quetta-test-image.png");

/// An image as a `data:` URL.
pub fn data_url(bytes: &[u8], mime: &str) -> String {
    format!("data:{mime};base64,{}", base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// Read an image file into a `data:` URL (PNG, JPEG, GIF or WebP, by content).
pub fn load_image(path: &Path) -> Result<String, WorkloadError> {
    let b = read_bytes(path)?;
    let mime = match b.get(..12) {
        Some(h) if h.starts_with(b"\x89PNG\r\n\x1a\n") => "image/png",
        Some([0xFF, 0xD8, 0xFF, ..]) => "image/jpeg",
        Some(h) if h.starts_with(b"GIF8") => "image/gif",
        Some(h) if h.starts_with(b"RIFF") && &h[8..12] == b"WEBP" => "image/webp",
        _ => {
            return Err(crate::parse_err(path, 1, "(image)", "not a PNG, JPEG, GIF or WebP image"))
        }
    };
    Ok(data_url(&b, mime))
}

/// A workload whose chat requests carry images: request `i` gets image `i mod n`.
pub struct WithImages<W> {
    pub inner: W,
    pub images: Vec<String>,
    pub per_request: usize,
}

impl<W> std::fmt::Debug for WithImages<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WithImages").field("images", &self.images.len()).finish_non_exhaustive()
    }
}

impl<W: Workload> Workload for WithImages<W> {
    fn request(&mut self, index: u64) -> Option<PlannedRequest> {
        let mut p = self.inner.request(index)?;
        if let Prompt::Chat(msgs) = &mut p.prompt {
            if let Some(m) = msgs.iter_mut().rev().find(|m| m.role == "user") {
                let text = m.text_content();
                let mut parts = vec![ContentPart::Text { text }];
                let n = self.images.len().max(1);
                for k in 0..self.per_request.max(1) {
                    let url =
                        self.images[(index as usize * self.per_request.max(1) + k) % n].clone();
                    parts.push(ContentPart::ImageUrl { image_url: ImageRef { url } });
                }
                m.content = MessageContent::Parts(parts);
            }
        }
        Some(p)
    }

    fn error(&self) -> Option<crate::WorkloadError> {
        self.inner.error()
    }
}
