"""What PyTorch CI runs: workflows, build environments, test configs and the test suite.

The names are PyTorch's own (build_envs and test_configs as they appear in the published
test-times.json, runner labels as the workflows request them) because the ingest parses
job names and the derived outputs are keyed by them: a toy naming scheme would leave
that parsing untested.
"""

from __future__ import annotations

import math
import random
import zlib
from dataclasses import dataclass

from .suite_files import TEST_FILES


@dataclass(frozen=True)
class TestConfig:
    """One `<build_env> / test (<test_config>, i, n, <runner>)` family of shard jobs."""

    workflow: str
    build_env: str
    test_config: str
    num_shards: int
    runner: str
    build_runner: str
    platform: str  # the platform a disable issue would name: linux, win, mac, rocm, xpu
    device: str  # device the device-generic test classes are instantiated for
    speed: float  # wall-time factor against a linux CPU runner
    groups: tuple[str, ...]  # test-file groups this config runs
    dialect: str = "pytorch"  # "pytorch" (classname TestX + file=) or "pytest" (dotted classname)
    upload: str = "xml"  # "xml" test reports, or "test-runs" flattened rows
    share: float = 1.0  # fraction of its groups' files it runs (as in test-times.json: windows,
    # crossref and dynamo_wrapped run about a third of the files linux default runs)


_CORE = ("core",)
_CORE_DYNAMO = ("core", "dynamo")

