//! `requests.parquet`: the request records as one Parquet row group (Snappy), with the same
//! columns as the CSV export; absent values are nulls.

use std::sync::Arc;

use parquet::basic::Compression;
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, DoubleType, Int32Type, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use quetta_metrics::RequestRecord;

/// The Parquet schema of the export.
pub const SCHEMA: &str = "message request {
  required int64 id;
  optional binary session_id (UTF8);
  optional int32 turn;
  required double intended_offset_ms;
  required double started_offset_ms;
  optional double sent_offset_ms;
  optional double first_token_offset_ms;
  required double end_offset_ms;
  optional double ttft_ms;
  optional double ttfo_ms;
  optional double tpot_ms;
  optional double e2e_ms;
  optional double ttft_from_intended_ms;
  optional double e2e_from_intended_ms;
  required double queue_ms;
  required double schedule_lag_ms;
  required int64 itl_count;
  optional double itl_mean_ms;
  required int64 token_chunks;
  optional int64 input_tokens;
  required binary input_token_source (UTF8);
  optional int64 output_tokens;
  required binary output_token_source (UTF8);
  optional int64 cached_tokens;
  required int64 planned_input_tokens;
  required int64 planned_output_tokens;
  required boolean streamed;
  optional int32 status;
  optional binary finish_reason (UTF8);
  optional boolean connection_reused;
  required int32 attempts;
  optional binary error_kind (UTF8);
  optional binary error (UTF8);
  optional int64 inputs;
  optional double audio_s;
  optional double server_prefill_ms;
  optional double server_tpot_ms;
  optional double server_ttft_ms;
  optional double server_e2e_ms;
}";

/// Writing the Parquet file failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ParquetError {
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
}

type Get<T> = fn(&RequestRecord) -> Option<T>;

enum Col {
    I64(Get<i64>),
    I32(Get<i32>),
    F64(Get<f64>),
    Str(fn(&RequestRecord) -> Option<String>),
    Bool(Get<bool>),
}

fn i64_of(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn columns() -> Vec<(bool, Col)> {
    // (optional, getter), in schema order
    vec![
        (false, Col::I64(|r| Some(i64_of(r.id)))),
        (true, Col::Str(|r| r.session_id.clone())),
        (true, Col::I32(|r| r.turn.map(|t| t as i32))),
        (false, Col::F64(|r| Some(r.intended_offset_ms))),
        (false, Col::F64(|r| Some(r.started_offset_ms))),
        (true, Col::F64(|r| r.sent_offset_ms)),
        (true, Col::F64(|r| r.first_token_offset_ms)),
        (false, Col::F64(|r| Some(r.end_offset_ms))),
        (true, Col::F64(|r| r.ttft_ms)),
        (true, Col::F64(|r| r.ttfo_ms)),
        (true, Col::F64(|r| r.tpot_ms)),
        (true, Col::F64(|r| r.e2e_ms)),
        (true, Col::F64(|r| r.ttft_from_intended_ms)),
        (true, Col::F64(|r| r.e2e_from_intended_ms)),
        (false, Col::F64(|r| Some(r.queue_ms))),
        (false, Col::F64(|r| Some(r.schedule_lag_ms))),
        (false, Col::I64(|r| Some(r.itl_us.len() as i64))),
        (true, Col::F64(RequestRecord::itl_mean_ms)),
        (false, Col::I64(|r| Some(i64::from(r.token_chunks)))),
        (true, Col::I64(|r| r.input_tokens.map(i64_of))),
        (false, Col::Str(|r| Some(r.input_token_source.as_str().to_owned()))),
        (true, Col::I64(|r| r.output_tokens.map(i64_of))),
        (false, Col::Str(|r| Some(r.output_token_source.as_str().to_owned()))),
        (true, Col::I64(|r| r.cached_tokens.map(i64_of))),
        (false, Col::I64(|r| Some(i64::from(r.planned_input_tokens)))),
        (false, Col::I64(|r| Some(i64::from(r.planned_output_tokens)))),
        (false, Col::Bool(|r| Some(r.streamed))),
        (true, Col::I32(|r| r.status.map(i32::from))),
        (true, Col::Str(|r| r.finish_reason.clone())),
        (true, Col::Bool(|r| r.connection_reused)),
        (false, Col::I32(|r| Some(r.attempts as i32))),
        (true, Col::Str(|r| r.error_kind.clone())),
        (true, Col::Str(|r| r.error.clone())),
        (true, Col::I64(|r| r.inputs.map(i64::from))),
        (true, Col::F64(|r| r.audio_s)),
        (true, Col::F64(|r| r.server_prefill_ms)),
        (true, Col::F64(|r| r.server_tpot_ms)),
        (true, Col::F64(|r| r.server_ttft_ms)),
        (true, Col::F64(|r| r.server_e2e_ms)),
    ]
}

/// Values and definition levels of one column.
fn gather<T>(
    recs: &[RequestRecord],
    optional: bool,
    get: impl Fn(&RequestRecord) -> Option<T>,
) -> (Vec<T>, Option<Vec<i16>>) {
    let mut vals = Vec::with_capacity(recs.len());
    let mut defs = Vec::with_capacity(recs.len());
    for r in recs {
        match get(r) {
            Some(v) => {
                vals.push(v);
                defs.push(1);
            }
            None => defs.push(0),
        }
    }
    (vals, optional.then_some(defs))
}

/// Write the records as Parquet to `w` (one row group).
pub fn write<W: std::io::Write + Send>(recs: &[RequestRecord], w: W) -> Result<(), ParquetError> {
    let mut pw = Writer::new(w)?;
    pw.row_group(recs)?;
    pw.finish()
}

/// A Parquet file written one row group at a time: memory holds one group's records.
pub struct Writer<W: std::io::Write + Send> {
    fw: SerializedFileWriter<W>,
}

impl<W: std::io::Write + Send> std::fmt::Debug for Writer<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("parquet::Writer(..)")
    }
}

