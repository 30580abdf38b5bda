//! One module per subcommand.

pub mod bench;
pub mod bench_kernels;
pub mod bench_output;
pub mod decide;
pub mod diff;
pub mod explain;
pub mod gen_policy;
pub mod gen_policy_args;
pub mod gen_policy_output;
pub mod layout_args;
pub mod merge_policy;
pub mod model_args;
pub mod objective_args;
pub mod recipe_args;
pub mod te_args;
pub mod te_precision;
pub mod tp_comm;
pub mod validate;
