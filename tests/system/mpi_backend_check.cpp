// Runs under mpirun (tests/system/comm_mpi.sh): every operation of the mpi backend, for the
// dtypes it reduces natively and the 16-bit ones it only moves, checked against a serial
// reference. Each rank can compute every rank's input (a function of rank and index), and the
// values are small integers, so every sum is exact in every type and results compare with ==.
// A mismatch prints what differed and aborts the whole job (MPI_Abort), so no rank is left
// waiting in a collective for one that gave up.
#include "collectives/backend.h"
#include "core/rank_discovery.h"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace comm = dscpp::comm;
using comm::OpDesc;
using comm::OpKind;
using comm::ReduceOp;
using dscpp::DType;

namespace {

int g_rank = 0;
int g_checks = 0;

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "mpi_backend_check [rank %d] FAIL: %s\n", g_rank, message.c_str());
  std::fflush(stderr);
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (initialised) MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

void expect(bool ok, const std::string& what) {
  ++g_checks;
  if (!ok) die(what);
}

// Rank r's element i in test `salt`. 8-bit types get a range whose sum over 4 ranks still fits.
template <typename T>
T value(int r, size_t i, int salt) {
  const size_t mix = static_cast<size_t>(r) * 131 + i * 7 + static_cast<size_t>(salt) * 17;
  if constexpr (sizeof(T) == 1) {
    const int v = static_cast<int>(mix % 31);
    return static_cast<T>(std::is_signed_v<T> ? v - 15 : v);
  } else {
    return static_cast<T>(static_cast<int>(mix % 101) - 50);
  }
}

template <typename T>
T fold(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::max:
      return std::max(a, b);
    case ReduceOp::min:
      return std::min(a, b);
    default:
      return static_cast<T>(a + b);
  }
}

template <typename T>
void compare(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  ++g_checks;
  for (size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i])
      die(fmt::format("{}: element {} of {} is {}, expected {}", what, i, want.size(), +got[i], +want[i]));
}

std::string label(const char* kind, DType dtype, size_t n, int size, const std::string& extra = "") {
  return fmt::format("{} {} count {} on {} ranks{}", kind, dscpp::dtype_name(dtype), n, size, extra);
}

struct Checker {
  comm::Backend& b;
  int salt = 0;

  int me() const { return b.rank(); }
  int size() const { return b.size(); }
  size_t ranks() const { return static_cast<size_t>(b.size()); }

  template <typename T>
  void allreduce(DType dtype, size_t n, ReduceOp op) {
    ++salt;
    std::vector<T> buf(n), want(n);
    for (size_t i = 0; i < n; ++i) {
      buf[i] = value<T>(me(), i, salt);
      want[i] = value<T>(0, i, salt);
      for (int r = 1; r < size(); ++r) want[i] = fold(op, want[i], value<T>(r, i, salt));
    }
    b.run(OpDesc{OpKind::allreduce, buf.data(), buf.data(), n, dtype, op, 0});
    compare(buf, want, label("allreduce", dtype, n, size(), fmt::format(" ({})", static_cast<int>(op))));
  }

  template <typename T>
  void reduce_scatter(DType dtype, size_t n, ReduceOp op) {
    ++salt;
    std::vector<T> in(ranks() * n), out(n), want(n);
    for (size_t i = 0; i < in.size(); ++i) in[i] = value<T>(me(), i, salt);
    const size_t base = static_cast<size_t>(me()) * n;
    for (size_t i = 0; i < n; ++i) {
      want[i] = value<T>(0, base + i, salt);
      for (int r = 1; r < size(); ++r) want[i] = fold(op, want[i], value<T>(r, base + i, salt));
    }
    b.run(OpDesc{OpKind::reduce_scatter, in.data(), out.data(), n, dtype, op, 0});
    compare(out, want, label("reduce_scatter", dtype, n, size(), fmt::format(" ({})", static_cast<int>(op))));
  }

  template <typename T>
  void allgather(DType dtype, size_t n, bool in_place) {
    ++salt;
    std::vector<T> in(n), out(ranks() * n, T(99)), want(ranks() * n);
    for (size_t i = 0; i < n; ++i) in[i] = value<T>(me(), i, salt);
    for (size_t r = 0; r < ranks(); ++r)
      for (size_t i = 0; i < n; ++i) want[r * n + i] = value<T>(static_cast<int>(r), i, salt);
    T* mine = out.data() + static_cast<size_t>(me()) * n;
    if (in_place) std::copy(in.begin(), in.end(), mine);
    b.run(OpDesc{OpKind::allgather, in_place ? mine : in.data(), out.data(), n, dtype, ReduceOp::sum, 0});
    compare(out, want, label("allgather", dtype, n, size(), in_place ? " in place" : ""));
  }

