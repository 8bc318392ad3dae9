import pytest

from torchci_assets.ingest.jobnames import parse_job_name, platform_of

# (name, build_env, test_config, shard, num_shards, runner, platform) — shapes seen on PyTorch HUD.
CASES = [
    ("linux-jammy-py3.10-gcc11 / test (default, 2, 5, linux.4xlarge)",
     "linux-jammy-py3.10-gcc11", "default", 2, 5, "linux.4xlarge", "linux"),
    ("win-vs2022-cuda12.6-py3 / test (default, 1, 3, windows.g5.4xlarge.nvidia.gpu)",
     "win-vs2022-cuda12.6-py3", "default", 1, 3, "windows.g5.4xlarge.nvidia.gpu", "win"),
    ("macos-py3-arm64 / test (default, 1, 3, macos-m1-stable)",
     "macos-py3-arm64", "default", 1, 3, "macos-m1-stable", "mac"),
    ("macos-py3-arm64-mps / test (mps, 1, 1, macos-m2-15)",
     "macos-py3-arm64-mps", "mps", 1, 1, "macos-m2-15", "mac"),
    ("linux-jammy-rocm-py3.10 / test (default, 1, 6, linux.rocm.gpu.2)",
     "linux-jammy-rocm-py3.10", "default", 1, 6, "linux.rocm.gpu.2", "rocm"),
    ("linux-noble-rocm-py3.12-mi300 / test (distributed, 2, 3, linux.rocm.gpu.mi300.4)",
     "linux-noble-rocm-py3.12-mi300", "distributed", 2, 3, "linux.rocm.gpu.mi300.4", "rocm"),
    ("linux-noble-xpu-n-py3.10 / test (default, 1, 4, linux.idc.xpu)",
     "linux-noble-xpu-n-py3.10", "default", 1, 4, "linux.idc.xpu", "xpu"),
    ("linux-jammy-cuda12.8-py3.10-gcc11 / test (distributed, 1, 3, linux.g4dn.12xlarge.nvidia.gpu)",
     "linux-jammy-cuda12.8-py3.10-gcc11", "distributed", 1, 3, "linux.g4dn.12xlarge.nvidia.gpu", "linux"),
    ("linux-jammy-cuda13.0-py3.10-gcc11-sm86 / test (slow, 2, 3, lf.linux.g5.4xlarge.nvidia.gpu)",
     "linux-jammy-cuda13.0-py3.10-gcc11-sm86", "slow", 2, 3, "lf.linux.g5.4xlarge.nvidia.gpu", "linux"),
    ("linux-jammy-py3.10-clang18-asan / test (default, 3, 7, linux.4xlarge)",
     "linux-jammy-py3.10-clang18-asan", "default", 3, 7, "linux.4xlarge", "linux"),
    ("linux-jammy-aarch64-py3.10 / test (default, 1, 3, linux.arm64.m7g.4xlarge)",
     "linux-jammy-aarch64-py3.10", "default", 1, 3, "linux.arm64.m7g.4xlarge", "linux-aarch64"),
    # build_env containing " / " (reusable workflows): the test part is matched from the right
    ("unit-test / inductor-test / test (inductor, 1, 2, linux.g5.4xlarge.nvidia.gpu)",
     "unit-test / inductor-test", "inductor", 1, 2, "linux.g5.4xlarge.nvidia.gpu", "linux"),
    ("dynamo-unittest / dynamo-test (3.11) / test (dynamo_core, 1, 1, linux.2xlarge)",
     "dynamo-unittest / dynamo-test (3.11)", "dynamo_core", 1, 1, "linux.2xlarge", "linux"),
    # HUD names carry the workflow in front
    ("pull / linux-jammy-py3.10-gcc11 / test (default, 1, 5, linux.2xlarge)",
     "linux-jammy-py3.10-gcc11", "default", 1, 5, "linux.2xlarge", "linux"),
    ("trunk / win-vs2022-cpu-py3 / test (default, 2, 3, windows.4xlarge.nonephemeral)",
     "win-vs2022-cpu-py3", "default", 2, 3, "windows.4xlarge.nonephemeral", "win"),
    # extra trailing fields (mem_leak_check, unstable) and an old name without a runner
    ("linux-focal-py3.8-gcc7 / test (default, 1, 2, linux.2xlarge, mem_leak_check)",
     "linux-focal-py3.8-gcc7", "default", 1, 2, "linux.2xlarge", "linux"),
    ("linux-bionic-py3.7-clang9 / test (default, 1, 2)",
     "linux-bionic-py3.7-clang9", "default", 1, 2, None, "linux"),
    ("linux-jammy-py3.10-gcc11 / test (nogpu_AVX512, 1, 2, linux.4xlarge)",
     "linux-jammy-py3.10-gcc11", "nogpu_AVX512", 1, 2, "linux.4xlarge", "linux"),
    ("linux-jammy-py3.10-gcc11 / test (inductor-triton-cpu, 1, 1, linux.12xlarge)",
     "linux-jammy-py3.10-gcc11", "inductor-triton-cpu", 1, 1, "linux.12xlarge", "linux"),
]


