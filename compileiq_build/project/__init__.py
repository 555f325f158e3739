"""The configured CMake project: the manifest CompileIQ.cmake writes (manifest) and every path under
build/compileiq/ (workspace).
"""
