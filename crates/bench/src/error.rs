//! The bench's typed errors.

/// Why a benchmark could not run (or one point could not).
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// No usable CUDA device or driver.
    #[error("no CUDA device: {0}")]
    NoDevice(String),
    /// A CUDA library could not be loaded.
    #[error(
        "missing CUDA library: {0}; fix: install the CUDA 13 runtime libraries or add them to LD_LIBRARY_PATH"
    )]
    MissingLibrary(&'static str),
    /// A CUDA driver call failed.
    #[error("CUDA driver: {0}")]
    Driver(String),
    /// NVRTC failed to compile the kernels.
    #[error("NVRTC: {0}")]
    Nvrtc(String),
    /// cuBLASLt refused a call.
    #[error("cuBLASLt: {0}")]
    Cublas(String),
    /// Not enough device memory.
    #[error("out of device memory allocating {bytes} bytes ({detail})")]
    OutOfMemory {
        /// Requested size.
        bytes: u64,
        /// Driver message.
        detail: String,
    },
    /// The device or shape cannot run this recipe.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A correctness check failed.
    #[error("check failed: {0}")]
    Check(String),
    /// A bug in the bench.
    #[error("internal: {0}")]
    Internal(String),
    /// Invalid user input.
    #[error("{0}")]
    Input(String),
}

impl BenchError {
    pub(crate) fn driver(e: cudarc::driver::DriverError) -> BenchError {
        BenchError::Driver(format!("{e:?}"))
    }

    /// True when the error concerns the machine (no device, missing library) rather than a point.
    pub fn is_environment(&self) -> bool {
        matches!(
            self,
            BenchError::NoDevice(_) | BenchError::MissingLibrary(_)
        )
    }
}
