# End-to-end tests of the capsim binary: exit codes, JSON output, and error messages.
set(capsim_scenarios ${CMAKE_CURRENT_SOURCE_DIR}/scenarios)
set(capsim_expect ${CMAKE_CURRENT_SOURCE_DIR}/expect_fail.cmake)

# capsim_cli_expect(NAME name CMD args... [EXIT_CODE n] [STDERR ...] [STDOUT ...] [STDOUT_EMPTY]
#                   [OUT_FILE path] [FILE_CONTAINS ...]): run through expect_fail.cmake.
function(capsim_cli_expect)
  cmake_parse_arguments(PARSE_ARGV 0 A "STDOUT_EMPTY" "NAME;EXIT_CODE;OUT_FILE" "CMD;STDERR;STDOUT;FILE_CONTAINS")
  set(args "")
  foreach(v CMD STDERR STDOUT FILE_CONTAINS)
    string(REPLACE ";" "$<SEMICOLON>" A_${v} "${A_${v}}")
  endforeach()
  list(APPEND args "-DCMD=$<TARGET_FILE:capsim>$<SEMICOLON>${A_CMD}")
  if(DEFINED A_EXIT_CODE)
    list(APPEND args "-DEXIT_CODE=${A_EXIT_CODE}")
  endif()
  if(A_STDERR)
    list(APPEND args "-DSTDERR_CONTAINS=${A_STDERR}")
  endif()
  if(A_STDOUT)
    list(APPEND args "-DSTDOUT_CONTAINS=${A_STDOUT}")
  endif()
  if(A_STDOUT_EMPTY)
    list(APPEND args "-DSTDOUT_EMPTY=ON")
  endif()
  if(A_OUT_FILE)
    list(APPEND args "-DOUT_FILE=${A_OUT_FILE}" "-DFILE_CONTAINS=${A_FILE_CONTAINS}")
  endif()
  add_test(NAME ${A_NAME} COMMAND ${CMAKE_COMMAND} ${args} -P ${capsim_expect})
  set_property(GLOBAL APPEND PROPERTY capsim_cli_tests ${A_NAME})
endfunction()

# Rule: the model report gives the exact published parameter count (and exits 0).
capsim_cli_expect(NAME cli.model_llama3_70b_json
  CMD model llama3-70b --format json
  EXIT_CODE 0
  STDOUT "\"params_total\": 70553706496")

# Rule: a valid training scenario (micro_batch and recompute "auto") is evaluated and fits.
capsim_cli_expect(NAME cli.train_llama2_7b_json
  CMD train ${capsim_scenarios}/llama2-7b-8gpu.json --format json
  EXIT_CODE 0
  STDOUT "\"fits\": true")

# Rule: a scenario with several problems exits 1 and names every problem on stderr.
capsim_cli_expect(NAME cli.train_bad_layout_reports_all
  CMD train ${capsim_scenarios}/bad-layout.json --format json
  STDERR
    "capsim: 5 problems in the input:"
    "/training/recomput: unknown key; did you mean \"recompute\"?"
    "/training/tp: attention heads (32) must be divisible by tp (got 3)"
    "/training/tp: key/value heads (32) must be divisible by tp (or tp by them) (got 3)"
    "/system/num_gpus: tp*pp*dp*cp = 3*2*2*1 = 12 must equal num_gpus (got 8)"
    "/training/global_batch: must be divisible by micro_batch*dp = 2*2 = 4 (got 30)")

# Rule: --set overrides apply before validation, so a bad override is a layout error.
capsim_cli_expect(NAME cli.train_set_tp_3_fails
  CMD train ${capsim_scenarios}/llama2-7b-8gpu.json --set training.tp=3 --format json
  STDERR "/training/tp: attention heads (32) must be divisible by tp (got 3)")

# Rule: --set without '=' is rejected.
capsim_cli_expect(NAME cli.train_set_without_equals_fails
  CMD train ${capsim_scenarios}/llama2-7b-8gpu.json --set training.tp --format json
  STDERR "--set: must look like path=value (e.g. training.tp=4) (got training.tp)")

# Rule: malformed JSON exits 1 and names the file, line and column.
capsim_cli_expect(NAME cli.train_malformed_json
  CMD train ${capsim_scenarios}/malformed.json --format json
  STDERR "malformed.json: malformed JSON at line 4, column 9: syntax error while parsing object")

# Rule: a missing scenario file is an input error, not a crash.
capsim_cli_expect(NAME cli.train_missing_file
  CMD train ${capsim_scenarios}/no-such-file.json
  STDERR "no-such-file.json: cannot open file")

# Rule: -o writes the report to the file and nothing to stdout.
capsim_cli_expect(NAME cli.train_out_file
  CMD train ${capsim_scenarios}/llama2-7b-8gpu.json --format json -o ${CMAKE_CURRENT_BINARY_DIR}/train-out.json
  EXIT_CODE 0
  STDOUT_EMPTY
  OUT_FILE ${CMAKE_CURRENT_BINARY_DIR}/train-out.json
  FILE_CONTAINS "\"fits\": true")

# Rule: the discrete-event engine reports through the same command and writes a timeline.
capsim_cli_expect(NAME cli.train_des_trace
  CMD train ${capsim_scenarios}/llama2-7b-8gpu.json --engine des --trace ${CMAKE_CURRENT_BINARY_DIR}/des-trace.json --format json
  EXIT_CODE 0
  STDOUT "\"engine\": \"des\""
  OUT_FILE ${CMAKE_CURRENT_BINARY_DIR}/des-trace.json
  FILE_CONTAINS "traceEvents" "activation memory")

# Rule: a timeline needs the discrete-event engine.
capsim_cli_expect(NAME cli.trace_needs_des
  CMD train ${capsim_scenarios}/llama2-7b-8gpu.json --trace ${CMAKE_CURRENT_BINARY_DIR}/x.json
  STDERR "--trace: a timeline needs the discrete-event engine")

