// nccl-tests-style sweep of allreduce, reduce_scatter and allgather: dscpp's Communicator on
// the chosen backend ("ours") against the raw MPI call on MPI_COMM_WORLD ("raw"), measured in
// the same processes in the same run, so machine noise hits both sides alike.
//
//   mpirun --allow-run-as-root [--oversubscribe] -np N bench_collectives
//       [--backend mpi|shm|gloo|hierarchical|auto] [--min-bytes B] [--max-bytes B] [--seconds S]
//       [--rounds R] [--default-malloc] [--check-schedule] [--device cuda-sim]
//
// --check-schedule measures the schedule check instead: "ours" is the Communicator with it on,
// "raw" the same Communicator with it off (ratio = unchecked time / checked time).
// --device cuda-sim puts our buffers in cuda-sim's device memory, which the host engines cannot
// touch: the ratio is then the cost of staging them through host memory (two extra copies per
// operation, plus the simulated device's access switches) against raw MPI on host buffers.
//
// size is the full buffer (nccl-tests' convention: the input of reduce_scatter, the output of
// allgather); algbw = size / time; busbw = algbw * 2(n-1)/n for allreduce and * (n-1)/n for
// the others; ratio = raw time / our time (= our busbw / raw busbw; > 1: ours is faster).
// Data is fp32 and reductions are sums. Each point runs R rounds of (our loop, raw loop), each
// loop >= S seconds, and reports each side's best loop.
//
// glibc's allocator is pinned (M_MMAP_THRESHOLD / M_TRIM_THRESHOLD = 1 GiB) before MPI starts.
// With the defaults, OpenMPI's per-call temporaries of 256 KB-4 MB were unmapped and faulted
// back in on every call made from the main thread but not from the Communicator's progress
// thread, so raw ran 2-5x slower than ours at those sizes: an allocator effect, not dscpp's.
// --default-malloc keeps glibc's defaults to show it.
#include "collectives/communicator.h"
#include "core/byte_size.h"
#include "core/error.h"
#include "device/device.h"
#include "kernels/cuda/sim/sim_kernels.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <malloc.h>
#include <mpi.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace comm = dscpp::comm;
using dscpp::DType;

namespace {

int g_rank = 0;

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "bench_collectives [rank %d]: %s\n", g_rank, message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

struct Args {
  std::string backend = "mpi";
  size_t min_bytes = size_t{4} << 10;
  size_t max_bytes = size_t{256} << 20;
  double seconds = 0.2;
  int rounds = 3;
  bool default_malloc = false;
  bool check_schedule = false;
  std::string device;  // "" or "cuda-sim"
};

size_t byte_flag(const std::string& flag, const char* text) {
  try {
    return static_cast<size_t>(dscpp::parse_bytes(text, flag));
  } catch (const dscpp::Error& e) {
    die(e.what());
  }
}

Args parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      if (g_rank == 0)
        std::printf(
            "usage: mpirun -np N bench_collectives [--backend mpi|shm|gloo|hierarchical|auto] [--min-bytes 4K] "
            "[--max-bytes 256M] [--seconds 0.2] [--rounds 3] [--default-malloc] [--check-schedule] "
            "[--device cuda-sim]\n");
      MPI_Finalize();
      std::exit(0);
    }
    if (flag == "--default-malloc") {
      args.default_malloc = true;
      continue;
    }
    if (flag == "--check-schedule") {
      args.check_schedule = true;
      continue;
    }
    if (i + 1 >= argc) die(fmt::format("{} needs a value (see --help)", flag));
    const char* value = argv[++i];
    if (flag == "--backend")
      args.backend = value;
    else if (flag == "--device")
      args.device =
          std::string(value) == "cuda-sim" ? value : (die(fmt::format("--device {}: only cuda-sim", value)), "");
    else if (flag == "--min-bytes")
      args.min_bytes = byte_flag(flag, value);
    else if (flag == "--max-bytes")
      args.max_bytes = byte_flag(flag, value);
    else if (flag == "--seconds")
      args.seconds = std::atof(value);
    else if (flag == "--rounds")
      args.rounds = std::atoi(value);
    else
      die(fmt::format("unknown option '{}' (see --help)", flag));
  }
  if (args.seconds <= 0) die("--seconds: expected a positive time per loop");
  if (args.rounds <= 0) die("--rounds: expected a positive number of rounds");
  return args;
}

