//! `fp8-merge` turns benchmark reports into a policy.
//!
//! placeholder until the merge lands
pub mod report;