# Rule: a serving scenario reports latency percentiles and writes its iteration timeline.
capsim_cli_expect(NAME cli.infer_trace
  CMD infer ${capsim_scenarios}/serving-trace.json --trace ${CMAKE_CURRENT_BINARY_DIR}/serve-trace.json --format json
  EXIT_CODE 0
  STDOUT "\"ttft_p99_ms\""
  OUT_FILE ${CMAKE_CURRENT_BINARY_DIR}/serve-trace.json
  FILE_CONTAINS "KV cache in use")

# Rule: --max-qps reports the rate it found and the SLA.
capsim_cli_expect(NAME cli.infer_max_qps
  CMD infer ${CMAKE_SOURCE_DIR}/examples/llama3-70b-serving.json --max-qps --ttft-p99-ms 300 --format json
  EXIT_CODE 0
  STDOUT "\"max_qps\"" "\"ttft_p99_ms\": 300.0")

# Rule: a sweep axis naming an unknown key is rejected before any row runs.
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/bad-sweep.json
  "{\"base\": \"${CMAKE_SOURCE_DIR}/examples/llama3-8b-h100.json\", \"axes\": [{\"path\": \"training.tpp\", \"values\": [1]}, {\"path\": \"training.dp\", \"values\": []}]}")
capsim_cli_expect(NAME cli.sweep_bad_axes
  CMD sweep ${CMAKE_CURRENT_BINARY_DIR}/bad-sweep.json -o ${CMAKE_CURRENT_BINARY_DIR}/never.jsonl
  STDERR "/axes/1/values: must be a non-empty array (got [])")
capsim_cli_expect(NAME cli.sweep_unknown_key
  CMD sweep ${CMAKE_CURRENT_SOURCE_DIR}/sweeps/unknown-key.json -o ${CMAKE_CURRENT_BINARY_DIR}/never.jsonl
  STDERR "/axes: names a key scenarios do not have (got /training/tpp); did you mean \"tp\"?")

# Rule: a shard index out of range is rejected before any row runs.
capsim_cli_expect(NAME cli.sweep_shard_out_of_range
  CMD sweep ${CMAKE_CURRENT_SOURCE_DIR}/sweeps/small.json -o ${CMAKE_CURRENT_BINARY_DIR}/never.jsonl --shard 3/3
  STDERR "--shard: shard index must be in 0..count-1 and count >= 1 (got 3/3)")

# A request that can never fit the KV cache is an answer, not an internal error.
capsim_cli_expect(NAME cli.infer.request_does_not_fit EXIT_CODE 0
  CMD infer ${CMAKE_SOURCE_DIR}/examples/llama3-70b-serving.json --set system.gpu=a100-sxm4-40gb --set inference.tp=2
      --set system.num_gpus=2 --format json
  STDOUT "\"status\": \"does_not_fit\"" "no room for the KV cache: the weights take 65.71 GiB a GPU")
# The table names the knobs a release range of the engine profile set (vLLM 0.6.5+'s host time).
capsim_cli_expect(NAME cli.infer.release_ranges EXIT_CODE 0
  CMD infer ${CMAKE_SOURCE_DIR}/examples/llama3-70b-serving.json --set inference.engine.name=vllm
      --set inference.engine.version=0.7.0 --set inference.workload.num_requests=50 --format table
  STDOUT "host 0.6 ms + 85 us/seq per step"
         "releases    step_overhead_ms (releases 0.6.5-), step_overhead_us_per_seq (releases 0.6.5-)")
# A server told a shorter context refuses the longer requests: the report says so.
capsim_cli_expect(NAME cli.infer.max_model_len_warning EXIT_CODE 0
  CMD infer ${CMAKE_SOURCE_DIR}/examples/llama3-70b-serving.json --set inference.engine.max_model_len=64
      --set inference.workload.num_requests=20 --format json
  STDOUT "exceeds engine.max_model_len 64: the engine refuses it")
# One engine iteration by part instead of a run: the table and the JSON report.
capsim_cli_expect(NAME cli.infer.step_table EXIT_CODE 0
  CMD infer ${CMAKE_SOURCE_DIR}/examples/llama3-70b-serving.json --step-decodes 64 --step-context 2048
      --step-prompt 512 --format table
  STDOUT "step        64 decodes at 2048 cached tokens each and a 512-token prompt chunk" "attention_projections"
         "tp_all_reduce" "dense_mlp" "GPU" "host (scheduling)" "CUDA graph  eager (576 tokens, above the 512 captured)")
# Whether the step replays a CUDA graph, and the capture size behind it.
capsim_cli_expect(NAME cli.infer.step_graph EXIT_CODE 0
  CMD infer ${CMAKE_SOURCE_DIR}/examples/llama3-70b-serving.json --step-decodes 64 --step-context 2048 --format table
  STDOUT "CUDA graph  replayed (steps up to 512 tokens are captured)")
# A training step by operator: each op of one microbatch with its runs, times and share.
capsim_cli_expect(NAME cli.train.ops_table EXIT_CODE 0
  CMD train ${CMAKE_SOURCE_DIR}/examples/llama3-8b-h100.json --ops --format table
  STDOUT "operators  one microbatch through the model on one GPU" "layer      qkv_proj                    32"
         "head       lm_head                      1" "computation ")
capsim_cli_expect(NAME cli.train.ops_json EXIT_CODE 0
  CMD train ${CMAKE_SOURCE_DIR}/examples/llama3-8b-h100.json --ops --format json
  STDOUT "\"operators\": {" "\"name\": \"core_attention\"" "\"fwd_tflops\": ")
# An RL iteration has no single step to list.
capsim_cli_expect(NAME cli.train.ops_rl EXIT_CODE 1
  CMD train ${CMAKE_SOURCE_DIR}/tests/scenarios/grpo-llama3.1-8b-colocated.json --ops
  STDERR "--ops: an RL iteration has no single training step to list (got true); drop --ops")
# A run reports where its engine time went.
capsim_cli_expect(NAME cli.infer.time_by_part EXIT_CODE 0
  CMD infer ${CMAKE_SOURCE_DIR}/examples/llama3-70b-serving.json --format table
  STDOUT "time by part dense_mlp" "of engine time")
