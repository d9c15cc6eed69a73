#include "core/knobs.h"

#include "core/error.h"

#include <fmt/format.h>

#include <array>
#include <cerrno>
#include <cstdlib>

namespace dscpp {
namespace {

constexpr std::array kKnobs{
    // ---- communication ----
    Knob{"DSCPP_COMM_BACKEND", "communication", "auto, shm, gloo, mpi, nccl, hierarchical", "auto",
         "The collectives' backend; auto takes NCCL between GPUs, shared memory within a host, gloo across "
         "hosts (or MPI when started by mpirun). dscpp-runtime --comm_backend overrides it."},
    Knob{"DSCPP_COMM_TIMEOUT", "communication", "seconds > 0", "1800 (30 minutes)",
         "How long a collective may wait for its peers before the job stops with a hang report naming them."},
    Knob{"DSCPP_RENDEZVOUS_TIMEOUT", "communication", "seconds > 0", "300",
         "How long ranks wait for each other at the rendezvous store when the job starts."},
    Knob{"DSCPP_RANKS_PER_NODE", "communication", "a positive whole number", "ranks are grouped by host name",
         "Forces node = rank / N for the per-host groups (hierarchical collectives, hpZ, qgZ), e.g. to "
         "treat one machine as several nodes."},
    Knob{"DSCPP_COMM_STAGING_BYTES", "communication", "bytes >= 64", "32 MiB",
         "The most host memory each group stages device buffers through, for backends that cannot read "
         "device memory."},
    Knob{"DSCPP_CHECK_SCHEDULE", "communication", "1 (true, on) or 0 (false, off)", "off",
         "Checks every collective's signature across the ranks, so a rank that issues another collective "
         "is named at once; dscpp-runtime --check_schedule turns it on as well."},
    Knob{"DSCPP_MPI_MAX_COUNT", "communication", "a positive element count", "INT_MAX",
         "Lowers the largest element count one MPI call takes, so the tests reach the chunked paths with "
         "small buffers."},
    Knob{"DSCPP_SHM_SLOT_KB", "communication", "KiB, 4 to 65536", "512",
         "The size of each rank's slot in the shared-memory backend's segment (other values are ignored)."},
    Knob{"DSCPP_JOB_SECRET", "communication", "at least 32 characters, e.g. `openssl rand -hex 32`",
         "set by dscpp for the ranks it starts; otherwise DSCPP_JOB_SECRET_FILE",
         "The job's secret: every connection to the rendezvous store proves it, and the store proves it back "
         "(docs/security.md). Never printed.",
         true},
    Knob{"DSCPP_JOB_SECRET_FILE", "communication", "a path to a file of mode 600 holding the secret",
         "DSCPP_JOB_SECRET, else no secret (the store refuses to start)",
         "Where ranks not started by dscpp (srun, mpirun, scripts) read the job's secret; a file its group or "
         "others can read is refused."},
    Knob{"DSCPP_INSECURE_STORE", "communication", "1 or 0", "0: a rank without a secret refuses to start",
         "1 lets ranks without a job secret host and join the rendezvous store unauthenticated (a warning on every "
         "rank): anyone who can reach MASTER_ADDR:MASTER_PORT can then read and write it."},
    Knob{"DSCPP_STORE_BIND", "communication", "an address of rank 0's host, or 0.0.0.0 (::, *) for every interface",
         "the address MASTER_ADDR resolves to", "The address rank 0's rendezvous store listens on."},
    // ---- compute ----
    Knob{"DSCPP_NUM_THREADS", "compute", "a positive number", "OMP_NUM_THREADS, else every core",
         "Threads of dscpp's CPU pool where a program does not set them (benchmarks, tests); dscpp-runtime "
         "sets its own from --threads or the cores per rank."},
    Knob{"DSCPP_GEMM", "compute", "openblas or avx512", "avx512 where the CPU has AVX-512, else openblas",
         "Which kernel runs the CPU ops table's fp32 GEMMs (avx512 is ignored on a CPU without it)."},
    Knob{"DSCPP_OPTIM_SIMD", "compute", "scalar, avx2 or avx512", "avx2 where the CPU has it, else scalar",
         "The vector level of the CPU optimizer loops."},
    Knob{"DSCPP_GEMM_MATH", "compute", "fp32, tf32, bf16 or fp16", "bf16 / fp16 when the config enables it, else fp32",
         "How a GPU ops table's GEMMs round their operands (kernels/gemm_math.h)."},
    Knob{"DSCPP_COMPUTE_DTYPE", "compute", "auto or fp32", "auto",
         "auto: in a bf16 / fp16 run the CUDA ops table computes in that dtype, activations included; fp32 keeps "
         "fp32 compute over 16-bit parameters (docs/16bit-compute.md)."},
    Knob{"DSCPP_CUBLASLT", "compute", "0", "cuBLASLt's epilogues are used where they apply",
         "0 turns off cuBLASLt's fused bias and bias-gradient epilogues in the CUDA table's linear layers."},
    Knob{"DSCPP_FLASH_ATTENTION", "compute", "tiled or blockwise", "blockwise",
         "Which of the CUDA table's own attention kernels runs the flash entries that cuDNN does not take (fp32, "
         "masked): tiled (FlashAttention-2's schedule, no scores outside shared memory) or blockwise (cuBLAS GEMMs "
         "per block of 128 queries)."},
    Knob{"DSCPP_SIM_OPS", "testing", "cpu", "the CUDA ops table's host build",
         "With --device cuda-sim, cpu trains with the CPU ops table, so the engine's device math alone can be "
         "compared with the CPU device bit for bit."},
    // ---- memory and I/O ----
    Knob{"DSCPP_PROTECTED_MEMORY", "memory", "keys or mprotect", "keys where the CPU and kernel have them",
         "How cuda-sim's device memory is closed to host code: per-thread protection keys or mprotect of the "
         "whole range."},
    Knob{"DSCPP_AIO_BACKEND", "memory", "io_uring, libaio or auto", "auto (io_uring where the kernel allows it)",
         "The asynchronous I/O engine of NVMe offload, when the config leaves it to dscpp."},
    Knob{"DSCPP_JOB_ID", "memory", "any text", "slurm<SLURM_JOB_ID>, else p<pid>",
         "Names the job's swap directory under nvme_path, so a restarted job finds its swap files."},
    // ---- launch ----
    Knob{"DSCPP_SSH_PASSPHRASE", "launch", "the key's passphrase", "keys without a passphrase, or the agent",
         "The passphrase of the SSH key the ssh runner logs in with."},
    Knob{"DSCPP_PREFIXED_OUTPUT", "launch", "1", "dscpp-runtime prefixes its lines itself",
         "Set by the launcher for every rank: its runners prefix each output line with the rank already."},
    Knob{"DSCPP_RESTART_COUNT", "launch", "a whole number", "0",
         "Set by the launcher on each attempt under --max_restarts; above 0 the runtime resumes from the newest "
         "checkpoint in --save_dir."},
    // ---- logging ----
    Knob{"DSCPP_LOG_LEVEL", "logging", "trace, debug, info, warn, err, critical or off", "info",
         "The level of dscpp's log."},
    // ---- training ----
    Knob{"DSCPP_MAX_NONFINITE_STEPS", "training", "a positive whole number", "3",
         "A step whose loss or gradient norm is NaN or infinite is skipped with a warning (fp16's loss scaler "
         "handles its own overflows); this many in a row stop the run with an error."},
    Knob{"DSCPP_GUARD_BUFFERS", "training", "always, first, off", "always on the CPU, first on a GPU",
         "Guard bytes after every layer's output, saved and workspace buffers (and backward's input gradient) are "
         "checked after each call; a layer that wrote past the sizes it declared stops the run naming it. first: "
         "only the first micro-batch's forward and backward (a check costs a device round trip per buffer)."},
    // ---- testing ----
    Knob{"DSCPP_INJECT_OVERFLOW", "testing", "steps, e.g. 3,5,9-12", "no injection",
         "Fault injection: the last rank's gradients get an inf at those steps (the loss scaler's tests)."},
    Knob{"DSCPP_INJECT_NAN", "testing", "grads:STEPS, loss:STEPS or weights:STEPS, e.g. grads:20-40", "no injection",
         "Fault injection: at those steps the last rank's gradients get a NaN, its loss reads NaN, or (weights) its "
         "first master weight becomes NaN after the update."},
    Knob{"DSCPP_INJECT_DIVERGENCE", "testing", "a step", "no injection",
         "Fault injection: after that step the last rank issues one extra collective (--check_schedule's test)."},
    Knob{"DSCPP_FAULT_INJECT", "testing", "save_before_commit, fail_slowly or crash_after_step:N", "no injection",
         "Fault injection: a checkpoint save dies with every file written but not committed, the last rank "
         "fails after step 2 and lingers 1 s after closing its connections, or every rank exits at once after "
         "step N (and its save) as if killed."},
};

}  // namespace

std::span<const Knob> knobs() { return kKnobs; }

const char* knob(std::string_view name) {
  for (const Knob& k : kKnobs)
    if (k.name == name) return std::getenv(std::string(name).c_str());
  fail("internal: the environment variable {} is read but not declared in core/knobs.cpp", name);
}

std::optional<int64_t> knob_int(std::string_view name, int64_t min, std::string_view what) {
  const char* v = knob(name);
  if (v == nullptr) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v, &end, 10);
  if (*v == '\0' || *end != '\0' || errno == ERANGE || x < min) fail("{}='{}': expected {}", name, v, what);
  return x;
}

std::string format_knobs() {
  std::string out;
  for (const Knob& k : kKnobs) {
    const char* v = std::getenv(std::string(k.name).c_str());
    out += fmt::format("{} ({}){}\n  {}\n  values: {}; unset: {}\n", k.name, k.area,
                       !v         ? std::string()
                       : k.secret ? std::string(" (set)")
                                  : fmt::format(" (set: {})", v),
                       k.what, k.values, k.unset);
  }
  return out;
}

}  // namespace dscpp
