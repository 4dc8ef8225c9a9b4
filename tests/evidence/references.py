# ruff: noqa: E501  (a table of node ids: one id per line, however long)
"""Where the executed proofs live: the test and benchmark paths that the package's declarations only describe.

A declaration in ``src`` says how far its proof goes and what fails, without a path (``evidence="runtime: Lightning
raises ValueError ..."``), so the wheel names no file it lacks. This module names the files: ``docs/errors.md`` and
the README join the two (``scripts/errors_doc.py``, ``scripts/evidence_table.py``), and
``tests/test_evidence_references.py`` checks each entry against the declarations and against the files it names.
"""

from __future__ import annotations

PROOFS: dict[str, str] = {
    "LP001": "tests/evidence/test_fails_registry.py::test_lp001_lightning_lower_cases_the_name_it_looks_up",
    "LP002": "tests/evidence/test_fails_registry.py::test_lp002_lp003_lightnings_registry_refuses_a_name_it_already_holds",
    "LP003": "tests/evidence/test_fails_registry.py::test_lp002_lp003_lightnings_registry_refuses_a_name_it_already_holds",
    "LP004": "tests/evidence/test_fails_registry.py::test_lp004_an_entry_point_whose_module_is_missing_cannot_be_loaded",
    "LP005": "tests/evidence/test_fails_registry.py::test_lp005_something_other_than_a_preset_cannot_build_a_strategy",
    "LP006": "tests/evidence/test_fails_registry.py::test_lp006_lp715_an_unknown_keyword_fails_when_ddp_wraps",
    "LP007": "tests/evidence/test_fails_registry.py::test_lp007_lightning_needs_deepspeed_installed",
    "LP008": "tests/evidence/test_fails_registry.py::test_lp008_lp011_the_trainer_refuses_a_strategy_class_of_another_kind",
    "LP009": "tests/evidence/test_fails_registry.py::test_lp009_lp010_a_name_nothing_registered_fails_in_the_trainer",
    "LP010": "tests/evidence/test_fails_registry.py::test_lp009_lp010_a_name_nothing_registered_fails_in_the_trainer",
    "LP011": "tests/evidence/test_fails_registry.py::test_lp008_lp011_the_trainer_refuses_a_strategy_class_of_another_kind",
    "LP012": "tests/evidence/test_fails_registry.py::test_lp012_a_third_partys_crashing_rule_raises_its_own_error",
    "LP013": "tests/evidence/test_fails_registry.py::test_lp013_a_distribution_without_a_name_cannot_be_looked_up",
    "LP015": "tests/evidence/test_fails_registry.py::test_lp015_a_denied_preset_is_an_unknown_name",
    "LP016": "tests/evidence/test_fails_registry.py::test_lp016_lp721_without_an_importable_lightning_there_is_no_trainer",
    "LP030": "tests/evidence/test_fails_runtime.py::test_lp030_ranks_with_different_settings_train_apart",
    "LP033": "tests/evidence/test_fails_runtime.py::test_lp033_a_rank_that_never_starts_stalls_the_others",
    "LP034": "tests/evidence/test_fails_runtime.py::test_lp034_a_collective_on_one_rank_hangs",
    "LP095": "tests/evidence/test_fails_job.py::test_lp095_the_refusal_is_the_environments_own",
    "LP096": "tests/evidence/test_fails_launchers.py::test_lp717_a_node_rank_outside_the_nodes",
    "LP101": "tests/evidence/test_fails_fsdp.py::test_lp101_fsdp_on_cpu_fails_when_the_model_is_wrapped",
    "LP104": "tests/evidence/test_fails_fsdp.py::test_lp104_an_unknown_sharding_strategy_fails_in_lightnings_constructor",
    "LP105": "tests/evidence/test_fails_fsdp.py::test_lp105_an_unknown_state_dict_type_fails_at_the_first_checkpoint",
    "LP111": "tests/evidence/test_fails_fsdp.py::test_lp111_a_three_dimensional_mesh_fails_when_fsdp_wraps_the_model",
    "LP112": "tests/evidence/test_fails_fsdp.py::test_lp112_a_mesh_that_is_not_the_world_fails_when_lightning_builds_it",
    "LP116": "tests/evidence/test_fails_fsdp.py::test_lp116_hybrid_shards_of_one_device_never_reduce_across_replicas",
    "LP117": "tests/evidence/test_fails_fsdp.py::test_lp117_a_2d_mesh_without_hybrid_sharding_reduces_over_dim_0",
    "LP118": "tests/evidence/test_fails_job.py::test_lp118_fsdp_precision_refuses_clipping_by_norm",
    "LP201": "tests/evidence/test_fails_model_parallel.py::test_lp201_sizes_that_miss_the_world_fail_in_every_process",
    "LP202": "tests/evidence/test_fails_model_parallel.py::test_lp202_a_zero_size_fails_when_the_mesh_is_built",
    "LP205": "tests/evidence/test_fails_model_parallel.py::test_lp205_lightning_refuses_the_precision",
    "LP206": "tests/evidence/test_fails_model_parallel.py::test_lp206_lightning_refuses_a_parallel_strategy_on_mps",
    "LP207": "tests/evidence/test_fails_model_parallel.py::test_lp207_fabrics_model_parallel_strategy_requires_a_parallelize_fn",
    "LP208": "tests/evidence/test_fails_model_parallel.py::test_lp208_a_module_without_configure_model_fails_after_launch",
    "LP211": "tests/evidence/test_fails_model_parallel.py::test_lp211_fsdp2_data_parallel_size_fails_in_the_mesh",
    "LP215": "tests/evidence/test_fails_job.py::test_lp215_clipping_by_norm_stacks_norms_of_two_meshes",
    "LP216": "tests/evidence/test_fails_job.py::test_lp216_anomaly_mode_has_no_dtensor_kernel",
    "LP217": "tests/evidence/test_fails_job.py::test_lp217_model_parallel_ignores_sync_batchnorm",
    "LP219": "tests/evidence/test_fails_job.py::test_lp219_sync_batch_norm_off_cuda_fails_in_the_first_training_step",
    "LP303": "tests/evidence/test_fails_ddp.py::test_lp303_bf16_compression_off_cuda_is_ignored_or_refused",
    "LP308": "tests/evidence/test_fails_job.py::test_lp308_static_graph_with_accumulation_fails_in_backward",
    "LP309": "tests/evidence/test_fails_job.py::test_lp309_post_local_sgd_needs_an_averaging_period",
    "LP310": "tests/evidence/test_fails_job.py::test_lp310_ddp_refuses_sync_batchnorm_on_cpu",
    "LP401": "tests/evidence/test_fails_deepspeed.py::test_lp401_lightning_imports_a_broken_deepspeed",
    "LP402": "tests/evidence/test_fails_deepspeed.py::test_lp402_lightning_refuses_deepspeed_below_0_16_with_this_torch",
    "LP403": "tests/evidence/test_fails_deepspeed.py::test_lp403_deepspeed_on_cpu_fails_when_fit_starts",
    "LP405": "tests/evidence/test_fails_deepspeed.py::test_lp405_fp16_and_bf16_together_fail_in_deepspeeds_config",
    "LP406": "tests/evidence/test_fails_deepspeed.py::test_lp406_fabrics_train_batch_size_fails_deepspeeds_batch_assertion",
    "LP407": "tests/evidence/test_fails_deepspeed.py::test_lp407_the_trainers_accumulation_fails_deepspeeds_batch_assertion",
    "LP408": "tests/evidence/test_fails_deepspeed.py::test_lp408_auto_batch_values_fail_in_deepspeeds_config",
    "LP409": "tests/evidence/test_fails_deepspeed.py::test_lp409_accumulation_steps_in_the_config_fail_in_fit",
    "LP410": "tests/evidence/test_fails_deepspeed.py::test_lp410_an_unknown_offload_device_fails_deepspeeds_config_validation",
    "LP412": "benchmarks/gpu/gpu_checks.py::proof_lp412_deepspeed_closure",
    "LP413": "tests/evidence/test_fails_deepspeed.py::test_lp413_contiguous_checkpointing_fails_as_lightning_configures_it",
    "LP415": "tests/evidence/test_fails_job.py::test_lp415_deepspeed_refuses_clipping_by_value",
    "LP417": "tests/evidence/test_fails_job.py::test_lp417_deepspeed_refuses_a_torch_optimizer_with_offload",
    "LP418": "tests/evidence/test_fails_job.py::test_lp418_the_parser_is_deepspeeds_own",
    "LP420": "tests/evidence/test_fails_job.py::test_lp420_deepspeed_refuses_device_indices",
    "LP422": "tests/evidence/test_fails_deepspeed.py::test_lp422_two_optimizers_fail_in_lightnings_deepspeed_setup",
    "LP501": "tests/evidence/test_fails_xla.py::test_lp501_lightning_cannot_build_xla_fsdp_on_a_broken_torch_xla",
    "LP504": "tests/evidence/test_fails_xla.py::test_lp504_xla_fsdp_refuses_a_single_device",
    "LP505": "tests/evidence/test_fails_xla.py::test_lp505_lp506_lightning_refuses_the_checkpointing_arguments",
    "LP506": "tests/evidence/test_fails_xla.py::test_lp505_lp506_lightning_refuses_the_checkpointing_arguments",
    "LP509": "tests/evidence/test_fails_job.py::test_lp509_xla_fsdp_refuses_an_unknown_state_dict_type",
    "LP601": "tests/evidence/test_fails_precision.py::test_lp601_lp602_transformer_engine_must_import_and_be_recent",
    "LP602": "tests/evidence/test_fails_precision.py::test_lp601_lp602_transformer_engine_must_import_and_be_recent",
    "LP603": "tests/evidence/test_fails_precision.py::test_lp603_lp606_lightning_refuses_bitsandbytes_off_cuda",
    "LP604": "benchmarks/gpu/gpu_checks.py::proof_lp604_fp8_below_capability",
    "LP606": "tests/evidence/test_fails_precision.py::test_lp603_lp606_lightning_refuses_bitsandbytes_off_cuda",
    "LP607": "tests/evidence/test_fails_precision.py::test_lp607_torchao_float8_after_fully_shard_fails_at_the_first_step",
    "LP612": "tests/evidence/test_fails_precision.py::test_lp612_torchao_refuses_an_unknown_recipe_when_the_model_is_converted",
    "LP613": "tests/evidence/test_fails_precision.py::test_lp613_torch_has_no_dtype_called_bf16",
    "LP700": "tests/evidence/test_fails_check.py::test_lp700_to_lp704_lightning_rejects_these_arguments_itself",
    "LP701": "tests/evidence/test_fails_check.py::test_lp700_to_lp704_lightning_rejects_these_arguments_itself",
    "LP702": "tests/evidence/test_fails_check.py::test_lp700_to_lp704_lightning_rejects_these_arguments_itself",
    "LP703": "tests/evidence/test_fails_check.py::test_lp700_to_lp704_lightning_rejects_these_arguments_itself",
    "LP704": "tests/evidence/test_fails_check.py::test_lp700_to_lp704_lightning_rejects_these_arguments_itself",
    "LP705": "tests/evidence/test_fails_check.py::test_lp705_lp706_slurms_own_settings_disagree_with_devices_and_nodes",
    "LP706": "tests/evidence/test_fails_check.py::test_lp705_lp706_slurms_own_settings_disagree_with_devices_and_nodes",
    "LP707": "tests/evidence/test_fails_check.py::test_lp707_slurm_ntasks_decides_the_world_whatever_devices_and_nodes_say",
    "LP708": "tests/evidence/test_fails_check.py::test_lp708_torchelastic_world_size_disagrees_with_devices_and_nodes",
    "LP710": "tests/evidence/test_fails_check.py::test_lp710_more_devices_than_visible_gpus",
    "LP711": "tests/evidence/test_fails_check.py::test_lp711_a_launcher_that_reruns_the_script_in_a_notebook",
    "LP712": "tests/evidence/test_fails_check.py::test_lp712_interactive_slurm_on_several_nodes_hangs",
    "LP714": "tests/evidence/test_fails_check.py::test_lp714_lsf_jsm_namespace_size_decides_the_world",
    "LP734": "tests/evidence/test_fails_check.py::test_lp734_a_slurm_job_with_ntasks_and_no_tasks_per_node",
    "LP715": "tests/evidence/test_fails_registry.py::test_lp006_lp715_an_unknown_keyword_fails_when_ddp_wraps",
    "LP717": "tests/evidence/test_fails_launchers.py::test_lp717_a_node_rank_outside_the_nodes",
    "LP718": "tests/evidence/test_fails_launchers.py::test_lp718_a_rank_outside_the_world",
    "LP721": "tests/evidence/test_fails_registry.py::test_lp016_lp721_without_an_importable_lightning_there_is_no_trainer",
    "LP724": "tests/evidence/test_fails_registry.py::test_lp724_a_preset_missing_from_the_registry_is_an_unknown_name",
    "LP728": "tests/evidence/test_fails_launchers.py::test_lp728_a_batch_job_started_without_srun_hangs",
    "LP732": "tests/evidence/test_fails_check.py::test_lp732_a_parameter_without_a_gradient_fails_ddp_in_the_second_step",
    "LP733": "tests/evidence/test_fails_check.py::test_lp733_fit_refuses_clipping_by_the_trainer_under_manual_optimization",
    "LP740": "tests/evidence/test_fails_rehearsal.py::test_lp740_lp741_lp742_the_rehearsed_failures_fail_on_both_ranks",
    "LP741": "tests/evidence/test_fails_rehearsal.py::test_lp740_lp741_lp742_the_rehearsed_failures_fail_on_both_ranks",
    "LP742": "tests/evidence/test_fails_rehearsal.py::test_lp740_lp741_lp742_the_rehearsed_failures_fail_on_both_ranks",
    "LP801": "tests/evidence/test_fails_resume.py::test_lp801_sharded_folder_into_ddp_fails_in_torch_load",
    "LP804": "tests/evidence/test_fails_resume.py::test_lp804_weights_only_checkpoint_fails_in_lightning",
    "LP805": "tests/evidence/test_fails_resume.py::test_lp805_fsdp_layout_fails_in_fsdp2",
    "LP806": "tests/evidence/test_fails_resume.py::test_lp806_id_keyed_sharded_optimizer_fails_in_fsdp2",
    "LP808": "tests/evidence/test_fails_resume.py::test_lp808_fabric_checkpoint_fails_in_trainer_fit",
}
"""Each error's executed proof (its declared evidence is ``runtime: ...`` or ``gpu: ...``): a test under
``tests/evidence/`` marked ``@pytest.mark.proves(CODE)``, or a check of ``benchmarks/gpu/gpu_checks.py`` whose
``proves`` names the code."""

