"""The fast lane's list of slow tests (``python -m pytest -m "not slow"`` leaves them out; tests/conftest.py
marks them).  Measured with ``--durations`` on each test folder, or known by what they do."""
from __future__ import annotations

#: test file (from the repository root) -> its slow test functions (every parametrization), "*" for all
SLOW: dict[str, set[str] | str] = {
    # measured (3 s or more with --durations, one folder at a time, on the 2-core machine shared by other
    # sessions: kernels, trace, events, synth, topology, merge, analyze) or by inspection (validate, job,
    # report, runtime, cli, integration: module fixtures that build and analyse jobs, the CLI, real traces)
    "tests/integration/test_epilogue.py": "*",
    "tests/integration/test_failure_interrupted.py": "*",
    "tests/integration/test_failure_output_paths.py": "*",
    "tests/integration/test_failure_silent.py": "*",
    "tests/integration/test_failure_tracebacks.py": "*",
    "tests/integration/test_metrics_reference.py": {"test_device_metrics_match_reference"},
    "tests/integration/test_writer_demo_tools.py": {"test_demo_command", "test_megatron_dropin"},
    "tests/kernels/test_cachedir.py": {"test_concurrent_first_compiles_leave_a_loadable_cache",
                                       "test_reinstall_loads_and_changed_sources_do_not"},
    "tests/kernels/test_gaps_ancestry.py": {"test_running_end_before_matches_twin"},
    "tests/kernels/test_intervals.py": {"test_intersect_subtract_match_twin_on_unions"},
    "tests/kernels/test_kernels.py": {
        "test_ancestry_kernels_match_twins", "test_event_members_matches_json_loads",
        "test_is_valid_json_matches_json_loads", "test_nesting_kernel_matches_twin",
        "test_object_members_finds_the_end", "test_put_int_and_put_us_match_python",
        "test_rewrite_kernel_matches_twin", "test_skip_value_finds_the_end"},
    "tests/kernels/test_runs.py": {"test_sort_group_matches_stable_sort"},
    "tests/kernels/test_replay.py": {"test_pairs_equal_the_enumeration"},     # 400 graphs, every path enumerated
    "tests/kernels/test_sqlite_pages.py": {"test_scan_matches_sqlite3_and_twin"},   # builds 60 databases
    "tests/kernels/test_scan_split.py": {
        "test_scan_bounds_matches_scan_events", "test_scan_bounds_real_traces",
        "test_scan_rewrite_finds_what_scan_bounds_finds", "test_scan_rewrite_writes_each_event_once",
        "test_split_points_edges", "test_split_points_events_any_blocks", "test_split_points_matches_twin",
        "test_split_points_real_trace_prefix"},
    "tests/kernels/test_tree.py": {
        "test_build_call_tree_laminar_is_smallest_container", "test_build_call_tree_matches_twin",
        "test_build_call_tree_tracks_are_independent", "test_deep_chain_and_wide_node", "test_link_matches_twin",
        "test_pipeline_on_merged_ranks_matches_twin", "test_propagate_matches_twin_on_call_trees",
        "test_propagate_matches_twin_on_random_forests"},
    "tests/kernels/test_treestream.py": {"test_gather_strings_matches_twin", "test_tree_stream_matches_twin"},
    "tests/kernels/test_validate_kernels.py": {
        "test_batch_records_matches_twin", "test_event_fields_matches_twin", "test_rewrite_fields_match_twin"},
    "tests/kernels/test_windows.py": {
        "test_any_windows_match_brute_force", "test_deep_nesting", "test_nested_threads_match_brute_force",
        "test_old_containing_is_right_or_minus_one", "test_shortest_overlapping_matches_brute_force",
        "test_window_index_batches"},
    "tests/unit/analyze/test_analyze.py": {
        "test_chunked_equals_in_memory", "test_cli_analyze_and_bad_input", "test_merged_trace_splits_back_into_ranks",
        "test_patterns_override", "test_resnet_kernels_and_ops", "test_summary_matches_reference",
        "test_synthetic_metrics_and_classification", "test_unknown_iteration_partition"},
    "tests/unit/analyze/test_phases.py": {
        "test_kernels_under_recompute_windows_are_recompute",
        "test_real_traces_gpu_annotation_and_attribution_by_plain_json"},
    "tests/unit/analyze/test_trackfork.py": {
        "test_dominant_track_cut_equals_serial", "test_dominant_track_is_cut_between_call_trees",
        "test_forked_tracks_equal_serial", "test_kernels_written_in_two_halves", "test_merged_synthetic_job",
        "test_nearest_cut_is_a_valid_cut_nearest_the_target", "test_piece_cuts_match_definition",
        "test_track_groups_contiguous_and_balanced"},
    "tests/unit/cli/test_cli.py": {
        "test_bare_command_exits_2_with_usage", "test_input_errors_exit_1",
        "test_usage_errors_exit_2_with_one_plain_line", "test_verbose_shows_the_traceback",
        "test_epilogue_quiet_and_verbose_flags", "test_epilogue_full_flag_is_gpu_only_false"},
    "tests/unit/events/test_columns.py": {
        "test_kernel_equals_twin_on_random_events", "test_kernel_equals_twin_on_real_traces"},
    "tests/unit/events/test_load.py": {"test_documented_blocks_run", "test_epilogue_run_folder"},
    "tests/unit/events/test_parallel_ingest.py": {"test_guess_is_right_or_caught"},
    "tests/unit/aggregate/test_aggregate_report.py": "*",
    "tests/unit/aggregate/test_collective_spill.py": "*",
    "tests/unit/aggregate/test_collectives.py": {
        "test_clock_sync_recovers_offsets_and_true_stragglers",
        "test_every_instance_matches_the_truth", "test_outputs_and_individual_alignment", "test_p2p_table_from_truth",
        "test_pipeline_of_four_stages_matches_p2p_by_direction", "test_stragglers_wait_over_group_collectives_only",
        "test_summary_and_stragglers_from_truth"},
    "tests/unit/aggregate/test_explain.py": {
        "test_kernel_and_launch_stats_against_numpy", "test_real_traces_idle_matches_definition_and_summary",
        "test_report_shows_the_sections_and_the_idle_chart", "test_synthetic_job_idle_matches_definition_and_summary"},
    "tests/unit/aggregate/test_iteration_step.py": "*",
    "tests/unit/merge/test_align_collectives.py": {"test_offsets_recovered_and_collectives_end_together"},
    "tests/unit/merge/test_merge.py": {
        "test_bad_input_exit_1_no_output", "test_cli_megatron_options", "test_cli_merge_and_validate",
        "test_duplicate_ranks", "test_gpu_only_and_window", "test_one_rank_merge_equals_source",
        "test_real_traces_as_ranks", "test_steps_filter"},
    "tests/unit/merge/test_merge_cli.py": {
        "test_gpu_only_of_a_cpu_only_run_merges_the_cpu_processes",
        "test_lone_trace_without_rank_is_rank_0_with_a_notice",
        "test_megatron_spelling_keeps_its_output_beside_the_input", "test_output_is_relative_to_the_current_folder"},
    "tests/unit/merge/test_merge_ranges.py": {
        "test_demo_split_cross_compression_validates", "test_demo_split_equals_unsplit",
        "test_generated_traces_split_equals_unsplit", "test_odd_values_split_equal_unsplit",
        "test_real_ranks_some_split", "test_real_trace_split_equals_unsplit"},
    "tests/unit/report/test_charts.py": {
        "test_alike_steps_get_one_chart_and_a_different_one_its_own",
        "test_charts_read_only_the_charted_ranks_timeline_and_few_collective_columns",
        "test_every_chart_renders_from_the_demo_png_by_default", "test_no_chart_without_content",
        "test_one_heat_map_per_collective_kind_without_p2p", "test_parallel_rendering_writes_the_same_files",
        "test_ranks_asked_for_each_get_their_chart", "test_skew_grids_from_batches_equal_each_kinds_grid_at_once",
        "test_svg_on_request_and_stale_files_removed"},
    "tests/unit/report/test_diff.py": {
        "test_bad_options_and_inputs", "test_cli_on_traces_analyses_them_and_load_opens_the_result",
        "test_extra_collective_comes_first_as_increased", "test_identical_inputs_are_all_unchanged_with_zero_deltas",
        "test_output_folder_is_one_unit", "test_rank_and_step_pairing",
        "test_slower_kernel_comes_first_with_the_traces_delta", "test_straggler_rank_comes_first_in_ranks",
        "test_worker_pool_gives_the_same_tables"},
    "tests/unit/report/test_report_truths.py": {
        "test_cpu_only_run_says_cpu_time_and_why_sections_are_empty",
        "test_csv_columns_carry_units_and_floats_are_short", "test_different_jobs_are_refused_unless_forced",
        "test_world_size_from_distributed_info_and_unknown_sizes"},
    "tests/unit/runtime/test_compile.py": {
        "test_after_prepare_merge_analyze_and_validate_compile_nothing", "test_jit_disabled_warmup_says_so",
        "test_notice_once_and_quiet"},
    "tests/unit/runtime/test_files.py": {"test_a_worker_dies_with_its_parent"},
    "tests/unit/runtime/test_parallel.py": {"test_retry_then_report", "test_tune_malloc_only_when_frozen"},
    "tests/unit/runtime/test_tuning.py": "*",
    "tests/unit/synth/test_synth.py": {"test_any_schedule_completes_and_is_consistent"},
    "tests/unit/synth/test_synth_scale.py": {"test_files_pass_the_format_checks"},
    "tests/unit/topology/test_capture.py": {
        "test_end_to_end_gloo_job", "test_handler_with_torch_profiler", "test_profiler_schedule_actions"},
    "tests/unit/topology/test_expert_groups.py": {
        "test_analyze_classifies_expert_communication", "test_every_group_equals_megatron_initialize_model_parallel"},
    "tests/unit/topology/test_topology.py": {"test_cli", "test_equals_megatron_rank_generator"},
    "tests/unit/trace/test_json_values.py": {"test_encode_json_round_trips"},
    "tests/unit/trace/test_reader.py": {
        "test_random_documents_any_block_size", "test_read_trailer_is_right_or_gives_up",
        "test_real_traces_equal_json_load"},
    "tests/unit/trace/test_trace_ranges.py": {
        "test_analyze_split_equals_single", "test_random_documents_split_equal_single",
        "test_real_traces_split_equal_single"},
    "tests/unit/validate/test_merge_check.py": {
        "test_cpu3d_problems_are_the_inputs", "test_generated_ranks", "test_merge_added_problems_fail_the_cli",
        "test_real_ranks_split_in_byte_ranges"},
    "tests/unit/validate/test_validate.py": {
        "test_cli_several_files", "test_cpu3d_and_its_merge", "test_demo_and_merged_real_pair",
        "test_generated_traces_as_the_reference", "test_real_traces_as_the_reference"},
    "tests/unit/validate/test_validate_split.py": {
        "test_cli_jobs", "test_cpu3d_and_its_merge", "test_cuts_inside_args_fall_back_or_agree",
        "test_generated_traces", "test_merged_real_pair_gzip_and_no_leftovers", "test_real_traces"},
    # measured 2026-11-27 with --durations=60 over the whole fast lane on an idle 2-core machine (1.75 s or more,
    # module fixtures that build and analyse real jobs counted with their first test)
    "tests/integration/test_report_real_multi.py": "*",
    "tests/integration/test_done_when_real_multi.py": "*",
    "tests/integration/test_failure_round3.py": "*",
    "tests/integration/test_failure_kineto_defects.py": {"test_gpu_kernels_overlapping_on_a_stream_are_counted_apart",
                                                         "test_kineto_unescaped_quotes_are_repaired_and_counted"},
    "tests/integration/test_nsys_merge_real.py": "*",
    "tests/unit/report/test_efficiency.py": {"test_epilogue_with_a_torchtitan_config", "test_flags_and_the_datasheet_peak",
                                             "test_links_ops_and_charts_on_real_jobs"},
    "tests/unit/aggregate/test_process_groups.py": {"test_report_and_epilogue_name_the_same_dimension"},
    "tests/unit/aggregate/test_step_names.py": "*",
    "tests/unit/aggregate/test_whatif.py": {"test_cli", "test_report_section",        # CLI subprocesses
                                            "test_two_iterations"},                   # two jobs analysed
    "tests/unit/aggregate/test_whatif_replay.py": "*",                                # 200 random jobs, brute force
    "tests/unit/trace/test_nsys_payload.py": {"test_epilogue_on_a_folder_of_exports"},
    "tests/unit/merge/test_nsys_merge.py": {"test_align_first_step_starts_every_rank_s_first_step_together",
                                            "test_drop_cat_drops_the_category_and_its_flows",
                                            "test_step_pattern_names_the_export_s_step_range"},
    "tests/unit/analyze/test_collective_facts.py": {"test_annotation_only_era_real_rank"},
    "tests/unit/aggregate/test_critical_marks.py": {"test_epilogue_marks_its_merged_trace"},
    "tests/kernels/test_survey_kernel.py": {"test_prepass_matches_json"},
    "tests/kernels/test_keep_kernel.py": {"test_keep_rows_matches_twin"},   # 4.4 s, 2026-11-27, shared machine
    "tests/kernels/test_groups_kernel.py": {   # 3.0-3.2 s each, 2026-11-27
        "test_group_batch_matches_twin", "test_keep_groups_matches_twin",
        "test_decision_from_groups_is_every_rows_decision"},
    "tests/unit/merge/test_merge_steps_onepass.py": {   # 2.8-7.1 s each, 2026-11-27, shared machine
        "test_real_rank_steps", "test_real_rank_steps_when_their_category_is_dropped", "test_split_real_rank",
        "test_random_kernel_traces_split", "test_window_holding_every_event"},
}