@pytest.mark.parametrize("name,env,config,shard,num,runner,platform", CASES)
def test_test_job_names(name, env, config, shard, num, runner, platform):
    j = parse_job_name(name)
    assert (j.build_env, j.test_config, j.shard, j.num_shards, j.runner, j.platform) == \
        (env, config, shard, num, runner, platform)


@pytest.mark.parametrize("name,env,platform", [
    ("linux-jammy-py3.10-gcc11 / build", "linux-jammy-py3.10-gcc11", "linux"),
    ("win-vs2022-cuda12.6-py3 / build", "win-vs2022-cuda12.6-py3", "win"),
    ("linux-jammy-rocm-py3.10 / build", "linux-jammy-rocm-py3.10", "rocm"),
    ("pull / macos-py3-arm64 / build", "macos-py3-arm64", "mac"),
])
def test_build_job_names(name, env, platform):
    j = parse_job_name(name)
    assert (j.build_env, j.test_config, j.shard, j.num_shards, j.platform) == (env, None, None, None, platform)


@pytest.mark.parametrize("name", [
    "lintrunner / linux-job", "get-label-type / runner-determinator", "Test workflow", "", None,
    "linux-jammy-py3.10-gcc11 / test (default, x, 5, linux.4xlarge)",  # non-numeric shard
    "linux-jammy-py3.10-gcc11 / test default, 1, 5",
])
def test_other_names_have_no_test_fields(name):
    j = parse_job_name(name)
    assert j.test_config is None and j.shard is None and j.num_shards is None


def test_platform_prefers_accelerator_over_os():
    assert platform_of("linux-jammy-rocm-py3.10 linux.2xlarge") == "rocm"
    assert platform_of("linux-jammy-py3.10-gcc11 windows.4xlarge") == "win"
    assert platform_of("linux-jammy-py3.10-gcc11 linux.4xlarge") == "linux"


# test-infra's TestJobNameExtractionSql cases (tools/torchci/tests/test_update_test_times.py, commit
# 67f681a09): jobs on PyTorch's OSDC runners are `test-osdc (...)`; their times must be kept.
@pytest.mark.parametrize("name,env,config", [
    ("linux-jammy-py3.10-clang18 / test (dynamo_wrapped, 1, 3, lf-l-x86)",
     "linux-jammy-py3.10-clang18", "dynamo_wrapped"),
    ("linux-jammy-py3.14t-clang18 / test-osdc (dynamo_wrapped, 1, 3, mt-l-x86)",
     "linux-jammy-py3.14t-clang18", "dynamo_wrapped"),
    ("cross-compile-linux-test-cuda13 / test-osdc (aoti, 1, 1, r, win)", "cross-compile-linux-test-cuda13", "aoti"),
    ("unit-test / inductor-test / test-osdc (inductor, 2, 2, mt-l-x86)", "unit-test / inductor-test", "inductor"),
])
def test_osdc_test_job_names(name, env, config):
    j = parse_job_name(name)
    assert (j.build_env, j.test_config) == (env, config)


@pytest.mark.parametrize("name", [
    # test-infra's cases without a config: "test-osdc" must match exactly, not as a prefix, and an
    # empty config field is no config (test-infra keeps "" there; this parser keeps no test fields)
    "env / test-foo (default, 1, 1, r)", "env / testbar (default, 1, 1, r)",
    "env / test-osdcfoo (default, 1, 1, r)", "env / inductor-cpu-core-test (3.11)", "env / test (, 1, 2, r)",
])
def test_not_quite_test_job_names_have_no_config(name):
    assert parse_job_name(name).test_config is None


def test_osdc_build_job_names():
    assert parse_job_name("linux-jammy-py3.14t-clang18 / build-osdc").build_env == "linux-jammy-py3.14t-clang18"
    assert parse_job_name("env / build").build_env == "env"
