//! Megatron's execution rule: a step captured in CUDA graphs (`cuda_graph_impl` local,
//! transformer_engine or full_iteration, or the deprecated `enable_cuda_graph` /
//! `external_cuda_graph`) reads a rule's graphed threshold; `none`, Megatron's default, is eager.
//! The CLI reads it from a model config, the hook from a `TransformerConfig`: one rule.

use fp8_policy::Execution;

/// The `cuda_graph_impl` values that capture the step.
pub const GRAPHED_IMPLS: [&str; 3] = ["local", "transformer_engine", "full_iteration"];

/// Every `cuda_graph_impl` value Megatron takes.
pub const CUDA_GRAPH_IMPLS: [&str; 4] = ["none", "local", "transformer_engine", "full_iteration"];

/// The execution of a step with this `cuda_graph_impl` and the deprecated flags; `None` for a
/// value Megatron does not take.
pub fn execution_of(
    cuda_graph_impl: Option<&str>,
    deprecated_graph_flag: bool,
) -> Option<Execution> {
    let graphed = match cuda_graph_impl.unwrap_or("none") {
        "none" => false,
        i if GRAPHED_IMPLS.contains(&i) => true,
        _ => return None,
    };
    Some(if graphed || deprecated_graph_flag {
        Execution::Graphed
    } else {
        Execution::Eager
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn megatrons_values_map_to_the_two_executions() {
        assert_eq!(execution_of(None, false), Some(Execution::Eager));
        assert_eq!(execution_of(Some("none"), false), Some(Execution::Eager));
        for i in GRAPHED_IMPLS {
            assert_eq!(
                execution_of(Some(i), false),
                Some(Execution::Graphed),
                "{i}"
            );
        }
        assert_eq!(execution_of(None, true), Some(Execution::Graphed));
        assert_eq!(execution_of(Some("sometimes"), false), None);
    }
}