// The TcpStore needs MASTER_ADDR/MASTER_PORT, which mpirun does not set. Rank 0 picks a port
// the kernel says is free; the address is loopback when every rank shares rank 0's host.
void default_master_from_mpi() {
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(host, &length);
  char root_host[MPI_MAX_PROCESSOR_NAME] = {};
  std::memcpy(root_host, host, sizeof(host));
  MPI_Bcast(root_host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, MPI_COMM_WORLD);
  int same = std::strcmp(host, root_host) == 0, all_same = 0;
  MPI_Allreduce(&same, &all_same, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!std::getenv("MASTER_ADDR")) setenv("MASTER_ADDR", all_same ? "127.0.0.1" : root_host, 1);

  int need_port = std::getenv("MASTER_PORT") == nullptr, port = 0;
  MPI_Bcast(&need_port, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (!need_port) return;
  if (g_rank == 0) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t len = sizeof(addr);
    if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
      port = ntohs(addr.sin_port);
    if (fd >= 0) close(fd);
  }
  MPI_Bcast(&port, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (port == 0) die("could not find a free TCP port for the store; set MASTER_PORT");
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
}

enum class Op { allreduce, reduce_scatter, allgather };
const char* op_name(Op op) {
  return op == Op::allreduce ? "allreduce" : op == Op::reduce_scatter ? "reduce_scatter" : "allgather";
}

double bus_factor(Op op, int n) {
  return op == Op::allreduce ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;
}

// Shared by both sides and every size: allocated once at the largest size.
struct Buffers {
  std::vector<float> a, b;
};

using Call = std::function<void(Op, size_t count)>;

// Iterations for one timed loop of >= `seconds`: warm up, time one call, and let the slowest
// rank's estimate win so every rank runs the same number of calls.
int agree_iterations(const Call& call, Op op, size_t count, double seconds) {
  call(op, count);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  call(op, count);
  double once = MPI_Wtime() - t0;
  int iters = static_cast<int>(std::clamp(std::ceil(seconds / std::max(once, 1e-7)), 1.0, 1e6)), agreed = 0;
  MPI_Allreduce(&iters, &agreed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return agreed;
}

// Seconds per call over one loop, as the slowest rank saw it.
double timed_loop(const Call& call, Op op, size_t count, int iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) call(op, count);
  double elapsed = MPI_Wtime() - t0, slowest = 0;
  MPI_Allreduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest / iters;
}

// One call of each side on known data, so a fast but wrong engine cannot win the sweep.
void verify(const Call& call, Op op, size_t count, Buffers& buf, int rank, int size, const char* side) {
  const size_t slice = count / static_cast<size_t>(size);
  std::fill(buf.a.begin(), buf.a.begin() + static_cast<std::ptrdiff_t>(count), static_cast<float>(rank + 1));
  std::fill(buf.b.begin(), buf.b.begin() + static_cast<std::ptrdiff_t>(count), -1.0f);
  call(op, count);
  const float sum = static_cast<float>(size) * (size + 1) / 2;
  bool ok = true;
  if (op == Op::allreduce)
    ok = buf.a[0] == sum && buf.a[count - 1] == sum;
  else if (op == Op::reduce_scatter)
    ok = buf.b[0] == sum && buf.b[slice - 1] == sum;
  else
    ok = buf.b[0] == 1.0f && buf.b[count - 1] == static_cast<float>(size);
  if (!ok) die(fmt::format("{} {} of {} floats gave wrong values", side, op_name(op), count));
}

}  // namespace

