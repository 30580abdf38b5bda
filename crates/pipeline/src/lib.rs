//! `fp8-pipeline` is the whole job for one or more models, shared by `fp8sel gen-policy` and
//! `cargo xtask gen-policy`: sweep every requested layout (each distinct per-rank shape measured
//! once per device and reused across layouts), merge, and write per model a policy, SVG plots of
//! every curve with its threshold, and a markdown summary with the step time of the module set.
//! `layout` is one layout's sweep, the job `fp8sel bench` runs; `outputs` is the merge-and-write
//! step alone, which `fp8sel merge-policy` and `fp8sel bench --policy-out` call too.
//!
//! It measures through `fp8-bench`'s driver and merges through `fp8-merge`; it adds no measuring
//! or merging logic of its own. It prints only through a `progress::Progress` the caller
//! passes (`progress::TermProgress` is the terminal one both commands use).

pub mod build;
pub mod eval;
pub mod fold;
pub mod generate;
pub mod host;
pub mod layout;
pub mod module_mix;
pub mod outputs;
pub mod plot;
pub mod progress;
pub mod shipped;
pub mod step;