capsim_cli_expect(NAME cli.infer.step_json EXIT_CODE 0
  CMD infer ${CMAKE_SOURCE_DIR}/examples/llama3-70b-serving.json --step-prompt 4096 --format json
  STDOUT "\"schema\": \"capsim-serving-step/1\"" "\"prompt_tokens\": 4096" "\"part\": \"routed_experts\"" "\"step_ms\""
         "\"replayed\": false" "\"max_tokens\": 512")
capsim_cli_expect(NAME cli.infer.step_later_chunk EXIT_CODE 0
  CMD infer ${CMAKE_SOURCE_DIR}/examples/llama3-70b-serving.json --step-prompt 8192 --step-prompt-cached 24576 --format table
  STDOUT "step        a 8192-token prompt chunk after 24576 cached prompt tokens" "attention_kernels")
capsim_cli_expect(NAME cli.infer.step_cached_without_prompt
  CMD infer ${CMAKE_SOURCE_DIR}/examples/llama3-70b-serving.json --step-decodes 8 --step-prompt-cached 100
  STDERR "--step-prompt-cached: the tokens before a prompt chunk, and there is none (got 100); give --step-prompt TOKENS")
# A step needs sequences; cached tokens need decodes; a run's options do not apply; all at once.
capsim_cli_expect(NAME cli.infer.step_errors
  CMD infer ${CMAKE_SOURCE_DIR}/examples/llama3-70b-serving.json --step-context 100 --max-qps
  STDERR "capsim: 3 problems in the input:"
         "--max-qps: a single step has no arrival rate (got set); drop --max-qps or the --step options"
         "--step-decodes: a step needs sequences: decodes or a prompt chunk (got 0); give --step-decodes N or --step-prompt TOKENS"
         "--step-context: the cached tokens of decodes, and there are none (got 100); give --step-decodes N")
capsim_cli_expect(NAME cli.infer.step_negative EXIT_CODE 2
  CMD infer ${CMAKE_SOURCE_DIR}/examples/llama3-70b-serving.json --step-decodes -3
  STDERR "--step-decodes: must be a whole number from 0 to 1000000000 (got -3)")
capsim_cli_expect(NAME cli.infer.step_too_many EXIT_CODE 2
  CMD infer ${CMAKE_SOURCE_DIR}/examples/llama3-70b-serving.json --step-prompt 9223372036854775807
  STDERR "--step-prompt: must be a whole number from 0 to 1000000000 (got 9223372036854775807)")
# An RL iteration: per-phase seconds and the bottleneck, in the table and the JSON report.
capsim_cli_expect(NAME cli.train.grpo_iteration EXIT_CODE 0
  CMD train ${capsim_scenarios}/grpo-llama3.1-8b-colocated.json --format table
  STDOUT "colocated placement: 2048 samples" "generation" "bottleneck")
capsim_cli_expect(NAME cli.train.grpo_iteration_json EXIT_CODE 0
  CMD train ${capsim_scenarios}/grpo-llama3.1-8b-colocated.json --format json
  STDOUT "\"generation_s\"" "\"resharding_s\"" "\"throughput_tokens_per_s\"")
capsim_cli_expect(NAME cli.train.grpo_no_des EXIT_CODE 1
  CMD train ${capsim_scenarios}/grpo-llama3.1-8b-colocated.json --engine des
  STDERR "an RL iteration is evaluated with the analytical engine")
# Errors per source family, with the signed median.
capsim_cli_expect(NAME cli.validate.group_by_source EXIT_CODE 0
  CMD validate ${CAPSIM_DATA_DIR}/validation/posttraining-public.json --group-by source,mode --format table
  STDOUT "errors by source" "litgpt" "errors by mode" "signed")
capsim_cli_expect(NAME cli.validate.group_by_gpus EXIT_CODE 0
  CMD validate ${CAPSIM_DATA_DIR}/validation/training-public.json --group-by gpus --format table
  STDOUT "errors by gpus" "  2-8 " "  513-4096 ")
# A what-if over published cases says so before its figures; what is wrong with it is one
# input error naming every problem.
capsim_cli_expect(NAME cli.validate.what_if EXIT_CODE 0
  CMD validate ${CAPSIM_DATA_DIR}/validation/training-public.json --only llmfoundry-a100* --set training.attention=flash-triton --format table
  STDOUT "what-if, not the published configurations: --only llmfoundry-a100* --set training.attention=flash-triton"
         "llmfoundry-a10040-bf16-mpt-7b-seq2048-128gpu")
capsim_cli_expect(NAME cli.validate.what_if_errors EXIT_CODE 1
  CMD validate ${CAPSIM_DATA_DIR}/validation/training-public.json --only nothing-* --set bogus --set inference.tp=2
  STDERR "3 problems in the input" "--only: matches no case id in the files (got nothing-*)"
         "--set: must look like path=value" "--set: applies to no selected case")
capsim_cli_expect(NAME cli.validate.group_by_unknown EXIT_CODE 2
  CMD validate ${CAPSIM_DATA_DIR}/validation/posttraining-public.json --group-by family
  STDERR "--group-by")
# A run against a baseline report: nothing moved against itself; a file that is not a
# report is an input error before the run.
add_test(NAME cli.validate.baseline_itself
         COMMAND ${CMAKE_COMMAND} -DCAPSIM=$<TARGET_FILE:capsim> -DFILE=${CAPSIM_DATA_DIR}/validation/posttraining-public.json
                 -DWORK=${CMAKE_CURRENT_BINARY_DIR}/validate-baseline -P ${CMAKE_CURRENT_SOURCE_DIR}/validate_baseline.cmake)
set_tests_properties(cli.validate.baseline_itself PROPERTIES ENVIRONMENT CAPSIM_DATA_DIR=${CAPSIM_DATA_DIR} LABELS cli)
capsim_cli_expect(NAME cli.validate.baseline_not_a_report EXIT_CODE 1
  CMD validate ${CAPSIM_DATA_DIR}/validation/posttraining-public.json --baseline ${CAPSIM_DATA_DIR}/validation/posttraining-public.json
  STDERR "posttraining-public.json#/schema: must be \"capsim-validation-report/1\" (got \"capsim-validation/1\"); this is a validation file")