CITED: dict[str, str] = {
    "LP720": "the compatibility tests: tests/test_compat.py",
    "LP730": "tests/test_plan_trace.py::test_planned_peak_and_categories_match_a_real_fit_at_the_allocator shows "
    "that the traced peak matches a real fit's at the allocator (2 gloo processes)",
    "LP802": "GPU check benchmarks/gpu/resume_checks.py",
    "LP803": "GPU check benchmarks/gpu/resume_checks.py",
}
"""What an error whose evidence is still a source citation (``source: ...``) points to in this repository: the docs
append it to the citation."""

CLAIMS: dict[str, dict[str, str]] = {
    "ddp_bf16_compress": {
        "construction": "tests/test_ddp.py::test_bf16_compress_constructs_on_simulated_cuda",
    },
    "ddp_static_graph": {
        "construction": "tests/test_ddp.py::test_static_graph_constructs_in_every_namespace",
        "runtime_cpu": "tests/test_ddp.py::test_static_graph_fit_on_two_processes",
    },
    "deepspeed_zero2_offload": {
        "construction": "tests/test_deepspeed.py::test_zero2_offload_constructs_on_simulated_cuda",
    },
    "deepspeed_zero3_offload_ckpt": {
        "construction": "tests/test_deepspeed.py::test_zero3_offload_ckpt_constructs_for_trainer_and_fabric",
    },
    "fsdp2": {
        "construction": "tests/test_fsdp2.py::test_data_parallel_is_the_whole_world_in_every_namespace",
        "runtime_cpu": "tests/test_fsdp2.py::test_fsdp2_trainer_fit_computes_the_losses_of_ddp",
    },
    "fsdp2_offload_ckpt": {
        "construction": "tests/test_fsdp2.py::test_data_parallel_spans_nodes_on_simulated_cuda",
        "runtime_cpu": "tests/test_fsdp2.py::test_fsdp2_offload_ckpt_trainer_fit_offloads_and_recomputes",
    },
    "fsdp_grad_op": {
        "construction": "tests/test_fsdp_family.py::test_grad_op_constructs_in_every_namespace",
    },
    "fsdp_hybrid_shard": {
        "construction": "tests/test_fsdp_family.py::test_hybrid_fills_the_mesh_from_nodes_and_devices",
    },
    "fsdp_offload_ckpt": {
        "construction": "tests/test_fsdp_offload_ckpt.py::test_constructs_on_simulated_cuda_in_every_namespace",
    },
    "tp2d_hybrid": {
        "construction": "tests/test_tp2d_hybrid.py::test_constructs_in_every_namespace_on_simulated_cuda",
        "runtime_cpu": "tests/test_tp2d_hybrid.py::test_trainer_by_name_trains_tensor_parallel_1x2_with_autoload_only",
    },
    "xla_fsdp_ckpt": {
        "construction": "tests/test_xla_torch_xla.py::test_xla_fsdp_ckpt_builds_guards_and_wraps_on_real_torch_xla",
    },
    "bf16-fp32-reduce": {
        "construction": "tests/test_precision_presets.py::test_bf16_fp32_reduce_is_accepted_by_the_fsdp_preset",
    },
    "fp8-te": {
        "construction": "tests/test_precision_presets.py::test_fp8_te_builds_lightnings_plugin",
    },
    "fp8-torchao": {
        "construction": "tests/test_precision_presets.py::test_fp8_torchao_converts_divisible_linears_and_names_the_rest",
    },
    "nf4-bnb": {
        "construction": "tests/test_precision_presets.py::test_nf4_bnb_builds_double_quantized_nf4",
    },
}
"""For each built-in preset's ``tested_with`` claim (``construction``, ``runtime_cpu``, ``runtime_gpu``), the test that
makes it: the README's "What has been run" table names it."""

REPRODUCTIONS: dict[str, str] = {
    "LP046": "tests/scripts/explain_rank1_raises.py (tests/test_explain_run.py)",
    "LP047": "tests/scripts/explain_rank1_raises.py when rank 1 exits at once (tests/test_explain.py)",
    "LP050": "tests/test_explain_signatures.py",
    "LP068": "tests/test_explain_signatures.py::test_lp068_a_slurm_job_without_tasks_per_node",
    "LP089": "tests/scripts/explain_rank1_raises.py (tests/test_explain_run.py)",
}
"""The failure signatures produced here by a CPU reproduction (their ``source`` says ``CPU reproduction: ...``): the
script or test that produces the error text they quote."""