int main(int argc, char** argv) {
  bool default_malloc = false;
  for (int i = 1; i < argc; ++i) default_malloc |= std::strcmp(argv[i], "--default-malloc") == 0;
  if (!default_malloc) {
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  g_rank = rank;
  Args args = parse_args(argc, argv);

  std::map<Op, std::vector<double>> ratios;
  try {
    default_master_from_mpi();
    comm::CommOptions options = comm::comm_options_from_env();
    options.backend = comm::parse_backend_choice(args.backend);
    std::unique_ptr<dscpp::Device> device, host;
    if (!args.device.empty()) {
      device = dscpp::make_sim_cuda_device();
      host = dscpp::make_host_device();
      options.device_memory = device.get();
      options.host_memory = host.get();
    }
    comm::World world = comm::create_world(options);
    comm::Communicator& ours = *world.world;

    // Slices must be whole floats on every rank: round sizes down to a multiple of 4*size bytes.
    const size_t unit = sizeof(float) * static_cast<size_t>(size);
    const size_t max_count = args.max_bytes / unit * static_cast<size_t>(size);
    Buffers buf;
    buf.a.assign(max_count, 1.0f);
    buf.b.assign(max_count, 0.0f);
    const size_t ranks = static_cast<size_t>(size);
    // Our operations' buffers: the host vectors, or device copies of them.
    float* a = buf.a.data();
    float* b = buf.b.data();
    dscpp::DeviceBuffer device_a, device_b;
    if (device) {
      device_a = dscpp::DeviceBuffer(*device, max_count * sizeof(float), dscpp::MemCategory::buffers);
      device_b = dscpp::DeviceBuffer(*device, max_count * sizeof(float), dscpp::MemCategory::buffers);
      device->copy_from_host(device_a.data(), buf.a.data(), max_count * sizeof(float));
      device->copy_from_host(device_b.data(), buf.b.data(), max_count * sizeof(float));
      a = device_a.as<float>();
      b = device_b.as<float>();
    }

    Call ours_call = [&](Op op, size_t count) {
      const size_t slice = count / ranks;
      switch (op) {
        case Op::allreduce:
          ours.allreduce(a, count, DType::f32);
          break;
        case Op::reduce_scatter:
          ours.reduce_scatter(a, b, slice, DType::f32);
          break;
        case Op::allgather:
          ours.allgather(a, b, slice, DType::f32);
          break;
      }
    };
    // The check reads host vectors: device buffers are copied there and back around the call.
    Call ours_checked = [&](Op op, size_t count) {
      const size_t bytes = count * sizeof(float);
      if (device) device->copy_from_host(a, buf.a.data(), bytes), device->copy_from_host(b, buf.b.data(), bytes);
      ours_call(op, count);
      if (device) device->copy_to_host(buf.a.data(), a, bytes), device->copy_to_host(buf.b.data(), b, bytes);
    };
    Call raw_call = [&](Op op, size_t count) {
      const int slice = static_cast<int>(count / ranks);
      int rc = MPI_SUCCESS;
      switch (op) {
        case Op::allreduce:
          rc = MPI_Allreduce(MPI_IN_PLACE, buf.a.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
          break;
        case Op::reduce_scatter:
          rc = MPI_Reduce_scatter_block(buf.a.data(), buf.b.data(), slice, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
          break;
        case Op::allgather:
          rc = MPI_Allgather(buf.a.data(), slice, MPI_FLOAT, buf.b.data(), slice, MPI_FLOAT, MPI_COMM_WORLD);
          break;
      }
      if (rc != MPI_SUCCESS) die(fmt::format("raw {} failed with MPI error {}", op_name(op), rc));
    };
    std::string raw_name = "MPI on MPI_COMM_WORLD";
    if (args.check_schedule) {
      // Every rank switches at the same point of its schedule, as the check requires.
      Call plain = ours_call;
      raw_call = [&ours, plain](Op op, size_t count) {
        ours.set_schedule_check(false);
        plain(op, count);
      };
      ours_call = [&ours, plain](Op op, size_t count) {
        ours.set_schedule_check(true);
        plain(op, count);
      };
      raw_name = "the same Communicator with the schedule check off (ours: on)";
    }

    if (rank == 0) {
      std::printf(
          "# dscpp collective sweep: %d ranks, ours = Communicator(%s) [%s]%s, raw = %s; malloc %s\n",
          size, std::string(ours.backend_name()).c_str(), world.description.c_str(),
          device ? " on cuda-sim device buffers, staged through host memory" : "", raw_name.c_str(),
          args.default_malloc ? "defaults" : "pinned");
      std::printf(
          "# fp32 sum; size = full buffer; time: best of %d loops of >= %.2f s, slowest rank; "
          "ratio = raw time / our time\n",
          args.rounds, args.seconds);
      std::printf("# %-14s %10s %11s | %10s %8s %8s | %10s %8s %8s | %6s\n", "op", "size(B)", "count", "ours(us)",
                  "algbw", "busbw", "raw(us)", "algbw", "busbw", "ratio");
    }
    for (Op op : {Op::allreduce, Op::reduce_scatter, Op::allgather}) {
      for (size_t bytes = args.min_bytes; bytes <= args.max_bytes; bytes *= 4) {
        const size_t count = bytes / unit * ranks;
        if (count == 0) continue;
        verify(ours_checked, op, count, buf, rank, size, "ours");
        verify(raw_call, op, count, buf, rank, size, "raw");
        // Rounds alternate the sides and each keeps its best loop: on a shared machine a burst
        // of someone else's work then lands on one loop, not on one side.
        const int iters_ours = agree_iterations(ours_call, op, count, args.seconds);
        const int iters_raw = agree_iterations(raw_call, op, count, args.seconds);
        double t_ours = 1e30, t_raw = 1e30;
        for (int round = 0; round < args.rounds; ++round) {
          t_ours = std::min(t_ours, timed_loop(ours_call, op, count, iters_ours));
          t_raw = std::min(t_raw, timed_loop(raw_call, op, count, iters_raw));
        }
        const double full = static_cast<double>(count * sizeof(float));
        const double factor = bus_factor(op, size);
        const double ratio = t_raw / t_ours;
        if (full >= (1 << 20)) ratios[op].push_back(ratio);
        if (rank == 0) {
          std::printf("  %-14s %10.0f %11zu | %10.1f %8.3f %8.3f | %10.1f %8.3f %8.3f | %6.3f\n", op_name(op), full,
                      count, t_ours * 1e6, full / t_ours / 1e9, full / t_ours / 1e9 * factor, t_raw * 1e6,
                      full / t_raw / 1e9, full / t_raw / 1e9 * factor, ratio);
          std::fflush(stdout);
        }
      }
    }
    if (rank == 0) {
      for (Op op : {Op::allreduce, Op::reduce_scatter, Op::allgather}) {
        const auto& r = ratios[op];
        if (r.empty()) {
          std::printf("# %s: no sizes >= 1 MB in the sweep\n", op_name(op));
          continue;
        }
        double log_sum = 0;
        for (double x : r) log_sum += std::log(x);
        std::printf("# %s: ours/raw geometric-mean ratio at >= 1 MB = %.3f over %zu sizes (backend %s, %d ranks)\n",
                    op_name(op), std::exp(log_sum / static_cast<double>(r.size())), r.size(),
                    std::string(ours.backend_name()).c_str(), size);
      }
    }
    // Every rank leaves the Communicators together, so the store host outlives the others.
    MPI_Barrier(MPI_COMM_WORLD);
  } catch (const std::exception& e) {
    die(e.what());
  }
  MPI_Finalize();
  return 0;
}