get_property(capsim_cli_tests GLOBAL PROPERTY capsim_cli_tests)
set_tests_properties(${capsim_cli_tests} PROPERTIES ENVIRONMENT CAPSIM_DATA_DIR=${CAPSIM_DATA_DIR} LABELS cli)


# Rule: N shards run as separate processes and merged equal the unsharded sweep.
add_test(NAME cli.sweep_shards_merge_equal_unsharded
         COMMAND ${CMAKE_COMMAND} -DCAPSIM=$<TARGET_FILE:capsim> -DSWEEP=${CMAKE_CURRENT_SOURCE_DIR}/sweeps/small.json
                 -DWORK=${CMAKE_CURRENT_BINARY_DIR}/shard-merge -DN=3 -P ${CMAKE_CURRENT_SOURCE_DIR}/shard_merge.cmake)
set_tests_properties(cli.sweep_shards_merge_equal_unsharded PROPERTIES ENVIRONMENT CAPSIM_DATA_DIR=${CAPSIM_DATA_DIR} LABELS cli)

# Calibration: import published nccl-tests logs, fit them, show and use the profile.
set(capsim_logs ${CMAKE_CURRENT_SOURCE_DIR}/data/nccl-tests)
capsim_cli_expect(NAME cli.calibrate.import EXIT_CODE 0
  CMD calibrate import-nccl-tests ${capsim_logs}/h100-1node-8gpu-5coll-ge32MB.txt ${capsim_logs}/dgx-h100-8gpu-allreduce-nvls.txt
      -o ${CMAKE_CURRENT_BINARY_DIR}/h100-nccl.jsonl
  STDERR "h100-1node-8gpu-5coll-ge32MB.txt: 100 measurements" "dgx-h100-8gpu-allreduce-nvls.txt: 64 measurements"
  OUT_FILE ${CMAKE_CURRENT_BINARY_DIR}/h100-nccl.jsonl FILE_CONTAINS "\"schema\":\"capsim-calibration-raw/1\"" "\"op\":\"all_to_all\"")
capsim_cli_expect(NAME cli.calibrate.fit EXIT_CODE 0
  CMD calibrate fit ${CMAKE_CURRENT_BINARY_DIR}/h100-nccl.jsonl -o ${CMAKE_CURRENT_BINARY_DIR}/h100-nccl-profile.json
  STDERR "all_gather x8 intra: alpha" "leave-one-out"
  OUT_FILE ${CMAKE_CURRENT_BINARY_DIR}/h100-nccl-profile.json FILE_CONTAINS "\"schema\": \"capsim-calibration-profile/1\"")
set_tests_properties(cli.calibrate.fit PROPERTIES DEPENDS cli.calibrate.import)
capsim_cli_expect(NAME cli.calibrate.show EXIT_CODE 0
  CMD calibrate show ${CMAKE_CURRENT_BINARY_DIR}/h100-nccl-profile.json --format table
  STDOUT "all_reduce over 8 ranks on 1 node(s)" "the fit extrapolates outside")
set_tests_properties(cli.calibrate.show PROPERTIES DEPENDS cli.calibrate.fit)
capsim_cli_expect(NAME cli.calibrate.train EXIT_CODE 0
  CMD train ${CMAKE_CURRENT_SOURCE_DIR}/../examples/llama3-8b-h100.json --format json
      --calibration ${CMAKE_CURRENT_BINARY_DIR}/h100-nccl-profile.json
  STDOUT "\"calibration\"" "\"profile\": \"h100-nccl-profile\"" "all_gather_8_intra")
set_tests_properties(cli.calibrate.train PROPERTIES DEPENDS cli.calibrate.fit)
capsim_cli_expect(NAME cli.calibrate.not_a_profile
  CMD train ${CMAKE_CURRENT_SOURCE_DIR}/../examples/llama3-8b-h100.json --calibration ${capsim_logs}/t4-2gpu-allreduce-J.json
  STDERR "/schema: must be \"capsim-calibration-profile/1\"" "make one with capsim calibrate fit")
capsim_cli_expect(NAME cli.calibrate.fit_not_raw
  CMD calibrate fit ${capsim_logs}/a100-8gpu-nvlink-allreduce.txt -o ${CMAKE_CURRENT_BINARY_DIR}/never.json
  STDERR "a100-8gpu-nvlink-allreduce.txt:1: first line must be the header with schema" "convert it with capsim calibrate import-nccl-tests")
if(TARGET capsim-calibrate)
  # No GPU on the test machine: one line and exit code 3 (a GPU machine skips this test).
  add_test(NAME cli.calibrate.no_gpu COMMAND ${CMAKE_COMMAND} "-DCMD=$<TARGET_FILE:capsim-calibrate>$<SEMICOLON>-o$<SEMICOLON>${CMAKE_CURRENT_BINARY_DIR}/never.jsonl"
           -DEXIT_CODE=3 "-DSTDERR_CONTAINS=capsim-calibrate: no CUDA GPU visible" -P ${capsim_expect})
endif()
capsim_cli_expect(NAME cli.calibrate.shapes EXIT_CODE 0
  CMD calibrate shapes ${CMAKE_CURRENT_SOURCE_DIR}/../examples/llama3-8b-h100.json
  STDOUT "# GEMM shapes scenario llama3-8b-h100-64gpu costs" "bf16 4096 3072 "
  STDERR "GEMM shapes")
# Steps recovered from a serving benchmark's saved token times (a synthetic run whose 143
# steps and batches are known: tests/data/serving-steps/README.md), with and without the
# model's prediction beside them, and a file that is not such a result.
set(capsim_steps ${CMAKE_CURRENT_SOURCE_DIR}/data/serving-steps)
capsim_cli_expect(NAME cli.calibrate.serving_steps EXIT_CODE 0
  CMD calibrate serving-steps ${capsim_steps}/synthetic-result.json --format table
  STDOUT "synthetic-result.json: 24 of 24 requests placed on 143 steps (3.57 s of the run's 3.92 s)"
         "        0-7     67     21.62    20.49    22.80      3.9      520"
         "          1     21     38.19    37.00    39.01      547        8")