# Ordered by priority: `--configs K` takes the first K, so the first dozen already cover
# every platform, both report dialects and the test-runs upload path.
CATALOG: tuple[TestConfig, ...] = (
    TestConfig("pull", "linux-jammy-py3.10-gcc11", "default", 5, "linux.4xlarge", "linux.2xlarge",
               "linux", "cpu", 1.0, _CORE_DYNAMO),
    TestConfig("trunk", "linux-jammy-cuda13.0-py3.10-gcc11", "default", 5,
               "linux.g5.4xlarge.nvidia.gpu", "linux.12xlarge", "linux", "cuda", 1.3, _CORE_DYNAMO),
    TestConfig("trunk", "win-vs2022-cuda12.6-py3", "default", 3, "windows.g5.4xlarge.nvidia.gpu",
               "windows.4xlarge.nonephemeral", "win", "cuda", 1.9, _CORE, share=0.35),
    TestConfig("trunk", "macos-py3-arm64", "default", 3, "macos-m1-stable", "macos-m1-stable",
               "mac", "cpu", 1.4, _CORE, dialect="pytest", share=0.6),
    TestConfig("rocm-mi300", "linux-noble-rocm-py3.12-mi300", "default", 6, "linux.rocm.gpu.mi300.2",
               "linux.2xlarge", "rocm", "cuda", 1.6, _CORE_DYNAMO),
    TestConfig("xpu", "linux-noble-xpu-n-py3.10", "default", 4, "linux.idc.xpu", "linux.12xlarge",
               "xpu", "xpu", 1.5, _CORE, upload="test-runs"),
    TestConfig("pull", "linux-jammy-cuda13.0-py3.10-gcc11", "distributed", 3,
               "linux.g4dn.12xlarge.nvidia.gpu", "linux.12xlarge", "linux", "cuda", 1.2, ("distributed",)),
    TestConfig("inductor", "unit-test / inductor-test", "inductor", 2, "linux.g5.4xlarge.nvidia.gpu",
               "linux.2xlarge", "linux", "cuda", 1.1, ("inductor",)),
    TestConfig("pull", "linux-jammy-py3.10-clang18", "crossref", 2, "linux.2xlarge", "linux.2xlarge",
               "linux", "cpu", 1.2, _CORE, share=0.35),
    TestConfig("pull", "linux-jammy-py3.10-clang18", "dynamo_wrapped", 3, "linux.2xlarge",
               "linux.2xlarge", "linux", "cpu", 1.5, _CORE_DYNAMO, share=0.35),
    TestConfig("pull", "win-vs2022-cpu-py3", "default", 3, "windows.4xlarge.nonephemeral",
               "windows.4xlarge.nonephemeral", "win", "cpu", 2.0, _CORE, share=0.35),
    TestConfig("periodic", "linux-jammy-py3.10-clang18-asan", "default", 6, "linux.4xlarge",
               "linux.4xlarge", "linux", "cpu", 3.0, _CORE),
    TestConfig("rocm-mi300", "linux-noble-rocm-py3.12-mi300", "distributed", 3, "linux.rocm.gpu.mi300.4",
               "linux.2xlarge", "rocm", "cuda", 1.4, ("distributed",)),
    TestConfig("pull", "linux-jammy-py3.10-clang18", "default", 5, "linux.4xlarge", "linux.2xlarge",
               "linux", "cpu", 1.0, _CORE_DYNAMO),
    TestConfig("trunk", "linux-jammy-aarch64-py3.10", "default", 3, "linux.arm64.m7g.4xlarge",
               "linux.arm64.m7g.4xlarge", "linux", "cpu", 1.3, _CORE, dialect="pytest"),
    TestConfig("mac-mps", "macos-py3-arm64-mps", "mps", 1, "macos-m2-15", "macos-m1-stable",
               "mac", "mps", 1.2, _CORE),
    TestConfig("periodic", "linux-jammy-cuda13.0-py3.10-gcc11-debug", "default", 7,
               "linux.g5.4xlarge.nvidia.gpu", "linux.12xlarge", "linux", "cuda", 2.2, _CORE),
    TestConfig("slow", "linux-jammy-cuda13.0-py3.10-gcc11-sm86", "slow", 3,
               "linux.g5.4xlarge.nvidia.gpu", "linux.12xlarge", "linux", "cuda", 1.3, _CORE),
    TestConfig("inductor", "unit-test / inductor-cpu-test", "inductor_amx", 2, "linux.8xlarge.amx",
               "linux.12xlarge", "linux", "cpu", 1.4, ("inductor",)),
    TestConfig("trunk", "linux-jammy-cuda13.0-py3.10-gcc11", "nogpu_AVX512", 2, "linux.4xlarge",
               "linux.12xlarge", "linux", "cpu", 1.0, _CORE),
    TestConfig("pull", "linux-jammy-py3.14-clang18", "default", 5, "linux.4xlarge", "linux.2xlarge",
               "linux", "cpu", 1.0, _CORE_DYNAMO),
    TestConfig("pull", "linux-jammy-py3.14t-clang18", "dynamo_wrapped", 3, "linux.2xlarge",
               "linux.2xlarge", "linux", "cpu", 1.6, _CORE_DYNAMO, share=0.35),
    TestConfig("trunk", "linux-jammy-rocm-py3.10", "default", 6, "linux.rocm.gpu.2", "linux.2xlarge",
               "rocm", "cuda", 1.7, _CORE_DYNAMO),
    TestConfig("pull", "linux-jammy-py3.10-gcc11", "distributed", 2, "linux.2xlarge", "linux.2xlarge",
               "linux", "cpu", 1.1, ("distributed",)),
    TestConfig("periodic", "linux-jammy-cuda13.0-py3-gcc11-slow-gradcheck", "default", 8,
               "linux.g5.4xlarge.nvidia.gpu", "linux.12xlarge", "linux", "cuda", 2.5, _CORE),
    TestConfig("trunk", "linux-jammy-cuda13.0-py3.10-gcc11", "multigpu", 1,
               "linux.g5.12xlarge.nvidia.gpu", "linux.12xlarge", "linux", "cuda", 1.2, ("distributed",)),
    TestConfig("rocm-mi300", "linux-noble-rocm-py3.12-mi300", "inductor", 2, "linux.rocm.gpu.mi300.2",
               "linux.2xlarge", "rocm", "cuda", 1.5, ("inductor",)),
    TestConfig("xpu", "linux-noble-xpu-n-py3.10", "inductor", 2, "linux.idc.xpu", "linux.12xlarge",
               "xpu", "xpu", 1.6, ("inductor",), upload="test-runs"),
    TestConfig("trunk", "linux-jammy-cuda13.0-py3.10-gcc11", "nogpu_NO_AVX2", 2, "linux.4xlarge",
               "linux.12xlarge", "linux", "cpu", 1.1, _CORE),
    TestConfig("pull", "linux-jammy-py3.10-gcc11", "numpy_2_x", 1, "linux.2xlarge", "linux.2xlarge",
               "linux", "cpu", 1.0, _CORE, share=0.1),
    TestConfig("pull", "linux-jammy-py3.10-gcc11", "jit_legacy", 1, "linux.4xlarge", "linux.2xlarge",
               "linux", "cpu", 1.0, _CORE, share=0.05),
    TestConfig("pull", "linux-jammy-py3.14-clang18", "crossref", 2, "linux.2xlarge", "linux.2xlarge",
               "linux", "cpu", 1.2, _CORE, share=0.35),
    TestConfig("pull", "linux-jammy-py3.14-clang18", "dynamo_wrapped", 3, "linux.2xlarge",
               "linux.2xlarge", "linux", "cpu", 1.5, _CORE_DYNAMO, share=0.35),
    TestConfig("trunk", "linux-jammy-rocm-py3.10", "distributed", 3, "linux.rocm.gpu.4", "linux.2xlarge",
               "rocm", "cuda", 1.5, ("distributed",)),
    TestConfig("inductor", "unit-test / inductor-test", "inductor_distributed", 1,
               "linux.g5.12xlarge.nvidia.gpu", "linux.2xlarge", "linux", "cuda", 1.2, ("inductor",),
               share=0.4),
    TestConfig("inductor", "unit-test / inductor-test", "inductor_cpp_wrapper", 2,
               "linux.g5.4xlarge.nvidia.gpu", "linux.2xlarge", "linux", "cuda", 1.3, ("inductor",)),
)