  template <typename T>
  void broadcast(DType dtype, size_t n, int root) {
    ++salt;
    std::vector<T> buf(n), want(n);
    for (size_t i = 0; i < n; ++i) {
      buf[i] = me() == root ? value<T>(root, i, salt) : T(77);
      want[i] = value<T>(root, i, salt);
    }
    b.run(OpDesc{OpKind::broadcast, buf.data(), buf.data(), n, dtype, ReduceOp::sum, root});
    compare(buf, want, label("broadcast", dtype, n, size(), fmt::format(" from {}", root)));
  }

  template <typename T>
  void all_to_all(DType dtype, size_t n) {
    ++salt;
    std::vector<T> in(ranks() * n), out(ranks() * n, T(99)), want(ranks() * n);
    for (size_t i = 0; i < in.size(); ++i) in[i] = value<T>(me(), i, salt);
    const size_t base = static_cast<size_t>(me()) * n;
    for (size_t r = 0; r < ranks(); ++r)
      for (size_t i = 0; i < n; ++i) want[r * n + i] = value<T>(static_cast<int>(r), base + i, salt);
    b.run(OpDesc{OpKind::all_to_all, in.data(), out.data(), n, dtype, ReduceOp::sum, 0});
    compare(out, want, label("all_to_all", dtype, n, size()));
  }

  // Above 64 Ki elements only fp32 runs max/min: the code path is the same for every dtype,
  // and on an oversubscribed machine each large collective costs ~0.3 s at 4 ranks.
  template <typename T>
  void reductions(DType dtype, size_t n) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
      if (n > (1u << 16) && dtype != DType::f32 && op != ReduceOp::sum) continue;
      allreduce<T>(dtype, n, op);
      reduce_scatter<T>(dtype, n, op);
    }
  }

  template <typename T>
  void movement(DType dtype, size_t n) {
    allgather<T>(dtype, n, false);
    allgather<T>(dtype, n, true);
    broadcast<T>(dtype, n, 0);
    broadcast<T>(dtype, n, size() - 1);
    all_to_all<T>(dtype, n);
  }

  void everything(const std::vector<size_t>& sizes) {
    for (size_t n : sizes) {
      reductions<float>(DType::f32, n);
      reductions<double>(DType::f64, n);
      reductions<int32_t>(DType::i32, n);
      movement<float>(DType::f32, n);
      movement<double>(DType::f64, n);
      movement<int32_t>(DType::i32, n);
      movement<uint16_t>(DType::f16, n);  // bit patterns: only moved, never reduced
      movement<uint16_t>(DType::bf16, n);
      b.run(OpDesc{});  // barrier
    }
    for (size_t n : {size_t{1}, size_t{1000}}) {
      reductions<int64_t>(DType::i64, n);
      reductions<int8_t>(DType::i8, n);
      reductions<uint8_t>(DType::u8, n);
    }
  }
};

comm::GroupContext world_context(int rank, int size) {
  comm::GroupContext context;
  context.store = std::make_shared<comm::MemoryStore>();
  context.rank = rank;
  context.size = size;
  return context;
}

// Ranks of `parent` with the same color, ordered by (key, parent rank) — what split must make.
comm::SplitPlan plan_for(int me, int size, const std::vector<int>& colors, const std::vector<int>& keys,
                         const std::string& name) {
  comm::SplitPlan plan;
  plan.color = colors[static_cast<size_t>(me)];
  plan.key = keys[static_cast<size_t>(me)];
  if (plan.color < 0) return plan;
  for (int r = 0; r < size; ++r)
    if (colors[static_cast<size_t>(r)] == plan.color) plan.members.push_back(r);
  std::stable_sort(plan.members.begin(), plan.members.end(),
                   [&](int a, int b) { return keys[static_cast<size_t>(a)] < keys[static_cast<size_t>(b)]; });
  plan.context = world_context(0, static_cast<int>(plan.members.size()));
  plan.context.rank = static_cast<int>(std::find(plan.members.begin(), plan.members.end(), me) - plan.members.begin());
  plan.context.name = name;
  return plan;
}

void check_sub_group(comm::Backend& parent, std::unique_ptr<comm::Backend> sub, const comm::SplitPlan& plan) {
  const int me = parent.rank();
  if (plan.color < 0) {
    expect(sub == nullptr,
           fmt::format("split '{}': rank {} has color {} but got a backend", plan.context.name, me, plan.color));
    return;
  }
  expect(sub != nullptr, fmt::format("split '{}': member rank {} got no backend", plan.context.name, me));
  expect(sub->rank() == plan.context.rank && sub->size() == plan.context.size,
         fmt::format("split '{}': rank {} of {} expected, got {} of {}", plan.context.name, plan.context.rank,
                     plan.context.size, sub->rank(), sub->size()));
  // Gathering parent ranks shows the order; the full sweep shows the sub-group really works.
  std::vector<int32_t> gathered(plan.members.size(), -1);
  int32_t mine = me;
  sub->run(OpDesc{OpKind::allgather, &mine, gathered.data(), 1, DType::i32, ReduceOp::sum, 0});
  expect(std::equal(gathered.begin(), gathered.end(), plan.members.begin()),
         fmt::format("split '{}': allgather of parent ranks gave [{}], expected [{}]", plan.context.name,
                     fmt::join(gathered, ", "), fmt::join(plan.members, ", ")));
  Checker sub_checker{*sub, 500};
  sub_checker.everything({0, 7, 1000});
}