capsim_cli_expect(NAME cli.calibrate.serving_steps_predicted EXIT_CODE 0
  CMD calibrate serving-steps ${capsim_steps}/synthetic-result.json --scenario ${CMAKE_CURRENT_SOURCE_DIR}/../examples/llama3-70b-serving.json
      --format json
  STDOUT "\"scenario\": \"llama3-70b-h100-tp4-sharegpt\"" "\"predicted_median_ms\"" "\"schema\": \"capsim-serving-steps/1\""
         "\"step_overhead_ms\": " "\"eager_host_us_per_layer\": ")
capsim_cli_expect(NAME cli.calibrate.serving_steps_chunked EXIT_CODE 0
  CMD calibrate serving-steps ${capsim_steps}/synthetic-result.json --scenario ${capsim_scenarios}/serving-small-budget.json
      --format table
  STDOUT "note: 14 prompts exceed the deployment's step budget of 512 tokens and ran in chunks"
         "host time that fits the decode-only steps: ")
capsim_cli_expect(NAME cli.calibrate.serving_steps_calibration_needs_a_scenario
  CMD calibrate serving-steps ${capsim_steps}/synthetic-result.json
      --calibration ${CMAKE_CURRENT_SOURCE_DIR}/../data/calibration/h100-nccl-tests-public.json
  STDERR "--calibration: prices the steps of a scenario, and there is none")
capsim_cli_expect(NAME cli.calibrate.serving_steps_calibrated EXIT_CODE 0
  CMD calibrate serving-steps ${capsim_steps}/synthetic-result.json --scenario ${CMAKE_CURRENT_SOURCE_DIR}/../examples/llama3-70b-serving.json
      --calibration ${CMAKE_CURRENT_SOURCE_DIR}/../data/calibration/h100-nccl-tests-public.json --format json
  STDOUT "\"calibration\"" "\"applied\": true")
capsim_cli_expect(NAME cli.calibrate.serving_steps_not_a_result
  CMD calibrate serving-steps ${capsim_scenarios}/llama2-7b-8gpu.json --scenario ${capsim_scenarios}/llama2-7b-8gpu.json
  STDERR "llama2-7b-8gpu.json#/ttfts: missing: times to first token (seconds) per request"
         "llama2-7b-8gpu.json#/kind: --scenario needs an inference scenario (got \"training\")")
get_property(capsim_cli_tests GLOBAL PROPERTY capsim_cli_tests)
set_tests_properties(${capsim_cli_tests} PROPERTIES ENVIRONMENT CAPSIM_DATA_DIR=${CAPSIM_DATA_DIR} LABELS cli)
capsim_cli_expect(NAME cli.calibrate.compare EXIT_CODE 0
  CMD calibrate compare ${CMAKE_CURRENT_BINARY_DIR}/h100-nccl.jsonl --gpu h100-sxm5-80gb --format table
  STDOUT "default model (h100-sxm5-80gb, 8 GPUs/node, NIC 400 Gb/s) against the measurements" "all_to_all x8 on 1 node(s), >= 1 MiB" "overall median |error|")
set_tests_properties(cli.calibrate.compare PROPERTIES DEPENDS cli.calibrate.import LABELS cli)
# GEMMs by rows, and each shape in the JSON report (the published H100 table).
capsim_cli_expect(NAME cli.calibrate.compare_gemm EXIT_CODE 0
  CMD calibrate compare ${CAPSIM_DATA_DIR}/calibration/raw/h100-vllm-gemm-public.jsonl --gpu h100-sxm5-80gb --format table
  STDOUT "gemm bf16, 1-16 rows" "gemm fp8, 17-512 rows" "overall median |error| 3.3% over 17 points")
capsim_cli_expect(NAME cli.calibrate.compare_gemm_json EXIT_CODE 0
  CMD calibrate compare ${CAPSIM_DATA_DIR}/calibration/raw/h100-vllm-gemm-public.jsonl --gpu h100-sxm5-80gb --format json
  STDOUT "\"shapes\"" "\"m\": 128" "\"measured_s\"")
# Attention by the kernel that ran (cuDNN's and PyTorch's FlashAttention-2, measured on an
# H200), each against its own table; decode lines (one query over a cache) are left out.
capsim_cli_expect(NAME cli.calibrate.compare_attention_kernels EXIT_CODE 0
  CMD calibrate compare ${CAPSIM_DATA_DIR}/calibration/raw/h200-torch-probe-run1.jsonl --gpu h200-sxm-141gb --format table
  STDOUT "attention bwd (cudnn)                            15" "attention fwd (flash2)                           15"
         "overall median |error| 16.4% over 400 points")
# Grouped expert GEMMs (measured on an H100) by dtype, kernel and rows an expert, the case
# column widened to the longest name.
capsim_cli_expect(NAME cli.calibrate.compare_grouped_gemm EXIT_CODE 0
  CMD calibrate compare ${CAPSIM_DATA_DIR}/calibration/raw/h100-torch-probe-grouped.jsonl --gpu h100-sxm5-80gb --format table
  STDOUT "grouped gemm fp8 scaled_grouped_mm, 17-512 rows an expert     70      22.1%      51.7%     -21.8%"
         "grouped gemm bf16 per_expert_loop, > 512 rows an expert       10"
         "overall median |error| 11.4% over 354 points")
set_tests_properties(cli.calibrate.compare_gemm cli.calibrate.compare_gemm_json cli.calibrate.compare_attention_kernels
  cli.calibrate.compare_grouped_gemm PROPERTIES LABELS cli)
capsim_cli_expect(NAME cli.plan.no_default_price
  CMD plan ${capsim_scenarios}/plan-no-default-price.json
  STDERR "/offers/0/usd_per_gpu_hour: is required: no default price for h800-sxm5-80gb; defaults (data/prices.json) cover a100-sxm4-40gb, h100-sxm5-80gb, h200-sxm-141gb")
