//! Helpers shared by the load generator's tests.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use quetta_loadgen::RecordSink;
use quetta_metrics::RequestRecord;

/// A sink that keeps records in memory.
#[derive(Clone, Default)]
pub struct VecSink(pub Arc<Mutex<Vec<RequestRecord>>>);

impl RecordSink for VecSink {
    fn write(&mut self, rec: &RequestRecord) -> std::io::Result<()> {
        self.0.lock().unwrap().push(rec.clone());
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
