#[=======================================================================[.rst:
ggml-compileiq.cmake
--------------------

The CompileIQ integration of ggml's CUDA backend for the LLM-inference campaign
(``benchmarks/llm/campaign.py``), added to an unmodified ggml checkout at configure time:

::

  cmake -S <ggml> -B build -G Ninja -DCMAKE_PROJECT_ggml_INCLUDE=<this file> \
        -DCompileIQ_ROOT=$(python -m compileiq_build --cmake-dir) \
        -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real -DCMAKE_BUILD_TYPE=Release

A teammate (or llama.cpp's build) without the compileiq_build package passes the committed
toolchain file instead of ``CompileIQ_ROOT``: ``-DCMAKE_TOOLCHAIN_FILE=ggml-llm-compileiq-toolchain.cmake``.

CMake includes it right after ggml's ``project()``, before ggml defines its targets, so the
``compileiq_tune()``/``compileiq_add_benchmark()`` calls run deferred, at the end of ggml's
directory, once ``ggml-cuda`` and ``test-backend-ops`` exist (and before CompileIQ's own
end-of-configure code, which ``find_package`` defers after them, to the end of the top level).
Inside llama.cpp (ggml as a subdirectory, no ``test-backend-ops`` of ggml's) it declares the
groups only, which is what applying a toolchain file needs.

Groups of ``ggml-cuda`` (paths relative to ``src/ggml-cuda``), each judged on the
``test-backend-ops perf`` cases that run its code (LLM shapes: a 4096 x 14336 FFN matrix, a
128-expert MoE layer with 8 used, 8 KV heads shared by 32 query heads of size 128):

``mmq``    the q4_0 instance of the quantized matmul: prefill (n = 512), MoE prefill.
``mmvq``   the quantized matrix-vector kernels: decode (n = 1) for q4_0, q4_K and q8_0,
           a small batch (n = 8), MoE decode.
``fattn``  the vector flash-attention kernel for f16 K/V: decode with a 4096 and a
           16384-token KV cache.
``rope``   RoPE of a 512-token prompt (llama 7B shape), f32 and f16.

Each benchmark's ``CHECK`` is ``test-backend-ops test`` of its ops: a candidate that fails it is
invalid.

Large f16/f32 matmuls go to cuBLAS and are left out: no flag of ggml reaches them.
#]=======================================================================]

if(NOT GGML_CUDA)
  message(FATAL_ERROR "ggml-compileiq.cmake tunes ggml's CUDA backend: configure with -DGGML_CUDA=ON.")
endif()

function(_ggml_llm_compileiq)
  if(NOT TARGET ggml-cuda)
    message(FATAL_ERROR "ggml-compileiq.cmake: ggml defined no target ggml-cuda. Configure with -DGGML_CUDA=ON.")
  endif()

  compileiq_tune(ggml-cuda SOURCES template-instances/mmq-instance-q4_0.cu GROUP mmq)
  compileiq_tune(ggml-cuda SOURCES mmvq.cu GROUP mmvq)
  compileiq_tune(ggml-cuda SOURCES template-instances/fattn-vec-instance-f16-f16.cu GROUP fattn)
  compileiq_tune(ggml-cuda SOURCES rope.cu GROUP rope)
  if(NOT TARGET test-backend-ops)
    # ggml inside llama.cpp builds no tests of its own: the groups get the toolchain file's
    # flags, and there is nothing to tune with.
    message(STATUS "ggml-compileiq.cmake: no test-backend-ops target (-DGGML_BUILD_TESTS=ON builds it), "
            "so no benchmark is registered")
    return()
  endif()

  # One line per case of `test-backend-ops perf` (console output: the CSV output has no time):
  # "  MUL_MAT(type_a=q4_0,...):   3112 runs -   321.38 us/run - ...", each case a workload.
  set(case "^  (?<name>[A-Z_]+\\(.*\\)):\\s+\\d+ runs -\\s+([0-9.]+) us/run")
  set(perf test-backend-ops perf -b CUDA0)
  # perf checks nothing: each candidate must pass ggml's own test of the group's ops (the CUDA
  # backend against the CPU backend, on ggml's list of shapes, which differs from perf's).
  set(test CHECK test-backend-ops test -b CUDA0)
  set(ffn "type_b=f32,m=4096,n=%N%,k=14336,")          # MUL_MAT: an FFN matrix, n tokens
  set(moe "type_b=f32,n_mats=128,n_used=8,b=0,m=768,n=%N%,k=2048$")  # MUL_MAT_ID, not fused
  string(REPLACE "%N%" 512 ffn_prefill "${ffn}")
  string(REPLACE "%N%" 512 moe_prefill "${moe}")
  string(REPLACE "%N%" 1 ffn_decode "${ffn}")
  string(REPLACE "%N%" 8 ffn_batch8 "${ffn}")
  string(REPLACE "%N%" 1 moe_decode "${moe}")

  compileiq_add_benchmark(llm_mmq COMMAND ${perf} -o MUL_MAT,MUL_MAT_ID
                          -p "^type_a=q4_0,${ffn_prefill}|^type_a=q4_0,${moe_prefill}"
                          TARGETS ggml-cuda:mmq REGEX "${case}" UNIT us TIMEOUT 300
                          ${test} -o MUL_MAT,MUL_MAT_ID -p "type_a=q4_0,")
  compileiq_add_benchmark(llm_mmvq COMMAND ${perf} -o MUL_MAT,MUL_MAT_ID
                          -p "^type_a=(q4_0|q4_K|q8_0),${ffn_decode}|^type_a=q4_0,${ffn_batch8}|^type_a=q4_0,${moe_decode}"
                          TARGETS ggml-cuda:mmvq REGEX "${case}" UNIT us TIMEOUT 300
                          ${test} -o MUL_MAT,MUL_MAT_ID -p "type_a=(q4_0|q4_K|q8_0),")
  compileiq_add_benchmark(llm_fattn COMMAND ${perf} -o FLASH_ATTN_EXT
                          -p "^hsk=128,hsv=128,nh=8,nr23=\\[4,1\\],kv=(4096|16384),nb=1,.*type_K=f16,type_V=f16"
                          TARGETS ggml-cuda:fattn REGEX "${case}" UNIT us TIMEOUT 300
                          ${test} -o FLASH_ATTN_EXT -p "hsk=128,hsv=128,.*type_K=f16,type_V=f16")
  compileiq_add_benchmark(llm_rope COMMAND ${perf} -o ROPE
                          -p "^type=f(32|16),ne_a=\\[128,32,512,1\\],n_dims=128,mode=0,.*ff=0,v=0"
                          TARGETS ggml-cuda:rope REGEX "${case}" UNIT us TIMEOUT 300
                          ${test} -o ROPE -p "type=f(32|16),")
endfunction()

# Deferred before find_package defers CompileIQ's end-of-configure code: deferred calls run in
# the order they were deferred.
cmake_language(DEFER CALL _ggml_llm_compileiq)
# Optional: a teammate without the compileiq_build package builds with the committed toolchain
# file alone, whose own compileiq_tune() applies the flags to the groups' files.
find_package(CompileIQ CONFIG QUIET)
if(NOT COMMAND compileiq_tune)
  message(FATAL_ERROR
    "ggml-compileiq.cmake: neither the compileiq_build package (pip install compileiq-build, or "
    "-DCompileIQ_ROOT=$(python -m compileiq_build --cmake-dir)) nor a CompileIQ toolchain file "
    "(-DCMAKE_TOOLCHAIN_FILE=ggml-llm-compileiq-toolchain.cmake) was found: give one of them.")
endif()
