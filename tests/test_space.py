"""The flag space is probed against the compilers installed here, never assumed."""

from __future__ import annotations

import os
import subprocess
import sys

from compileiq_build.build.space import Prober, build_space
from compileiq_build.machine.environment import find_tool, tool_version


def test_probe_keeps_accepted_flags_and_records_why_others_are_dropped(tmp_path, nvcc):
    prober = Prober(tmp_path, {"CUDA": ["-arch=sm_90"]})
    verdicts = prober.probe("CUDA", nvcc, "test", [
        "--ptxas-options=-dlcm=cg", "--ptxas-options=--bogus-option",
        "--ptxas-options=--register-usage-level=11", "-Xptxas -O1"])
    assert verdicts["--ptxas-options=-dlcm=cg"] == ""
    assert "bogus" in verdicts["--ptxas-options=--bogus-option"]
    assert "out of valid range" in verdicts["--ptxas-options=--register-usage-level=11"]
    assert "not a single shell-safe token" in verdicts["-Xptxas -O1"]
    # Cached per compiler: a second prober answers from the file without compiling.
    assert list(tmp_path.glob("probe-CUDA-*.json"))
    again = Prober(tmp_path).probe("CUDA", nvcc, "test", ["--ptxas-options=-dlcm=cg"])
    assert again["--ptxas-options=-dlcm=cg"] == ""


def test_cxx_space_excludes_numerics_unless_allowed(tmp_path):
    cxx = find_tool("c++")
    assert cxx
    safe = build_space(["CXX"], {"CXX": (cxx, "v")}, Prober(tmp_path))
    keys = [d.key for d in safe.dimensions]
    assert "CXX:O" in keys and "CXX:ffast-math" not in keys
    assert "CXX:ffast-math" in safe.excluded_numerics
    loose = build_space(["CXX"], {"CXX": (cxx, "v")}, Prober(tmp_path), allow_numerics_change=True)
    assert "CXX:ffast-math" in [d.key for d in loose.dimensions]
    stages = [d.stage for d in safe.dimensions]
    assert stages == sorted(stages)


def test_cxx_space_leaves_out_host_specific_options_unless_allowed(tmp_path):
    cxx = find_tool("c++")
    assert cxx
    portable = build_space(["CXX"], {"CXX": (cxx, "v")}, Prober(tmp_path))
    assert "CXX:march" not in [d.key for d in portable.dimensions]
    assert portable.excluded_host_specific == ("CXX:march",)
    native = build_space(["CXX"], {"CXX": (cxx, "v")}, Prober(tmp_path), allow_host_specific=True)
    (march,) = [d for d in native.dimensions if d.key == "CXX:march"]
    assert march.host_specific and march.values == ("native",)
    assert native.excluded_host_specific == ()
    env = {**os.environ, "HOME": str(tmp_path)}
    shown = subprocess.run([sys.executable, "-m", "compileiq_build", "space", "--language", "CXX"],
                           capture_output=True, text=True, env=env)
    assert shown.returncode == 0, shown.stderr
    assert ("excluded CXX:march: binaries run only on CPUs like this one (--allow-host-specific)"
            in shown.stdout)


def test_cuda_space_matches_the_installed_nvcc(tmp_path, nvcc):
    space = build_space(["CUDA"], {"CUDA": (nvcc, "v")}, Prober(tmp_path, {"CUDA": ["-arch=sm_90"]}))
    dims = {d.name: d for d in space.dimensions}
    assert dims["register-usage-level"].values == tuple(str(i) for i in range(11))
    assert {"dlcm", "maxrregcount", "ptxas-O"} <= set(dims)
    assert all(not d.numerics for d in space.dimensions)
    assert "-O3" not in " ".join(d.template for d in space.dimensions)  # nvcc -O is host-only


def test_space_command_caches_per_compiler_version(tmp_path):
    # The same compiler path after an in-place upgrade is another compiler: a fresh probe.
    cxx = find_tool("c++")
    env = {**os.environ, "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "compileiq_build", "space", "--language", "CXX"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    # The first call probes, and says so while it does; the second reads the cache.
    assert "probing" in proc.stderr and "CXX flags with" in proc.stderr
    assert proc.stdout.startswith("CXX: ") and "configurations" in proc.stdout.splitlines()[0]
    again = subprocess.run([sys.executable, "-m", "compileiq_build", "space", "--language", "CXX"],
                           capture_output=True, text=True, env=env)
    assert again.returncode == 0 and "probing" not in again.stderr and again.stdout == proc.stdout
    expected = Prober(tmp_path / ".cache" / "compileiq_build")._cache_file("CXX", cxx, tool_version(cxx))
    assert [p.name for p in expected.parent.glob("probe-CXX-*.json")] == [expected.name]