capsim_cli_expect(NAME cli.plan.default_prices EXIT_CODE 0
  CMD plan ${CMAKE_CURRENT_SOURCE_DIR}/../examples/plan-serve-llama3-8b.json --format json
  STDOUT "\"usd_per_gpu_hour\": 4.916" "Amazon EC2 Capacity Blocks for ML pricing")
set_tests_properties(cli.plan.no_default_price cli.plan.default_prices PROPERTIES ENVIRONMENT CAPSIM_DATA_DIR=${CAPSIM_DATA_DIR} LABELS cli)
# Rule: an RL goal compares colocated against split pools; both appear in the report.
capsim_cli_expect(NAME cli.plan.rl_example EXIT_CODE 0
  CMD plan ${CMAKE_CURRENT_SOURCE_DIR}/../examples/plan-grpo-llama3-8b.json --format json
  STDOUT "\"kind\": \"rl\"" "\"meets_goal\": true" "\"placement\": \"colocated\"" "\"placement\": \"split\""
         "\"rollout_layout\": {" "\"train_layout\": {")
# Rule: a deadline no cluster meets is an answer, not an error: the quickest per offer, exit 0.
capsim_cli_expect(NAME cli.plan.rl_no_offer_meets EXIT_CODE 0
  CMD plan ${capsim_scenarios}/plan-grpo-late.json --format table
  STDOUT "no offer meets the deadline of 0.000694 days; the quickest per offer:" "past the deadline")
# Rule: a bad rl goal names every problem at its pointer in the plan file, exit 1.
capsim_cli_expect(NAME cli.plan.rl_bad_goal
  CMD plan ${capsim_scenarios}/plan-grpo-bad.json
  STDERR "capsim: 10 problems in the input:"
         "  /rl/deadline_days: must be a number > 0 (got 0)"
         "  /rl/gpu_counts/1: must be an integer >= 1 (got 0)"
         "  /rl/gpu_memory_utilization/split: must be in (0, 1"  # a "]" in an argument would merge CMake list items
         "(got 1.5)"
         "  /rl/gpu_memory_utilization/spilt: unknown key; did you mean \"split\"?"
         "  /rl/training/dp: is chosen by the planner for each cluster (the training pool / (tp*pp*cp)) (got 8); remove it"
         "  /rl/training/rl/placement: is chosen by the planner for each cluster (colocated, and split pools) (got \"split\"); remove it"
         "  /rl/training/rl/gpus: is chosen by the planner for each cluster (colocated, and split pools) (got {\"rollout\":4,\"train\":4}); remove it"
         "  /rl/training/rl/async_staleness: must be an integer >= 0 or \"auto\" (0 and 1 for split placements) (got \"sometimes\")"
         "  /rl/training/rl/rollout/precison: unknown key; did you mean \"precision\"?"
         "  /rl/prompts: must be a whole number of iterations: a multiple of training.rl.prompts_per_step (8) (got 100)")
# Rule: a serving goal's lists that are not lists are input errors at their pointers (an
# object where weight_dtypes' list belongs once ended the run on an uncaught exception).
capsim_cli_expect(NAME cli.plan.serve_bad_lists
  CMD plan ${capsim_scenarios}/plan-serve-bad-lists.json
  STDERR "capsim: 3 problems in the input:"
         "  /serving/tp: must be a non-empty list of TP sizes (got {\"min\":1})"
         "  /serving/disaggregation: must be a list of"  # a "[" in an argument would split CMake list items
         "(got \"none\")"
         "  /serving/weight_dtypes: must be a non-empty list of weight types (got {\"mean\":100})")
# Rule: the same plan twice gives byte-identical reports.
add_test(NAME cli.plan.rl_twice_identical
         COMMAND ${CMAKE_COMMAND} -DCAPSIM=$<TARGET_FILE:capsim> -DPLAN=${CMAKE_CURRENT_SOURCE_DIR}/../examples/plan-grpo-llama3-8b.json
                 -DWORK=${CMAKE_CURRENT_BINARY_DIR}/plan-twice -P ${CMAKE_CURRENT_SOURCE_DIR}/plan_twice.cmake)
set_tests_properties(cli.plan.rl_example cli.plan.rl_no_offer_meets cli.plan.rl_bad_goal cli.plan.serve_bad_lists cli.plan.rl_twice_identical
                     PROPERTIES ENVIRONMENT CAPSIM_DATA_DIR=${CAPSIM_DATA_DIR} LABELS cli)
capsim_cli_expect(NAME cli.calibrate.import_a100 EXIT_CODE 0
  CMD calibrate import-nccl-tests ${capsim_logs}/a100-8gpu-nvlink-allreduce.txt -o ${CMAKE_CURRENT_BINARY_DIR}/a100-nccl.jsonl)
capsim_cli_expect(NAME cli.calibrate.fit_a100 EXIT_CODE 0
  CMD calibrate fit ${CMAKE_CURRENT_BINARY_DIR}/a100-nccl.jsonl -o ${CMAKE_CURRENT_BINARY_DIR}/a100-nccl-profile.json)
capsim_cli_expect(NAME cli.calibrate.other_gpu_warns EXIT_CODE 0
  CMD train ${CMAKE_CURRENT_SOURCE_DIR}/../examples/llama3-8b-h100.json --format json
      --calibration ${CMAKE_CURRENT_BINARY_DIR}/a100-nccl-profile.json
  STDERR "warning: calibration profile a100-nccl-profile was measured on NVIDIA A100-SXM4-80GB, not h100-sxm5-80gb; the default model answers"
  STDOUT "\"applied\": false")
set_tests_properties(cli.calibrate.fit_a100 PROPERTIES DEPENDS cli.calibrate.import_a100)
set_tests_properties(cli.calibrate.other_gpu_warns PROPERTIES DEPENDS cli.calibrate.fit_a100)
set_tests_properties(cli.calibrate.import_a100 cli.calibrate.fit_a100 cli.calibrate.other_gpu_warns PROPERTIES LABELS cli)

