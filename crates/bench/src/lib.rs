//! `fp8-bench` measures what one Transformer Engine linear module's training step costs on the
//! GPU in BF16 and in FP8 with the recipe the trainer uses: TE's blockwise (1x128 activations
//! and gradients, 128x128 weights), tensorwise (current scaling: an amax pass, then the cast) or
//! delayed scaling (the cast records the amax, a per-step history update recomputes the scales);
//! MXFP8 (1x32 blocks, E8M0 scales) is written for Blackwell and refused below sm_100. Three
//! cuBLASLt GEMMs per step plus every cast the recipe needs, checked for correctness before
//! anything is timed.
//!
//! Key design choice: the GPU is reached only through a runtime probe ([`cuda::probe`],
//! [`cuda::Gpu::open`]) that returns a typed error, so the crate builds and its pure logic
//! (shapes, splits, padding, scale layouts, the cost model, env parsing) tests on machines with
//! no CUDA at all. Kernels are CUDA C compiled by NVRTC at run time; nothing CUDA is needed at
//! build time.
//!
//! It does not decide or merge: it writes `fp8-report` reports, which `fp8-merge` reads; decisions
//! belong to `fp8-engine`. TP/EP
//! communication is not timed (see docs/BENCHMARK.md).

pub mod backend;
pub mod costmodel;
pub mod cuda;
pub mod driver;
pub mod error;
pub mod job;
pub mod layout;
pub mod recipe;
pub mod runner;
pub mod shard;
pub mod sweep;
pub mod te;

pub use error::BenchError;
