//! The injection entry point and CUPTI's buffer callbacks (FFI; the only unsafe code of
//! the project).
#![allow(unsafe_code)]

use std::ffi::{c_int, CStr};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use cudarc::cupti::sys::{
    cuptiActivityEnable, cuptiActivityFlushAll, cuptiActivityGetNextRecord,
    cuptiActivityRegisterCallbacks, is_culib_present, CUptiResult, CUpti_Activity,
    CUpti_ActivityKernel6, CUpti_ActivityKind,
};

use cudarc::driver::sys::CUcontext;

use crate::KernelRecord;

static OUT: OnceLock<Mutex<BufWriter<File>>> = OnceLock::new();

/// CUPTI's buffers: 8 MiB, 8-byte aligned (records are `packed(8)`).
const BUF: usize = 8 << 20;
const ALIGN: usize = 8;

fn layout() -> std::alloc::Layout {
    std::alloc::Layout::from_size_align(BUF, ALIGN).expect("valid layout")
}

unsafe extern "C" fn buffer_requested(
    buffer: *mut *mut u8,
    size: *mut usize,
    max_records: *mut usize,
) {
    // SAFETY: CUPTI passes valid out-pointers; the buffer is freed in `buffer_completed`.
    unsafe {
        *buffer = std::alloc::alloc(layout());
        *size = if (*buffer).is_null() { 0 } else { BUF };
        *max_records = 0;
    }
}

unsafe extern "C" fn buffer_completed(
    _ctx: CUcontext,
    _stream: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    if buffer.is_null() {
        return;
    }
    let mut lines = Vec::new();
    let mut rec: *mut CUpti_Activity = std::ptr::null_mut();
    loop {
        // SAFETY: `buffer` holds `valid` bytes of records written by CUPTI.
        let r = unsafe { cuptiActivityGetNextRecord(buffer, valid, &raw mut rec) };
        if r != CUptiResult::CUPTI_SUCCESS || rec.is_null() {
            break;
        }
        // SAFETY: `rec` points at a record whose first field is its kind.
        let kind = unsafe { (*rec).kind };
        if matches!(
            kind,
            CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_KERNEL
                | CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
        ) {
            // SAFETY: kernel records of every CUPTI version since 4 share this prefix.
            let k = unsafe { std::ptr::read_unaligned(rec.cast::<CUpti_ActivityKernel6>()) };
            let name = if k.name.is_null() {
                String::from("?")
            } else {
                // SAFETY: CUPTI gives a NUL-terminated name valid for the buffer's life.
                unsafe { CStr::from_ptr(k.name) }.to_string_lossy().into_owned()
            };
            lines.push(
                KernelRecord {
                    name,
                    start_ns: k.start,
                    end_ns: k.end,
                    grid: [k.gridX, k.gridY, k.gridZ],
                    block: [k.blockX, k.blockY, k.blockZ],
                    stream: k.streamId,
                    correlation: k.correlationId,
                }
                .csv_line(),
            );
        }
    }
    // SAFETY: allocated in `buffer_requested` with the same layout.
    unsafe { std::alloc::dealloc(buffer, layout()) };
    if let Some(out) = OUT.get() {
        let mut w = out.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for l in lines {
            let _ = writeln!(w, "{l}");
        }
        let _ = w.flush();
    }
}

extern "C" fn flush_at_exit() {
    // SAFETY: CUPTI was initialised by `InitializeInjection` (this is registered after).
    unsafe {
        let _ = cuptiActivityFlushAll(1);
    }
    if let Some(out) = OUT.get() {
        let _ = out.lock().unwrap_or_else(std::sync::PoisonError::into_inner).flush();
    }
}

extern "C" {
    fn atexit(f: extern "C" fn()) -> c_int;
}

/// Called by CUDA (through `CUDA_INJECTION64_PATH`) when the first context is created.
/// Returns 1 on success, 0 when nothing will be recorded.
#[no_mangle]
pub extern "C" fn InitializeInjection() -> c_int {
    // SAFETY: a check that libcupti can be loaded, nothing more.
    if !unsafe { is_culib_present() } {
        eprintln!("quetta-cupti: libcupti could not be loaded (no NVIDIA driver, or CUDA's extras/CUPTI/lib64 is not on LD_LIBRARY_PATH); no kernels are recorded");
        return 0;
    }
    let path = std::env::var("QUETTA_CUPTI_OUT")
        .unwrap_or_else(|_| format!("quetta-kernels-{}.csv", std::process::id()));
    let file = match File::create(&path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("quetta-cupti: cannot create {path}: {e}; no kernels are recorded");
            return 0;
        }
    };
    let mut w = BufWriter::new(file);
    let _ = writeln!(w, "{}", crate::CSV_HEADER);
    let _ = OUT.set(Mutex::new(w));
    // SAFETY: registering plain functions with CUPTI's C signatures.
    let r =
        unsafe { cuptiActivityRegisterCallbacks(Some(buffer_requested), Some(buffer_completed)) };
    if r != CUptiResult::CUPTI_SUCCESS {
        eprintln!(
            "quetta-cupti: cuptiActivityRegisterCallbacks failed ({r:?}); no kernels are recorded"
        );
        return 0;
    }
    // SAFETY: enabling an activity kind after the callbacks are registered.
    let r =
        unsafe { cuptiActivityEnable(CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) };
    if r != CUptiResult::CUPTI_SUCCESS {
        eprintln!("quetta-cupti: enabling kernel activity failed ({r:?}); no kernels are recorded");
        return 0;
    }
    // SAFETY: registering a plain `extern "C" fn()` with the C runtime.
    unsafe {
        atexit(flush_at_exit);
    }
    // Completed buffers reach the file at least every second.
    let _ = std::thread::Builder::new().name("quetta-cupti-flush".into()).spawn(|| loop {
        std::thread::sleep(Duration::from_secs(1));
        // SAFETY: CUPTI is initialised; a non-forced flush hands back full buffers only.
        unsafe {
            let _ = cuptiActivityFlushAll(0);
        }
    });
    eprintln!("quetta-cupti: recording CUDA kernels to {path}");
    1
}
