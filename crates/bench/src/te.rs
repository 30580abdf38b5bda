//! The Transformer Engine backend: the same sweep, timed through TE itself.
//!
//! TE is a Python library, so this backend drives a worker process,
//! `python -m adaptive_fp8.bench.te_worker` (the Python package of this repository), over JSON lines on
//! its stdin and stdout: one request per point, one report point back. The worker times the
//! eager step as TE users run it (host included) and, beside it, the GPU's busy time
//! (`Timing::gpu_total_ms`); it checks every output against a float32 reference first.
//!
//! A worker that dies or answers garbage turns the point into `skipped` with the reason; it never
//! panics this process.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use fp8_report::{DeviceInfo, Point, Status};
use serde_json::{Value, json};

use crate::cuda::MeasureOptions;
use crate::runner::Backend;
use crate::sweep::BenchPoint;

/// Activation recompute is timed only by this backend: an error with the fix when another
/// backend (`backend`) is asked for it. Shared by `fp8sel bench` and `gen-policy`.
pub fn check_recompute(backend: &str, recompute: bool) -> Result<(), String> {
    if recompute && backend != "te" {
        return Err(format!(
            "--recompute: the {backend} backend does not model activation recompute yet; fix: \
             measure with --backend te, or drop --recompute (TE_LAYER_PERF_RECOMPUTE=false)"
        ));
    }
    Ok(())
}

/// A running worker.
pub struct TeBackend {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    device: DeviceInfo,
    te_version: String,
    /// Recompute the forward inside the backward (the reference tool's default).
    pub recompute: bool,
}

impl TeBackend {
    /// Starts `python -m adaptive_fp8.bench.te_worker` and asks it for the device; an error (with the
    /// fix) when Python, the package, torch, TE or a GPU is missing.
    pub fn start(python: &str, recompute: bool) -> Result<TeBackend, String> {
        let mut child = Command::new(python)
            .args(["-m", "adaptive_fp8.bench.te_worker"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| {
                format!("cannot start `{python} -m adaptive_fp8.bench.te_worker`: {e}; fix: pass --python with the interpreter that has torch and transformer_engine")
            })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("the TE worker has no stdin/stdout".into());
        };
        let mut b = TeBackend {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            device: DeviceInfo::default(),
            te_version: String::new(),
            recompute,
        };
        let hello = b.ask(&json!({"op": "hello"})).map_err(|e| {
            format!("the TE worker could not start: {e}; fix: `pip install .` in the trainer's environment (torch, transformer_engine and a GPU are needed)")
        })?;
        let d = &hello["device"];
        b.te_version = d["te_version"].as_str().unwrap_or_default().to_owned();
        b.device = DeviceInfo {
            name: d["name"].as_str().unwrap_or_default().to_owned(),
            compute_capability: d["compute_capability"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            sm_count: d["sm_count"]
                .as_u64()
                .and_then(|v| u32::try_from(v).ok())
                .unwrap_or(0),
            ..DeviceInfo::default()
        };
        Ok(b)
    }

    /// The TE version the worker runs.
    pub fn te_version(&self) -> &str {
        &self.te_version
    }

    fn ask(&mut self, req: &Value) -> Result<Value, String> {
        writeln!(self.stdin, "{req}").map_err(|e| format!("worker gone: {e}"))?;
        self.stdin
            .flush()
            .map_err(|e| format!("worker gone: {e}"))?;
        let mut line = String::new();
        // One response line per request; a worker that exits closes stdout.
        let n = self
            .stdout
            .read_line(&mut line)
            .map_err(|e| format!("worker gone: {e}"))?;
        if n == 0 {
            return Err("the worker exited".into());
        }
        let v: Value =
            serde_json::from_str(&line).map_err(|e| format!("unreadable worker answer: {e}"))?;
        if v["ok"] == true {
            Ok(v)
        } else {
            Err(v["error"].as_str().unwrap_or("unknown error").to_owned())
        }
    }

    /// The request for one point.
    fn request(&self, p: &BenchPoint, opt: &MeasureOptions) -> Value {
        let s = &p.spec;
        json!({
            "op": "measure",
            "point": {
                "module_kind": s.module_kind,
                "in_features": s.in_features,
                "out_features": s.out_features,
                "num_gemms": s.num_gemms,
                "splits": p.splits,
                "norm": s.norm.map(|n| match n {
                    fp8_engine::model::Norm::RmsNorm => "RMSNorm",
                    fp8_engine::model::Norm::LayerNorm => "LayerNorm",
                }),
                "report_point": p.report_point(opt.pad),
            },
            "opt": {
                "warmup": opt.warmup, "iters": opt.iters, "fp8_param": opt.fp8_param,
                "pad": opt.pad, "bf16": opt.bf16, "fp8": opt.fp8, "recompute": self.recompute,
                "recipe": opt.recipe.recipe().name(),
                "fp8_format": opt.recipe.format().name(),
                "amax_history_len": opt.recipe.history_len(),
                "amax_compute_algo": opt.recipe.algo().name(),
            },
        })
    }
}

impl Backend for TeBackend {
    fn device(&self) -> DeviceInfo {
        self.device.clone()
    }
    fn timing(&self) -> &'static str {
        "te-eager"
    }
    fn estimated(&self) -> bool {
        false
    }
    fn te_version(&self) -> Option<String> {
        Some(self.te_version.clone())
    }
    fn measure(&mut self, p: &BenchPoint, opt: &MeasureOptions) -> Point {
        let req = self.request(p, opt);
        let answer = self.ask(&req).and_then(|v| {
            serde_json::from_value::<Point>(v["point"].clone())
                .map_err(|e| format!("the worker's point does not read: {e}"))
        });
        match answer {
            Ok(point) => point,
            Err(e) => {
                let mut point = p.report_point(opt.pad);
                point.status = Status::Skipped;
                point.reason = Some(format!("TE worker: {e}"));
                point
            }
        }
    }
}

impl Drop for TeBackend {
    fn drop(&mut self) {
        // Closing stdin ends the worker's loop; do not leave it running.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
