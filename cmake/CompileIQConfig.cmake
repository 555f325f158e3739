#[=======================================================================[.rst:
CompileIQConfig
---------------

Package configuration for ``find_package(CompileIQ CONFIG REQUIRED)``.
Point CMake at this folder with
``-DCompileIQ_ROOT=$(python -m compileiq_build --cmake-dir)``; projects built
by scikit-build-core find it through the package's ``cmake.prefix`` entry point.
It loads ``CompileIQ.cmake``, which provides ``compileiq_tune()`` and
``compileiq_add_benchmark()``.
#]=======================================================================]

include("${CMAKE_CURRENT_LIST_DIR}/CompileIQ.cmake")
set(CompileIQ_VERSION "${COMPILEIQ_VERSION}")
set(CompileIQ_MODULE_DIR "${CMAKE_CURRENT_LIST_DIR}")