# Workflows triggered per event. "pull" also runs on every main push, as in PyTorch.
PUSH_WORKFLOWS = ("pull", "trunk", "inductor", "rocm-mi300", "xpu", "mac-mps")
PR_WORKFLOWS = ("pull",)
SCHEDULED_WORKFLOWS = {"periodic": (1, 5, 9, 13, 17, 21), "slow": (3, 11, 19)}  # UTC hours
WORKFLOW_FILES = {
    "pull": ".github/workflows/pull.yml", "trunk": ".github/workflows/trunk.yml",
    "inductor": ".github/workflows/inductor.yml", "rocm-mi300": ".github/workflows/rocm-mi300.yml",
    "xpu": ".github/workflows/xpu.yml", "mac-mps": ".github/workflows/mac-mps.yml",
    "periodic": ".github/workflows/periodic.yml", "slow": ".github/workflows/slow.yml",
    "Lint": ".github/workflows/lint.yml",
}
LINT_JOBS = ("lintrunner-noclang / linux-job", "lintrunner-clang / linux-job",
             "quick-checks / linux-job", "workflow-checks / linux-job")
LABEL_JOB = "get-label-type / runner-determinator"
DOCS_JOB = "linux-docs / upload-docs-python"  # environment-gated: goes through `waiting`

# Build minutes (median) by platform; GPU and Windows builds are the slow ones.
BUILD_MINUTES = {"linux": 35.0, "win": 75.0, "mac": 45.0, "rocm": 50.0, "xpu": 60.0}
# Queue minutes (median) by runner family: scarce hardware queues longest.
QUEUE_MINUTES = {"cpu": 1.5, "cuda": 6.0, "win": 5.0, "mac": 4.0, "rocm": 25.0, "xpu": 15.0}


def select_configs(k: int) -> tuple[TestConfig, ...]:
    if not 1 <= k <= len(CATALOG):
        raise ValueError(f"--configs must be between 1 and {len(CATALOG)}")
    return CATALOG[:k]


def build_job_name(build_env: str) -> str:
    """PyTorch names a test family's build job after it: `unit-test / inductor-test` is
    built by `unit-test / inductor-build / build`."""
    if build_env.endswith("-test"):
        return build_env[: -len("-test")] + "-build / build"
    return f"{build_env} / build"


def test_job_name(cfg: TestConfig, shard: int) -> str:
    return f"{cfg.build_env} / test ({cfg.test_config}, {shard}, {cfg.num_shards}, {cfg.runner})"


def queue_family(cfg: TestConfig) -> str:
    if cfg.platform in ("win", "mac", "rocm", "xpu"):
        return cfg.platform
    return "cuda" if cfg.device == "cuda" else "cpu"


