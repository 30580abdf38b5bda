//! Which backend measures: chosen here once, for `fp8sel bench` and `gen-policy` alike. `auto`
//! is the GPU when one opens, else the cost model (with a note); `te` starts the TE worker.

use std::str::FromStr;

use crate::costmodel::{self, ModelBackend};
use crate::cuda::Gpu;
use crate::runner::{Backend, CudaBackend};
use crate::te::TeBackend;

/// A backend by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// The GPU when one opens, else the cost model.
    Auto,
    /// The GPU (cuBLASLt, NVRTC).
    Cuda,
    /// The cost model: estimates, never measurements.
    Model,
    /// Transformer Engine itself, through `python -m adaptive_fp8.bench.te_worker`.
    Te,
}

impl BackendKind {
    /// The name, as parsed.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Auto => "auto",
            BackendKind::Cuda => "cuda",
            BackendKind::Model => "model",
            BackendKind::Te => "te",
        }
    }
}

impl FromStr for BackendKind {
    type Err = BackendError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(BackendKind::Auto),
            "cuda" => Ok(BackendKind::Cuda),
            "model" => Ok(BackendKind::Model),
            "te" => Ok(BackendKind::Te),
            other => Err(BackendError::UnknownKind(other.to_owned())),
        }
    }
}

/// Why no backend opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// Not a backend name.
    #[error("unknown backend `{0}` (auto, cuda, model, te)")]
    UnknownKind(String),
    /// Not a cost-model device profile.
    #[error("unknown device profile `{profile}`; known: {known}")]
    UnknownProfile {
        /// The name given.
        profile: String,
        /// The profiles there are.
        known: String,
    },
    /// The GPU did not open.
    #[error("{0}")]
    Gpu(String),
    /// The TE worker did not start, or cannot do what was asked.
    #[error("{0}")]
    Te(String),
}

/// What a run asks of its backend.
#[derive(Debug, Clone)]
pub struct BackendSpec<'a> {
    /// Which backend.
    pub kind: BackendKind,
    /// The cost model's device profile (`h200`, `h100`, `b200`).
    pub device_profile: &'a str,
    /// The GPU ordinal (cuda; the TE worker uses its default device).
    pub device: usize,
    /// The interpreter of the TE worker.
    pub python: &'a str,
    /// Activation recompute in the TE worker.
    pub recompute: bool,
}

/// The opened backend.
pub enum Chosen {
    /// The GPU.
    Cuda(Box<CudaBackend>),
    /// The cost model.
    Model(ModelBackend),
    /// Transformer Engine itself.
    Te(Box<TeBackend>),
}

impl Chosen {
    /// The backend.
    pub fn backend(&mut self) -> &mut dyn Backend {
        match self {
            Chosen::Cuda(c) => c.as_mut(),
            Chosen::Model(m) => m,
            Chosen::Te(t) => t.as_mut(),
        }
    }

    /// The backend, owned.
    pub fn into_backend(self) -> Box<dyn Backend> {
        match self {
            Chosen::Cuda(c) => c,
            Chosen::Model(m) => Box::new(m),
            Chosen::Te(t) => t,
        }
    }
}

fn model(profile: &str) -> Result<Chosen, BackendError> {
    costmodel::profile(profile)
        .map(|p| Chosen::Model(ModelBackend(p)))
        .ok_or_else(|| BackendError::UnknownProfile {
            profile: profile.to_owned(),
            known: costmodel::profiles()
                .iter()
                .map(|p| p.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

fn gpu(device: usize) -> Result<Chosen, BackendError> {
    Gpu::open(device)
        .map(|g| Chosen::Cuda(Box::new(CudaBackend(g))))
        .map_err(|e| BackendError::Gpu(e.to_string()))
}

/// Opens the backend `spec` names; `note` hears of a fallback.
pub fn choose(spec: &BackendSpec<'_>, note: &dyn Fn(&str)) -> Result<Chosen, BackendError> {
    crate::te::check_recompute(spec.kind.as_str(), spec.recompute).map_err(BackendError::Te)?;
    match spec.kind {
        BackendKind::Model => model(spec.device_profile),
        BackendKind::Cuda => gpu(spec.device),
        BackendKind::Auto => gpu(spec.device).or_else(|e| {
            note(&format!(
                "no usable GPU ({e}); falling back to the cost model"
            ));
            model(spec.device_profile)
        }),
        BackendKind::Te => TeBackend::start(spec.python, spec.recompute)
            .map(|t| Chosen::Te(Box::new(t)))
            .map_err(BackendError::Te),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_the_model_opens_without_a_gpu() {
        for k in ["auto", "cuda", "model", "te"] {
            assert_eq!(
                k.parse::<BackendKind>().map(BackendKind::as_str).ok(),
                Some(k)
            );
        }
        assert!(matches!(
            "gpu".parse::<BackendKind>(),
            Err(BackendError::UnknownKind(_))
        ));
        let spec = BackendSpec {
            kind: BackendKind::Model,
            device_profile: "h200",
            device: 0,
            python: "python3",
            recompute: false,
        };
        assert!(matches!(choose(&spec, &|_| {}), Ok(Chosen::Model(_))));
        let bad = BackendSpec {
            device_profile: "a100",
            ..spec.clone()
        };
        let e = choose(&bad, &|_| {})
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("unknown device profile `a100`") && e.contains("h200"),
            "{e}"
        );
        let recompute = BackendSpec {
            recompute: true,
            ..spec
        };
        assert!(matches!(
            choose(&recompute, &|_| {}),
            Err(BackendError::Te(_))
        ));
    }
}