impl<W: std::io::Write + Send> Writer<W> {
    pub fn new(w: W) -> Result<Self, ParquetError> {
        let schema = Arc::new(parse_message_type(SCHEMA)?);
        let props =
            Arc::new(WriterProperties::builder().set_compression(Compression::SNAPPY).build());
        Ok(Self { fw: SerializedFileWriter::new(w, schema, props)? })
    }

    /// Write `recs` as the next row group.
    pub fn row_group(&mut self, recs: &[RequestRecord]) -> Result<(), ParquetError> {
        let mut rg = self.fw.next_row_group()?;
        let cols = columns();
        let mut i = 0;
        while let Some(mut cw) = rg.next_column()? {
            let (optional, col) = &cols[i];
            i += 1;
            match col {
                Col::I64(g) => {
                    let (v, d) = gather(recs, *optional, g);
                    cw.typed::<Int64Type>().write_batch(&v, d.as_deref(), None)?;
                }
                Col::I32(g) => {
                    let (v, d) = gather(recs, *optional, g);
                    cw.typed::<Int32Type>().write_batch(&v, d.as_deref(), None)?;
                }
                Col::F64(g) => {
                    let (v, d) = gather(recs, *optional, g);
                    cw.typed::<DoubleType>().write_batch(&v, d.as_deref(), None)?;
                }
                Col::Bool(g) => {
                    let (v, d) = gather(recs, *optional, g);
                    cw.typed::<BoolType>().write_batch(&v, d.as_deref(), None)?;
                }
                Col::Str(g) => {
                    let (v, d) =
                        gather(recs, *optional, |r| g(r).map(|s| ByteArray::from(s.into_bytes())));
                    cw.typed::<ByteArrayType>().write_batch(&v, d.as_deref(), None)?;
                }
            }
            cw.close()?;
        }
        rg.close()?;
        Ok(())
    }

    /// Write the footer and flush: an error writing the file's end is an error.
    pub fn finish(self) -> Result<(), ParquetError> {
        let mut w = self.fw.into_inner()?;
        w.flush().map_err(|e| {
            ParquetError::Parquet(parquet::errors::ParquetError::External(Box::new(e)))
        })?;
        Ok(())
    }
}