# ----------------------------------------------------------------------------- the suite

DEVICE_SUFFIX = {"cpu": "CPU", "cuda": "CUDA", "xpu": "XPU", "mps": "MPS"}
_ACRONYMS = {"nn": "NN", "jit": "JIT", "cuda": "CUDA", "mps": "MPS", "fx": "FX", "onnx": "ONNX",
             "fsdp": "FSDP", "ddp": "DDP", "aot": "AOT", "c10d": "C10D", "nccl": "NCCL",
             "cpp": "Cpp", "xpu": "XPU", "mkldnn": "Mkldnn", "api": "API"}
_OPS = ("add", "mul", "div", "matmul", "conv2d", "conv_transpose3d", "batch_norm", "layer_norm",
        "softmax", "log_softmax", "cross_entropy", "embedding_bag", "index_put", "scatter_reduce",
        "gather", "cumsum", "sort", "topk", "unique", "where", "clamp", "pow", "addmm", "baddbmm",
        "linalg_svd", "linalg_eigh", "cholesky", "fft_rfft", "grid_sample", "interpolate",
        "max_pool2d", "avg_pool3d", "dropout", "lstm", "gru", "multihead_attention",
        "scaled_dot_product_attention", "nonzero", "masked_fill", "repeat_interleave", "stft",
        "nll_loss", "ctc_loss", "pad", "unfold", "roll", "flip", "einsum", "tensordot", "histc")
_VARIANTS = ("", "_backward", "_out", "_inplace", "_noncontiguous", "_broadcast", "_empty",
             "_large", "_dynamic_shapes", "_compile", "_grad", "_channels_last", "_zero_dim")
_DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "complex64")
_THEMES = ("serialization", "memory_format", "autocast", "hooks", "state_dict", "pickle",
           "determinism", "profiler", "sparse_grad", "version_counter", "graph_break",
           "recompile", "guard", "symint", "fake_tensor", "process_group", "checkpoint",
           "all_reduce", "barrier", "sharding", "cache_hit", "fusion", "codegen", "autotune")


@dataclass(frozen=True)
class TestTemplate:
    """A test as written in the source; device-generic ones get a concrete class and name
    per device (`TestNNDeviceType.test_add` -> `TestNNDeviceTypeCUDA.test_add_cuda_float32`)."""

    file: str  # path under test/ without .py, e.g. "distributed/test_c10d_nccl"
    class_base: str
    name_base: str
    dtype: str  # "" when not parametrized by dtype
    device_generic: bool
    share: float  # fraction of its file's time
    line: int
    skip: str  # "", "always", "no_cuda", "win", "mac"

    def concrete(self, device: str) -> tuple[str, str]:
        if not self.device_generic:
            return self.class_base, self.name_base
        name = f"{self.name_base}_{device}_{self.dtype}" if self.dtype else f"{self.name_base}_{device}"
        return self.class_base + DEVICE_SUFFIX[device], name


@dataclass(frozen=True)
class TestFile:
    path: str
    group: str
    seconds: float  # on a linux CPU runner
    tests: tuple[TestTemplate, ...]

    @property
    def module(self) -> str:
        """The report folder name PyTorch's run_test uses: path with '/' -> '.'."""
        return self.path.replace("/", ".")


def class_stem(path: str) -> str:
    base = path.rsplit("/", 1)[-1]
    if base.startswith("test_"):
        base = base[5:]
    words = [w for w in base.split("_") if w]
    return "".join(_ACRONYMS.get(w, w.capitalize()) for w in words) or "Module"