# docs/engines.md carries the engine profiles' table exactly as `capsim list engines` prints it.
add_test(NAME cli.list.engines_matches_docs
         COMMAND ${CMAKE_COMMAND} -DCAPSIM=$<TARGET_FILE:capsim> -DDOC=${CMAKE_SOURCE_DIR}/docs/engines.md
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/docs_table.cmake)
set_tests_properties(cli.list.engines_matches_docs PROPERTIES ENVIRONMENT CAPSIM_DATA_DIR=${CAPSIM_DATA_DIR} LABELS cli)

# Hostile inputs (docs/hardening.md): each is an input error (1) or a usage error (2) with
# where and why, never an internal error, a crash or a hang.
set(capsim_hostile ${CMAKE_CURRENT_SOURCE_DIR}/hostile)
capsim_cli_expect(NAME cli.hostile.number_beyond_double
  CMD train ${capsim_hostile}/huge-number.json --format json
  STDERR "huge-number.json: number at line 6, column 74 is beyond the range of a double (about 1.8e308) (got 1e309)")
capsim_cli_expect(NAME cli.hostile.set_number_beyond_double
  CMD train ${capsim_scenarios}/llama2-7b-8gpu.json --set training.seq_len=1e309 --format json
  STDERR "--set: number is beyond the range of a double (about 1.8e308) (got training.seq_len=1e309)")
string(REPEAT "[" 100000 capsim_deep)
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/hostile-deep.json "${capsim_deep}")
capsim_cli_expect(NAME cli.hostile.deep_nesting
  CMD train ${CMAKE_CURRENT_BINARY_DIR}/hostile-deep.json --format json
  STDERR "hostile-deep.json: arrays and objects nested deeper than 256 levels at line 1, column 257")
capsim_cli_expect(NAME cli.hostile.duplicate_key
  CMD train ${capsim_hostile}/duplicate-key.json --format json
  STDERR "duplicate-key.json#/training/tp: key appears twice in one object, at line 6, column 16 and line 7, column 16 (got \"tp\"); keep one of them")
capsim_cli_expect(NAME cli.hostile.device_file
  CMD train /dev/zero --format json
  STDERR "/dev/zero: is not a regular file (a folder, FIFO or device)")
capsim_cli_expect(NAME cli.hostile.validation_measured_not_positive EXIT_CODE 0
  CMD validate ${capsim_hostile}/bad-measured.json --format json
  STDOUT "\"reason\": \"cannot read the case: /measured/step_time_s: must be a positive number (got 0)\""
         "\"reason\": \"cannot read the case: /measured: must be an object of metric: value (got 5)\"")
capsim_cli_expect(NAME cli.hostile.sweep_step_too_small
  CMD sweep ${capsim_hostile}/sweep-tiny-step.json -o ${CMAKE_CURRENT_BINARY_DIR}/never.jsonl
  STDERR "/axes/0/range: has more than 10000000 values (the row limit) (got {\"start\":0,\"step\":1e-300,\"stop\":1}); raise the step")
capsim_cli_expect(NAME cli.hostile.sweep_grid_too_large
  CMD sweep ${capsim_hostile}/sweep-huge-grid.json -o ${CMAKE_CURRENT_BINARY_DIR}/never.jsonl
  STDERR "/axes: the grid has more than 10000000 rows (the limit); split it into several sweeps")
capsim_cli_expect(NAME cli.hostile.sweep_path_not_a_string
  CMD sweep ${capsim_hostile}/sweep-path-not-string.json -o ${CMAKE_CURRENT_BINARY_DIR}/never.jsonl
  STDERR "/axes/0/path: must be a key path (e.g. training.tp) (got 5)")
capsim_cli_expect(NAME cli.hostile.profile_attention_lengths_differ
  CMD train ${capsim_scenarios}/llama2-7b-8gpu.json --calibration ${capsim_hostile}/profile-attention-mismatch.json
  STDERR "profile-attention-mismatch.json/attention/0: seq and tflops must be non-empty and of one length (got 2 and 1 entries); make one with capsim calibrate fit")
capsim_cli_expect(NAME cli.hostile.layers_beyond_limit
  CMD train ${capsim_hostile}/inline-model.json --set model.num_hidden_layers=1000000000 --format json
  STDERR "/model/num_hidden_layers: must be at most 4096 (the model size limit) (got 1000000000)")
capsim_cli_expect(NAME cli.hostile.layers_negative
  CMD train ${capsim_hostile}/inline-model.json --set model.num_hidden_layers=-1 --format json
  STDERR "/model/num_hidden_layers: must be a positive integer (got -1)")
capsim_cli_expect(NAME cli.hostile.hidden_overflows_parameter_count
  CMD train ${capsim_hostile}/inline-model.json --set model.hidden_size=1099511627776 --format json
  STDERR "/model/hidden_size: must be at most 1048576 (the model size limit) (got 1099511627776)")
capsim_cli_expect(NAME cli.hostile.parameters_beyond_limit
  CMD train ${capsim_hostile}/inline-model.json --set model.hidden_size=1048576 --set model.intermediate_size=16777216
      --set model.num_attention_heads=8192 --format json
  STDERR "/model: a model may have at most 1e15 parameters (got about 1.8e+15 parameters)")
capsim_cli_expect(NAME cli.hostile.head_dim_negative
  CMD train ${capsim_hostile}/inline-model.json --set model.head_dim=-1 --format json
  STDERR "/model/head_dim: must be a positive integer (got -1)")
capsim_cli_expect(NAME cli.hostile.fp8_without_fp8_tensor_cores
  CMD train ${capsim_scenarios}/llama2-7b-8gpu.json --set system.gpu=a100-sxm4-80gb --set training.precision=fp8 --format json
  STDERR "/training/precision: needs FP8 tensor cores, which a100-sxm4-80gb does not have (got \"fp8\"); use bf16 or a GPU with FP8 (Hopper or later)")
capsim_cli_expect(NAME cli.hostile.sla_without_max_qps EXIT_CODE 2
  CMD infer ${CMAKE_SOURCE_DIR}/examples/llama3-70b-serving.json --tpot-p99-ms 40
  STDERR "--tpot-p99-ms requires --max-qps")
