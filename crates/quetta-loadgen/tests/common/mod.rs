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

/// An engine that keeps a copy of every request it is given, then lets an inner engine
/// send it.
pub struct Logging<E> {
    pub inner: E,
    pub sent: Mutex<Vec<quetta_engine::EngineRequest>>,
}

impl<E> Logging<E> {
    pub fn new(inner: E) -> Self {
        Self { inner, sent: Mutex::new(Vec::new()) }
    }
}

impl<E: quetta_engine::Engine> quetta_engine::Engine for Logging<E> {
    fn name(&self) -> &'static str {
        "logging"
    }
    fn send(&self, request: quetta_engine::EngineRequest) -> quetta_engine::EventStream {
        self.sent.lock().unwrap().push(request.clone());
        self.inner.send(request)
    }
}
