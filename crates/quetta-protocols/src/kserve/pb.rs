//! The messages of `inference.GRPCInferenceService` a benchmark sends and reads, from the
//! published protobuf (`crates/quetta-protocols/proto/grpc_service.proto`, Triton's common
//! repository, BSD-3-Clause; KServe's open inference protocol v2 plus Triton's streaming
//! extension). They are written with prost's derive, field for field what prost-build
//! generates from that file, and checked in rather than generated at build time: no protoc
//! and no build script in the build. Their wire format is tested against a server built on
//! the stubs `tritonclient` generates from the same file (`tests/kserve.rs`).

use std::collections::BTreeMap;

/// `ServerLiveRequest {}`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ServerLiveRequest {}

/// `ServerLiveResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ServerLiveResponse {
    #[prost(bool, tag = "1")]
    pub live: bool,
}

/// `ModelReadyRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelReadyRequest {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

/// `ModelReadyResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelReadyResponse {
    #[prost(bool, tag = "1")]
    pub ready: bool,
}

/// `ModelMetadataRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelMetadataRequest {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

/// `ModelMetadataResponse.TensorMetadata`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub datatype: String,
    #[prost(int64, repeated, tag = "3")]
    pub shape: Vec<i64>,
}

/// `ModelMetadataResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelMetadataResponse {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, repeated, tag = "2")]
    pub versions: Vec<String>,
    #[prost(string, tag = "3")]
    pub platform: String,
    #[prost(message, repeated, tag = "4")]
    pub inputs: Vec<TensorMetadata>,
    #[prost(message, repeated, tag = "5")]
    pub outputs: Vec<TensorMetadata>,
}

/// `InferParameter`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InferParameter {
    #[prost(oneof = "Parameter", tags = "1, 2, 3, 4, 5")]
    pub parameter_choice: Option<Parameter>,
}

/// `InferParameter.parameter_choice`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Parameter {
    #[prost(bool, tag = "1")]
    BoolParam(bool),
    #[prost(int64, tag = "2")]
    Int64Param(i64),
    #[prost(string, tag = "3")]
    StringParam(String),
    #[prost(double, tag = "4")]
    DoubleParam(f64),
    #[prost(uint64, tag = "5")]
    Uint64Param(u64),
}

impl InferParameter {
    pub fn bool(v: bool) -> Self {
        Self { parameter_choice: Some(Parameter::BoolParam(v)) }
    }
}

/// `InferTensorContents`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InferTensorContents {
    #[prost(bool, repeated, tag = "1")]
    pub bool_contents: Vec<bool>,
    #[prost(int32, repeated, tag = "2")]
    pub int_contents: Vec<i32>,
    #[prost(int64, repeated, tag = "3")]
    pub int64_contents: Vec<i64>,
    #[prost(uint32, repeated, tag = "4")]
    pub uint_contents: Vec<u32>,
    #[prost(uint64, repeated, tag = "5")]
    pub uint64_contents: Vec<u64>,
    #[prost(float, repeated, tag = "6")]
    pub fp32_contents: Vec<f32>,
    #[prost(double, repeated, tag = "7")]
    pub fp64_contents: Vec<f64>,
    #[prost(bytes = "vec", repeated, tag = "8")]
    pub bytes_contents: Vec<Vec<u8>>,
}

/// `ModelInferRequest.InferInputTensor` and `ModelInferResponse.InferOutputTensor` (the
/// same fields).
#[derive(Clone, PartialEq, prost::Message)]
pub struct InferTensor {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub datatype: String,
    #[prost(int64, repeated, tag = "3")]
    pub shape: Vec<i64>,
    #[prost(btree_map = "string, message", tag = "4")]
    pub parameters: BTreeMap<String, InferParameter>,
    #[prost(message, optional, tag = "5")]
    pub contents: Option<InferTensorContents>,
}

/// `ModelInferRequest.InferRequestedOutputTensor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InferRequestedOutputTensor {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(btree_map = "string, message", tag = "2")]
    pub parameters: BTreeMap<String, InferParameter>,
}

/// `ModelInferRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelInferRequest {
    #[prost(string, tag = "1")]
    pub model_name: String,
    #[prost(string, tag = "2")]
    pub model_version: String,
    #[prost(string, tag = "3")]
    pub id: String,
    #[prost(btree_map = "string, message", tag = "4")]
    pub parameters: BTreeMap<String, InferParameter>,
    #[prost(message, repeated, tag = "5")]
    pub inputs: Vec<InferTensor>,
    #[prost(message, repeated, tag = "6")]
    pub outputs: Vec<InferRequestedOutputTensor>,
    #[prost(bytes = "vec", repeated, tag = "7")]
    pub raw_input_contents: Vec<Vec<u8>>,
}

/// `ModelInferResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelInferResponse {
    #[prost(string, tag = "1")]
    pub model_name: String,
    #[prost(string, tag = "2")]
    pub model_version: String,
    #[prost(string, tag = "3")]
    pub id: String,
    #[prost(btree_map = "string, message", tag = "4")]
    pub parameters: BTreeMap<String, InferParameter>,
    #[prost(message, repeated, tag = "5")]
    pub outputs: Vec<InferTensor>,
    #[prost(bytes = "vec", repeated, tag = "6")]
    pub raw_output_contents: Vec<Vec<u8>>,
}

/// `ModelStreamInferResponse`: one answer of the decoupled stream, or its error.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelStreamInferResponse {
    #[prost(string, tag = "1")]
    pub error_message: String,
    #[prost(message, optional, tag = "2")]
    pub infer_response: Option<ModelInferResponse>,
}
