//! Summaries of CUDA kernel activity recorded by the `quetta-cupti` injection library (or
//! any tool writing the same CSV): `name,start_ns,end_ns,grid_x,grid_y,grid_z,block_x,
//! block_y,block_z,stream,correlation`, one kernel per line, times on the GPU's clock.
//!
//! Kernels are grouped into families by name (GEMM, attention, normalisation, activation,
//! sampling, communication, memory, other) and into steps: a gap with no kernel running
//! longer than `step_gap` separates two steps (a decode step launches its kernels back to
//! back, then the host schedules the next).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

/// One kernel execution.
#[derive(Debug, Clone, PartialEq)]
pub struct Kernel {
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
    pub stream: u32,
}

/// A kernels file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KernelsError {
    #[error("{path}: {reason}")]
    Io { path: String, reason: String },
    #[error("{path}:{line}: field {field}: {reason}")]
    Parse { path: String, line: usize, field: &'static str, reason: String },
}

/// Split a CSV line, honouring double quotes (kernel names contain commas).
fn split_csv(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut q = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, q) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => q = !q,
            (',', false) => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out
}

/// Read a kernels CSV (a header line first).
pub fn load(path: &Path) -> Result<Vec<Kernel>, KernelsError> {
    let text = std::fs::read_to_string(path).map_err(|e| KernelsError::Io {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    parse(&text, path)
}

/// Parse a kernels CSV (a header line first; `path` names it in errors).
pub fn parse(text: &str, path: &Path) -> Result<Vec<Kernel>, KernelsError> {
    let p = path.display().to_string();
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate().skip(1) {
        if l.trim().is_empty() {
            continue;
        }
        let f = split_csv(l);
        let bad = |field, reason: &str| KernelsError::Parse {
            path: p.clone(),
            line: i + 1,
            field,
            reason: reason.into(),
        };
        if f.len() < 10 {
            return Err(bad("(line)", "expected at least 10 fields"));
        }
        let num = |k: usize, field| {
            f[k].trim().parse::<u64>().map_err(|_| bad(field, "not a whole number"))
        };
        let (start_ns, end_ns) = (num(1, "start_ns")?, num(2, "end_ns")?);
        if end_ns < start_ns {
            return Err(bad("end_ns", "before start_ns"));
        }
        let stream = u32::try_from(num(9, "stream")?)
            .map_err(|_| bad("stream", "above 4294967295 (a CUDA stream id is 32 bits)"))?;
        out.push(Kernel { name: f[0].clone(), start_ns, end_ns, stream });
    }
    out.sort_by_key(|k| k.start_ns);
    Ok(out)
}

/// The family of a kernel, by name.
pub fn family(name: &str) -> &'static str {
    let n = name.to_ascii_lowercase();
    let has = |p: &[&str]| p.iter().any(|s| n.contains(s));
    if has(&["nccl", "allreduce", "all_reduce", "allgather", "reduce_scatter"]) {
        "communication"
    } else if has(&["flash", "attn", "attention", "paged", "fmha", "mha", "softmax"]) {
        "attention"
    } else if has(&["gemm", "gemv", "matmul", "cutlass", "cublas", "sm90_xmma", "wgmma", "xmma"]) {
        "gemm"
    } else if has(&["rms", "layernorm", "layer_norm", "norm"]) {
        "normalisation"
    } else if has(&["silu", "gelu", "act_and_mul", "swiglu", "relu"]) {
        "activation"
    } else if has(&["sample", "topk", "top_k", "argmax", "sort"]) {
        "sampling"
    } else if has(&["memcpy", "memset", "copy", "cache_kernel", "reshape_and_cache", "fill"]) {
        "memory"
    } else {
        "other"
    }
}

/// Time per family.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FamilyStats {
    pub family: &'static str,
    pub kernels: u64,
    pub total_ms: f64,
    pub share: f64,
    pub mean_us: f64,
}

/// A summary of a kernel trace.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    pub kernels: u64,
    /// First kernel start to last kernel end.
    pub span_ms: f64,
    /// Time with at least one kernel running.
    pub busy_ms: f64,
    pub families: Vec<FamilyStats>,
    /// Steps separated by idle gaps longer than the threshold.
    pub steps: u64,
    pub step_median_ms: Option<f64>,
    pub kernels_per_step_median: Option<f64>,
    /// The ten kernels taking the most time, by name.
    pub top: Vec<(String, f64)>,
}

use quetta_metrics::stats::median;