capsim_cli_expect(NAME cli.hostile.threads_beyond_limit EXIT_CODE 2
  CMD sweep ${CMAKE_CURRENT_SOURCE_DIR}/sweeps/small.json -o ${CMAKE_CURRENT_BINARY_DIR}/never.jsonl --threads 100000
  STDERR "--threads: Value 100000 not in range 0 to 1024")
capsim_cli_expect(NAME cli.hostile.unknown_subcommand EXIT_CODE 2
  CMD foo
  STDERR "capsim: unknown subcommand \"foo\"; valid: model, train, memory, infer, search, sweep, merge, plan, validate, calibrate, list")
get_property(capsim_cli_tests GLOBAL PROPERTY capsim_cli_tests)
set_tests_properties(${capsim_cli_tests} PROPERTIES ENVIRONMENT CAPSIM_DATA_DIR=${CAPSIM_DATA_DIR} LABELS cli)

# capsim merge refuses parts that do not make one grid (docs/hardening.md).
add_test(NAME cli.hostile.merge_faults
         COMMAND ${CMAKE_COMMAND} -DCAPSIM=$<TARGET_FILE:capsim> -DA=${CMAKE_CURRENT_SOURCE_DIR}/sweeps/small.json
                 -DB=${CMAKE_CURRENT_SOURCE_DIR}/sweeps/small-b.json -DWORK=${CMAKE_CURRENT_BINARY_DIR}/merge-faults
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/merge_faults.cmake)
set_tests_properties(cli.hostile.merge_faults PROPERTIES ENVIRONMENT CAPSIM_DATA_DIR=${CAPSIM_DATA_DIR} LABELS cli)

# Faults around sweeps, -o files and stdout, and signals (docs/hardening.md, "Interrupted runs and faults").
find_program(CAPSIM_PRLIMIT prlimit)
mark_as_advanced(CAPSIM_PRLIMIT)
set(capsim_prlimit "")
if(CAPSIM_PRLIMIT)
  set(capsim_prlimit ${CAPSIM_PRLIMIT})
endif()
add_test(NAME cli.hostile.journal_faults
         COMMAND ${CMAKE_COMMAND} -DCAPSIM=$<TARGET_FILE:capsim> -DSWEEP=${CMAKE_CURRENT_SOURCE_DIR}/sweeps/small.json
                 -DSWEEP_B=${CMAKE_CURRENT_SOURCE_DIR}/sweeps/small-b.json -DSCENARIO=${capsim_scenarios}/llama2-7b-8gpu.json
                 -DPRLIMIT=${capsim_prlimit} -DWORK=${CMAKE_CURRENT_BINARY_DIR}/journal-faults
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/journal_faults.cmake)
foreach(mode kill9 sigint)
  add_test(NAME cli.hostile.sweep_${mode}_resume
           COMMAND ${CMAKE_COMMAND} -DCAPSIM=$<TARGET_FILE:capsim> -DSWEEP=${CMAKE_CURRENT_SOURCE_DIR}/sweeps/slow-serving.json
                   -DRUNNER=${CMAKE_CURRENT_SOURCE_DIR}/signal_run.sh -DMODE=${mode}
                   -DWORK=${CMAKE_CURRENT_BINARY_DIR}/sweep-${mode} -P ${CMAKE_CURRENT_SOURCE_DIR}/sweep_signals.cmake)
endforeach()
# Ctrl-C during the other long commands: exit 130, no -o file and no temporary file.
function(capsim_sigint_test name delay)
  set(out ${CMAKE_CURRENT_BINARY_DIR}/sigint-${name}.json)
  string(REPLACE ";" "$<SEMICOLON>" cmd "$<TARGET_FILE:capsim>;${ARGN};-o;${out}")
  add_test(NAME cli.hostile.sigint_${name}
           COMMAND ${CMAKE_COMMAND} "-DCMD=${cmd}" -DOUT=${out} -DDELAY=${delay}
                   -DRUNNER=${CMAKE_CURRENT_SOURCE_DIR}/signal_run.sh -P ${CMAKE_CURRENT_SOURCE_DIR}/signal_command.cmake)
endfunction()
# Each runs for several seconds (at least 5 times the delay) on a fast machine.
capsim_sigint_test(search 1 search ${CMAKE_SOURCE_DIR}/examples/gpt3-175b-a100-search.json --threads 1 --top 1000
                   --des-recheck 1000 --format json)
capsim_sigint_test(infer_max_qps 1 infer ${CMAKE_SOURCE_DIR}/examples/llama3-70b-serving.json --max-qps
                   --set inference.workload.num_requests=20000 --format json)
capsim_sigint_test(validate 1 validate ${CAPSIM_DATA_DIR}/validation/training-public.json
                   ${CAPSIM_DATA_DIR}/validation/inference-public.json ${CAPSIM_DATA_DIR}/validation/posttraining-public.json
                   ${CAPSIM_DATA_DIR}/validation/serving-percentiles-public.json --format json)
set_tests_properties(cli.hostile.journal_faults cli.hostile.sweep_kill9_resume
                     cli.hostile.sweep_sigint_resume cli.hostile.sigint_search cli.hostile.sigint_infer_max_qps
                     cli.hostile.sigint_validate
                     PROPERTIES ENVIRONMENT CAPSIM_DATA_DIR=${CAPSIM_DATA_DIR} LABELS cli TIMEOUT 300)

# Rule: a run over ~2 s draws a progress line on a terminal (a pseudo-terminal from
# util-linux `script`; skipped without it) and nothing on stderr redirected to a file; the
# report is byte-identical either way.
add_test(NAME cli.progress_on_terminal
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/progress_tty.sh $<TARGET_FILE:capsim>
                 ${CMAKE_SOURCE_DIR}/examples/gpt3-175b-a100-search.json ${CMAKE_CURRENT_BINARY_DIR}/progress-tty)
set_tests_properties(cli.progress_on_terminal PROPERTIES SKIP_RETURN_CODE 77
                     ENVIRONMENT CAPSIM_DATA_DIR=${CAPSIM_DATA_DIR} LABELS "cli;slow" TIMEOUT 120)