template <typename F>
std::string error_of(F&& body) {
  try {
    body();
  } catch (const dscpp::Error& e) {
    return e.what();
  }
  return "";
}

void check_errors(comm::Backend& world, int rank, int size) {
  std::string message = error_of([&] { comm::make_mpi_backend(world_context(rank, size + 1)); });
  expect(message.find("MPI says rank") != std::string::npos &&
             message.find(fmt::format("of {}", size + 1)) != std::string::npos,
         fmt::format("a world context of size {} under {} MPI ranks: expected an error naming both, got '{}'", size + 1,
                     size, message));

  float x = 1;
  message = error_of([&] { world.run(OpDesc{OpKind::broadcast, &x, &x, 1, DType::f32, ReduceOp::sum, size}); });
  expect(message.find("broadcast") != std::string::npos && message.find("MPI_Bcast") != std::string::npos &&
             message.find("'world'") != std::string::npos,
         fmt::format("broadcast from root {} of {}: expected an MPI error naming group and op, got '{}'", size, size,
                     message));

  // A sub-group plan whose member order disagrees with MPI's must be refused, not used.
  std::vector<int> colors(static_cast<size_t>(size), 0), keys(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) keys[static_cast<size_t>(r)] = r;
  comm::SplitPlan plan = plan_for(rank, size, colors, keys, "reversed");
  std::reverse(plan.members.begin(), plan.members.end());
  message = error_of([&] { world.split(plan); });
  expect(message.find("MPI_Comm_split made") != std::string::npos,
         fmt::format("a split plan with members in the wrong order: expected an error, got '{}'", message));
}

}  // namespace

int main() {
  std::optional<dscpp::RankIdentity> id;
  try {
    id = dscpp::discover_rank();
  } catch (const std::exception& e) {
    die(e.what());
  }
  if (!id) {
    std::fprintf(stderr, "mpi_backend_check: no launcher variables; run it under mpirun\n");
    return 2;
  }
  g_rank = id->rank;
  const int size = id->world_size;
  try {
    auto world = comm::make_mpi_backend(world_context(id->rank, size));
    expect(world->rank() == id->rank && world->size() == size, "world rank/size differ from the launcher's");
    expect(world->supports(DType::f32, ReduceOp::sum) && world->supports(DType::i8, ReduceOp::min) &&
               world->supports(DType::u8, ReduceOp::max) && world->supports(DType::i64, ReduceOp::sum),
           "supports(): a native MPI reduction was refused");
    expect(!world->supports(DType::f32, ReduceOp::avg) && !world->supports(DType::f16, ReduceOp::sum) &&
               !world->supports(DType::bf16, ReduceOp::max),
           "supports(): avg or a 16-bit float reduction claimed native (the Communicator must stage them)");

    Checker checker{*world};
    checker.everything({0, 1, 7, 1000, (size_t{1} << 20) + 3});

    // The paths for counts beyond INT_MAX, driven with a small limit.
    setenv("DSCPP_MPI_MAX_COUNT", "1000", 1);
    auto chunked = comm::make_mpi_backend(world_context(id->rank, size));
    unsetenv("DSCPP_MPI_MAX_COUNT");
    Checker chunk_checker{*chunked, 1000};
    chunk_checker.everything({0, 7, 1000, 1001, 4003});

    std::vector<int> colors(static_cast<size_t>(size)), keys(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) {
      colors[static_cast<size_t>(r)] = r % 2;
      keys[static_cast<size_t>(r)] = -r;  // reverse order inside each sub-group
    }
    comm::SplitPlan parity = plan_for(id->rank, size, colors, keys, "parity");
    check_sub_group(*world, world->split(parity), parity);
    for (int r = 0; r < size; ++r) {
      colors[static_cast<size_t>(r)] = r == size - 1 ? -1 : 0;
      keys[static_cast<size_t>(r)] = r;
    }
    comm::SplitPlan all_but_last = plan_for(id->rank, size, colors, keys, "all_but_last");
    check_sub_group(*world, world->split(all_but_last), all_but_last);

    check_errors(*world, id->rank, size);
    world->run(OpDesc{});
  } catch (const std::exception& e) {
    die(e.what());
  }
  if (id->rank == 0) std::printf("mpi_backend_check: %d ranks, %d checks passed\n", size, g_checks);
  return 0;
}