/// Summarise kernels (sorted by start); `step_gap_ns` separates steps.
pub fn summarise(k: &[Kernel], step_gap_ns: u64) -> Summary {
    // Sums in u128: a file's nanosecond stamps may add up past u64 (a share of 4.6e18 came
    // out of a wrapped total).
    let dur = |x: &Kernel| u128::from(x.end_ns - x.start_ns);
    let mut fam: BTreeMap<&'static str, (u64, u128)> = BTreeMap::new();
    let mut by_name: BTreeMap<&str, u128> = BTreeMap::new();
    let total: u128 = k.iter().map(dur).sum();
    for x in k {
        let e = fam.entry(family(&x.name)).or_default();
        e.0 += 1;
        e.1 += dur(x);
        *by_name.entry(&x.name).or_default() += dur(x);
    }
    // Busy time and steps: merge overlapping intervals (several streams).
    let (mut busy, mut steps) = (0u128, Vec::new());
    let mut cur: Option<(u64, u64, u64)> = None; // start, end, kernels of the current step
    let mut seg_end = 0u64;
    let mut seg_start = 0u64;
    for x in k {
        match cur.as_mut() {
            Some((_, end, n)) if x.start_ns <= end.saturating_add(step_gap_ns) => {
                *end = (*end).max(x.end_ns);
                *n += 1;
            }
            _ => {
                if let Some(s) = cur.take() {
                    steps.push(s);
                }
                cur = Some((x.start_ns, x.end_ns, 1));
            }
        }
        if x.start_ns > seg_end {
            busy += u128::from(seg_end - seg_start);
            seg_start = x.start_ns;
            seg_end = x.end_ns;
        } else {
            seg_end = seg_end.max(x.end_ns);
        }
    }
    busy += u128::from(seg_end - seg_start);
    if let Some(s) = cur {
        steps.push(s);
    }
    let mut families: Vec<FamilyStats> = fam
        .into_iter()
        .map(|(family, (n, ns))| FamilyStats {
            family,
            kernels: n,
            total_ms: ns as f64 / 1e6,
            share: if total > 0 { ns as f64 / total as f64 } else { 0.0 },
            mean_us: ns as f64 / n as f64 / 1e3,
        })
        .collect();
    families.sort_by(|a, b| b.total_ms.total_cmp(&a.total_ms));
    let mut top: Vec<(String, f64)> =
        by_name.into_iter().map(|(n, ns)| (n.to_owned(), ns as f64 / 1e6)).collect();
    top.sort_by(|a, b| b.1.total_cmp(&a.1));
    top.truncate(10);
    let span = match (k.first(), k.iter().map(|x| x.end_ns).max()) {
        (Some(a), Some(b)) => (b - a.start_ns) as f64 / 1e6,
        _ => 0.0,
    };
    Summary {
        kernels: k.len() as u64,
        span_ms: span,
        busy_ms: busy as f64 / 1e6,
        families,
        steps: steps.len() as u64,
        step_median_ms: median(&steps.iter().map(|s| (s.1 - s.0) as f64 / 1e6).collect::<Vec<_>>()),
        kernels_per_step_median: median(&steps.iter().map(|s| s.2 as f64).collect::<Vec<_>>()),
        top,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Write as _;

    #[test]
    fn families_steps_and_busy_time() {
        let dir = std::env::temp_dir().join(format!("quetta-kernels-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("k.csv");
        // two decode steps 1 ms apart, each: gemm 100 µs, attention 50 µs, rmsnorm 10 µs; a
        // kernel name with a comma in quotes
        let mut s = String::from("name,start_ns,end_ns,grid_x,grid_y,grid_z,block_x,block_y,block_z,stream,correlation\n");
        for step in 0..2u64 {
            let t = step * 1_000_000;
            let _ = writeln!(
                s,
                "\"void cutlass::Kernel<sm90_gemm, 128>\",{},{},1,1,1,1,1,1,7,1",
                t,
                t + 100_000
            );
            let _ = writeln!(
                s,
                "flash_fwd_splitkv_kernel,{},{},1,1,1,1,1,1,7,2",
                t + 100_000,
                t + 150_000
            );
            let _ = writeln!(s, "rms_norm_kernel,{},{},1,1,1,1,1,1,7,3", t + 150_000, t + 160_000);
        }
        std::fs::write(&p, s).unwrap();
        let k = load(&p).unwrap();
        assert_eq!(k.len(), 6);
        assert_eq!(k[0].name, "void cutlass::Kernel<sm90_gemm, 128>");
        let sum = summarise(&k, 200_000);
        assert_eq!(sum.steps, 2);
        assert_eq!(sum.kernels_per_step_median, Some(3.0));
        assert!((sum.step_median_ms.unwrap() - 0.16).abs() < 1e-9);
        assert!((sum.busy_ms - 0.32).abs() < 1e-9);
        assert_eq!(sum.families[0].family, "gemm");
        assert!((sum.families[0].share - 200.0 / 320.0).abs() < 1e-9);
        std::fs::write(&p, "h\nx,5,3,1,1,1,1,1,1,0,0\n").unwrap();
        let e = load(&p).unwrap_err().to_string();
        assert!(e.contains(":2: field end_ns"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Issue 18's reproducer: stamps near u64::MAX neither overflow (debug) nor wrap into a
    /// share of 4.6e18 (release); every share stays within 0..=1.
    #[test]
    fn huge_stamps_do_not_overflow_the_summary() {
        let big = u64::MAX - 10;
        let k = vec![
            Kernel { name: "gemm_a".into(), start_ns: 0, end_ns: big, stream: 0 },
            Kernel { name: "gemm_b".into(), start_ns: 1, end_ns: big, stream: 1 },
            Kernel { name: "rms_norm".into(), start_ns: big, end_ns: big + 5, stream: 0 },
        ];
        let sum = summarise(&k, u64::MAX);
        assert!(sum.families.iter().all(|f| (0.0..=1.0).contains(&f.share)), "{sum:?}");
        assert!((sum.families.iter().map(|f| f.share).sum::<f64>() - 1.0).abs() < 1e-9);
    }
}
