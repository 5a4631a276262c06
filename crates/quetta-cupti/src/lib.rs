//! `quetta-cupti`: a CUDA injection library that records kernel activity through CUPTI.
//!
//! Build it with the `cupti` feature (`cargo build --release -p quetta-cupti --features
//! cupti`; no CUDA installation is needed to build: CUDA and CUPTI are loaded at run time),
//! then start the inference server with
//!
//! ```sh
//! CUDA_INJECTION64_PATH=target/release/libquetta_cupti.so \
//! QUETTA_CUPTI_OUT=kernels.csv  vllm serve ...
//! ```
//!
//! CUDA calls `InitializeInjection` when the server creates its first context; the library
//! enables CUPTI's concurrent-kernel activity records and appends one CSV line per kernel
//! ([`CSV_HEADER`]) as CUPTI hands back its buffers, flushing every second and at exit.
//! `quetta-probe kernels kernels.csv` summarises the file. Without CUPTI at run time (no
//! driver, or `libcupti.so` not on the library path) it prints one clear line and records
//! nothing; the server runs on.

/// The header of the kernels CSV (times in nanoseconds on CUPTI's clock).
pub const CSV_HEADER: &str =
    "name,start_ns,end_ns,grid_x,grid_y,grid_z,block_x,block_y,block_z,stream,correlation";

/// One kernel as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelRecord {
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub grid: [i32; 3],
    pub block: [i32; 3],
    pub stream: u32,
    pub correlation: u32,
}

impl KernelRecord {
    /// The CSV line (without the newline); the name is quoted when it needs to be
    /// (C++ template names hold commas).
    pub fn csv_line(&self) -> String {
        let name = if self.name.contains([',', '"', '\n']) {
            format!("\"{}\"", self.name.replace('"', "\"\"").replace('\n', " "))
        } else {
            self.name.clone()
        };
        format!(
            "{name},{},{},{},{},{},{},{},{},{},{}",
            self.start_ns,
            self.end_ns,
            self.grid[0],
            self.grid[1],
            self.grid[2],
            self.block[0],
            self.block[1],
            self.block[2],
            self.stream,
            self.correlation
        )
    }
}

#[cfg(feature = "cupti")]
mod inject;

/// Without the `cupti` feature the entry point exists only to say so.
#[cfg(not(feature = "cupti"))]
#[allow(unsafe_code)] // `no_mangle`: the symbol CUDA looks up by name
#[no_mangle]
pub extern "C" fn InitializeInjection() -> std::ffi::c_int {
    eprintln!(
        "quetta-cupti: built without the `cupti` feature; rebuild it with its `cupti` cargo feature. No kernels are recorded."
    );
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_lines_quote_template_names() {
        let r = KernelRecord {
            name: "void gemm<float, 128>(\"x\")".into(),
            start_ns: 10,
            end_ns: 25,
            grid: [4, 2, 1],
            block: [128, 1, 1],
            stream: 7,
            correlation: 99,
        };
        assert_eq!(r.csv_line(), "\"void gemm<float, 128>(\"\"x\"\")\",10,25,4,2,1,128,1,1,7,99");
        assert_eq!(CSV_HEADER.split(',').count(), r.csv_line().rsplitn(11, ',').count());
    }
}

#[cfg(all(test, not(feature = "cupti")))]
mod entry {
    #[test]
    fn without_the_feature_the_entry_point_refuses() {
        assert_eq!(super::InitializeInjection(), 0);
    }
}
