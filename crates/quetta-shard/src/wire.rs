//! The messages, one JSON object per line.

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use crate::ShardError;

/// A member to shard 0.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "m", rename_all = "snake_case")]
pub(crate) enum Up {
    Hello {
        index: u32,
        count: u32,
        fingerprint: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        secret: Option<crate::ShardSecret>,
    },
    Ping {
        t1: i64,
    },
    Synced {
        offset_ns: i64,
        rtt_ns: u64,
    },
    Ready {
        planned: Option<u64>,
    },
    Started {
        skew_ns: i64,
    },
    Record {
        line: String,
    },
    File {
        name: String,
        text: String,
    },
    Done,
}

/// Shard 0 to a member.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "m", rename_all = "snake_case")]
pub(crate) enum Down {
    Welcome,
    Pong {
        t1: i64,
        t2: i64,
        t3: i64,
    },
    Joined,
    Start {
        at_unix_ns: i64,
    },
    Received {
        records: u64,
    },
    Abort {
        reason: String,
    },
    /// Stop sending (shard 0 was stopped): drain, mark the results partial, send them.
    Stop {
        reason: String,
    },
}

/// The longest line either side accepts (a record of a long stream, a summary).
pub(crate) const MAX_LINE: usize = 64 << 20;

pub(crate) async fn send<T: Serialize>(
    w: &mut (impl AsyncWriteExt + Unpin),
    msg: &T,
) -> Result<(), ShardError> {
    let mut line = serde_json::to_vec(msg).map_err(|e| ShardError::Protocol(e.to_string()))?;
    line.push(b'\n');
    w.write_all(&line).await.map_err(|e| ShardError::Protocol(format!("send: {e}")))
}

/// The next message, `None` at the end of the connection.
pub(crate) async fn recv<T: for<'de> Deserialize<'de>>(
    r: &mut (impl AsyncBufReadExt + Unpin),
    buf: &mut Vec<u8>,
) -> Result<Option<T>, ShardError> {
    buf.clear();
    let n = (&mut *r)
        .take(MAX_LINE as u64 + 1)
        .read_until(b'\n', buf)
        .await
        .map_err(|e| ShardError::Protocol(format!("receive: {e}")))?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() != Some(&b'\n') {
        return Err(ShardError::Protocol(if n > MAX_LINE {
            format!("a message longer than {MAX_LINE} bytes")
        } else {
            "the connection ended in the middle of a message".into()
        }));
    }
    serde_json::from_slice(buf)
        .map(Some)
        .map_err(|e| ShardError::Protocol(format!("not a shard message: {e}")))
}

use tokio::io::AsyncReadExt as _;