def build_suite(seed: int, n_files: int, tests_per_file: int) -> tuple[TestFile, ...]:
    """Pick real file paths and give them heavy-tailed durations (lognormal, like the real
    per-file times: median of seconds, a few files of thousands of seconds)."""
    rng = random.Random(f"{seed}|suite")
    weights = {"core": 0.6, "distributed": 0.15, "inductor": 0.15, "dynamo": 0.10}
    files: list[TestFile] = []
    for group, w in weights.items():
        pool = TEST_FILES[group]
        k = max(1, round(n_files * w)) if n_files >= len(weights) else (1 if group == "core" else 0)
        k = min(k, len(pool))
        chosen = list(pool[: min(4, k)]) if group == "core" else []
        rest = [p for p in pool if p not in chosen]
        chosen += rng.sample(rest, k - len(chosen))
        for path in chosen:
            # capped so that even the slowest config (asan, 3x) stays within the 240 min job timeout
            seconds = min(3600.0, math.exp(rng.gauss(math.log(15.0), 2.0)))
            files.append(_make_file(rng, path, group, max(0.5, seconds), tests_per_file))
    files.sort(key=lambda f: f.path)
    return tuple(files)


def _make_file(rng: random.Random, path: str, group: str, seconds: float, tpf: int) -> TestFile:
    stem = class_stem(path)
    n_tests = max(2, round(tpf * math.exp(rng.gauss(0.0, 0.45))))
    classes = [(f"Test{stem}", False)]
    if group in ("core", "inductor") and rng.random() < 0.6:
        classes.append((f"Test{stem}DeviceType", True))
    if rng.random() < 0.35:
        classes.append((f"Test{stem}{rng.choice(('Misc', 'API', 'Serialization', 'Functional'))}", False))
    raw = [rng.expovariate(1.0) ** 2 + 0.01 for _ in range(n_tests)]
    total = sum(raw)
    seen: set[tuple[str, str, str]] = set()
    tests = []
    line = 40
    for i in range(n_tests):
        cls, generic = classes[i % len(classes)]
        while True:
            if generic:
                base = f"test_{rng.choice(_OPS)}{rng.choice(_VARIANTS)}"
                dtype = rng.choice(_DTYPES) if rng.random() < 0.7 else ""
            else:
                base = f"test_{rng.choice(_THEMES + _OPS)}{rng.choice(_VARIANTS)}"
                dtype = ""
            if (cls, base, dtype) not in seen:
                seen.add((cls, base, dtype))
                break
        r = rng.random()
        skip = ("always" if r < 0.02 else "no_cuda" if r < 0.06 and generic else
                "win" if r < 0.08 else "mac" if r < 0.10 else "")
        line += rng.randint(8, 120)
        tests.append(TestTemplate(path, cls, base, dtype, generic, raw[i] / total, line, skip))
    return TestFile(path, group, seconds, tuple(tests))


def skip_reason(t: TestTemplate, cfg: TestConfig) -> str | None:
    """Why pytest would skip this test on this config, or None: deterministic per config,
    as real skips are (decorators, not chance)."""
    if t.skip == "always":
        return "test is slow; run with PYTORCH_TEST_WITH_SLOW to enable test"
    if t.skip == "no_cuda" and cfg.device not in ("cuda",):
        return "Only runs on cuda"
    if t.skip == "win" and cfg.platform == "win":
        return "Not supported on Windows"
    if t.skip == "mac" and cfg.platform == "mac":
        return "test fails on MacOS, see https://github.com/pytorch/pytorch/issues/79528"
    return None


def config_files(cfg: TestConfig, suite: tuple[TestFile, ...]) -> tuple[TestFile, ...]:
    """The files a config runs: its groups, thinned by a stable per-file hash to `share`."""
    cut = int(cfg.share * 1000)
    files = tuple(f for f in suite if f.group in cfg.groups
                  and zlib.crc32(f"{cfg.test_config}|{f.path}".encode()) % 1000 < cut)
    if cfg.test_config == "mps":
        files = tuple(f for i, f in enumerate(files) if i % 4 == 0)
    return files


def plan_shards(files: tuple[TestFile, ...], cfg: TestConfig) -> list[list[TestFile]]:
    """Greedy longest-first packing, as PyTorch's calculate_shards does with known times."""
    shards: list[list[TestFile]] = [[] for _ in range(cfg.num_shards)]
    load = [0.0] * cfg.num_shards
    for f in sorted(files, key=lambda f: (-f.seconds, f.path)):
        i = min(range(cfg.num_shards), key=lambda j: (load[j], j))
        shards[i].append(f)
        load[i] += f.seconds
    for s in shards:
        s.sort(key=lambda f: f.path)
    return shards
