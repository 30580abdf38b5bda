//! One module per subcommand.

pub mod decide;
pub mod explain;
pub mod model_args;
pub mod validate;
