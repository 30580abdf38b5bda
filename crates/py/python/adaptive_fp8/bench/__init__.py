"""The measurement tools that must run inside Transformer Engine, apart from the trainer side at
the package's top (the Megatron integrations, the TE hook, the policy API):

- workers ``fp8sel`` starts: ``te_worker`` (per-module TE timings), ``te_tp`` (a TE
  tensor-parallel group), ``probe_host`` (an eager trainer's host profile);
- the step benchmark ``step_bench`` (over ``step_spec``, ``step_common``, ``step_layers`` and,
  for ``--trainer megatron``, ``megatron_step``);
- numerics: ``numerics`` (the probe, over ``quant_error``) and ``convergence``, both training
  ``GPTModel`` s through ``gpt_train`` on the ``corpus``.

Each is ``python -m adaptive_fp8.bench.<tool> --help``. Importing any of them imports neither
torch nor TE: they import both inside the functions that run.
"""
