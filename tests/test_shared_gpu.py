"""Another process on the GPU: tune stops before measuring, or measures with
--allow-shared-gpu and the reports say so."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

from compileiq_build.machine.gpu import GpuProcess, compute_processes, shared_gpu_error
from compileiq_build.store.database import open_store


def test_the_message_names_the_process_and_what_to_do():
    text = shared_gpu_error([GpuProcess(0, 4242, "python train.py", 1024), GpuProcess(1, 77, "", None)])
    assert "another process holds the GPU that tune would measure on: GPU 0: pid 4242 (python train.py, " \
           "1024 MiB); GPU 1: pid 77 (not visible from here)" in text
    assert "choose a free GPU with --gpus, or measure anyway with --allow-shared-gpu" in text


def test_the_report_says_which_session_measured_on_a_shared_gpu(cxx_project, configure):
    build = cxx_project / "build"
    configure(cxx_project, build)
    store = open_store(build)
    store.start_session("tune", {"gpus": []})
    other = {"gpu": 0, "pid": 4242, "name": "python train.py", "memory_mib": 1024}
    store.start_session("tune --allow-shared-gpu", {"shared_gpu": [other]})
    store.close()
    text = subprocess.run([sys.executable, "-m", "compileiq_build", "report", str(build)],
                          capture_output=True, text=True).stdout
    assert "session 2 (" in text and "on GPU 0 while pid 4242 (python train.py) also used it" in text
    assert "session 1 (" not in text
    html = cxx_project / "report.html"
    proc = subprocess.run([sys.executable, "-m", "compileiq_build", "report", str(build),
                           "--html", str(html)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "pid 4242 (python train.py) also used it" in html.read_text()


HOLDER = r"""
#include <cstdio>
#include <unistd.h>
#include <cuda_runtime.h>
int main() {
  void* p = nullptr;
  if (cudaMalloc(&p, 64 << 20) != cudaSuccess) return 1;
  std::printf("ready\n");
  std::fflush(stdout);
  sleep(120);
  return 0;
}
"""


@pytest.mark.gpu
def test_tune_stops_while_another_process_holds_the_gpu(tmp_path, configure, nvcc):
    src = tmp_path / "holder.cu"
    src.write_text(HOLDER)
    subprocess.run([nvcc, str(src), "-o", str(tmp_path / "holder")], check=True)
    holder = subprocess.Popen([str(tmp_path / "holder")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        procs = compute_processes([0])
        assert procs, "NVML lists no process on GPU 0 while one holds 64 MiB there"
        build = tmp_path / "build"
        configure(ROOT / "sample_project", build, "-DCMAKE_CUDA_ARCHITECTURES=90")
        proc = subprocess.run([sys.executable, "-m", "compileiq_build", "tune", str(build), "--targets",
                               "stencil_kernels", "--gpus", "0", "--budget", "1"],
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode != 0
        assert "another process holds the GPU that tune would measure on: GPU 0: pid" in proc.stderr
        assert "Traceback" not in proc.stderr
    finally:
        holder.kill()
        holder.wait()
