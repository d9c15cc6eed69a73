// The gloo backend against gloo called directly, in separate processes on 127.0.0.1 that meet
// through a TcpStore hosted by this (parent) process:
//   ours   make_gloo_backend: our segmented ring over gloo's transport, pinned send buffers
//   naive  what a plain user gets: connectFullMesh, then new-style gloo::allreduce/allgather
//          with default options, and the only reduce_scatter gloo has
//          (ReduceScatterHalvingDoubling); a fresh context per op kind, so one op's socket
//          settings do not leak into another's figures
//   best   the fastest direct gloo use found: the same, after one 4 MB bound-buffer exchange per
//          pair has pinned a large SO_SNDBUF (and 1 MB ring segments for allreduce)
// busbw is the nccl-tests convention: allreduce 2(n-1)/n * bytes / t; allgather and
// reduce_scatter (n-1)/n * bytes / t with bytes the large side. Each figure is the best of
// `iters` timed runs, each started after a barrier, so other load on the machine shows less.
//   bench_gloo [--ranks 2,3,4] [--sizes 1,16,64] [--iters N]     (sizes in MiB)
#include "build_config.h"
#include "collectives/backend.h"
#include "collectives/tcp_store.h"

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#if DSCPP_HAVE_GLOO
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

using namespace dscpp;
using namespace dscpp::comm;

namespace {

using Clock = std::chrono::steady_clock;
constexpr Millis kTimeout{120000};

struct Options {
  std::vector<int> ranks{2, 3, 4};
  std::vector<size_t> sizes_mb{1, 16, 64};
  int iters = 0;  // 0: by size
};

std::vector<size_t> parse_list(const char* text) {
  std::vector<size_t> out;
  for (const char* p = text; *p;) {
    char* end = nullptr;
    out.push_back(std::strtoul(p, &end, 10));
    if (end == p) break;
    p = *end == ',' ? end + 1 : end;
  }
  return out;
}

class GlooStore final : public gloo::rendezvous::Store {
 public:
  explicit GlooStore(std::shared_ptr<comm::Store> store) : store_(std::move(store)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(key, std::string_view(data.data(), data.size()));
  }
  std::vector<char> get(const std::string& key) override {
    std::string v = store_->get(key, kTimeout);
    return {v.begin(), v.end()};
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, kTimeout); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    if (!store_->wait(keys, timeout).empty()) throw Error("bench: gloo rendezvous timed out");
  }

 private:
  std::shared_ptr<comm::Store> store_;
};

std::shared_ptr<gloo::Context> raw_context(int rank, int size, std::shared_ptr<comm::Store> store, bool pin) {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(kTimeout);
  GlooStore gstore(std::move(store));
  context->connectFullMesh(gstore, device);
  if (pin) {
    const size_t bytes = size_t{4} << 20;
    std::vector<char> send(bytes), recv(bytes);
    const int slot = context->nextSlot();
    std::vector<std::unique_ptr<gloo::transport::Buffer>> sends, recvs;
    for (int p = 0; p < size; ++p)
      if (p != rank) recvs.push_back(context->getPair(p)->createRecvBuffer(slot, recv.data(), bytes));
    gloo::BarrierOptions barrier(context);  // peers register before anything arrives
    barrier.setTag(1);
    gloo::barrier(barrier);
    for (int p = 0; p < size; ++p)
      if (p != rank) sends.push_back(context->getPair(p)->createSendBuffer(slot, send.data(), bytes));
    for (auto& b : sends) b->send();
    for (auto& b : sends) b->waitSend();
    for (auto& b : recvs) b->waitRecv();
  }
  return context;
}

// Best seconds over `iters` runs of `op`, each after `barrier`.
double best_time(int iters, const std::function<void()>& barrier, const std::function<void()>& op) {
  op();  // warm-up: first-touch pages, connection buffers
  double best = 1e30;
  for (int i = 0; i < iters; ++i) {
    barrier();
    auto t0 = Clock::now();
    op();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

int run_rank(int rank, int n, int port, const Options& options) {
  TcpStoreOptions so;
  so.port = port;
  auto store = std::make_shared<TcpStore>(so);
  auto ns = [&](const std::string& name) {
    return std::make_shared<PrefixStore>(fmt::format("n{}/{}", n, name), store);
  };

  GroupContext gc;
  gc.store = ns("ours");
  gc.rank = rank;
  gc.size = n;
  gc.timeout = kTimeout;
  auto ours = make_gloo_backend(gc);
  auto best_ctx = raw_context(rank, n, ns("best"), true);
  auto naive_ar = raw_context(rank, n, ns("naive-ar"), false);
  auto naive_ag = raw_context(rank, n, ns("naive-ag"), false);
  auto naive_rs = raw_context(rank, n, ns("naive-rs"), false);

  auto our_barrier = [&] { ours->run({OpKind::barrier}); };
  uint32_t tag = 100;
  auto gloo_barrier = [&](std::shared_ptr<gloo::Context>& ctx) {
    return [&ctx, &tag] {
      gloo::BarrierOptions o(ctx);
      o.setTag(tag++);
      gloo::barrier(o);
    };
  };
  const ReduceFn sum = &gloo::sum<float>;

  for (size_t mb : options.sizes_mb) {
    const size_t bytes = mb << 20, count = bytes / sizeof(float);
    const int iters =
        options.iters > 0 ? options.iters : static_cast<int>(std::clamp<size_t>((256 << 20) / bytes, 4, 40));
    std::vector<float> buf(count, 1.0f), small(count / n, 1.0f), scratch(count, 1.0f);
    const double ar_bytes = 2.0 * (n - 1) / n * double(bytes), ag_bytes = double(n - 1) / n * double(count / n * n * 4);

    auto raw_allreduce = [&](std::shared_ptr<gloo::Context>& ctx, size_t segment) {
      return [&ctx, &buf, count, segment, sum, &tag] {
        gloo::AllreduceOptions o(ctx);
        o.setOutput(buf.data(), count);
        o.setReduceFunction(sum);
        o.setTag(tag++);
        if (segment) o.setMaxSegmentSize(segment);
        gloo::allreduce(o);
      };
    };
    auto raw_allgather = [&](std::shared_ptr<gloo::Context>& ctx) {
      return [&ctx, &small, &buf, n, &tag] {
        gloo::AllgatherOptions o(ctx);
        o.setInput(small.data(), small.size());
        o.setOutput(buf.data(), small.size() * n);
        o.setTag(tag++);
        gloo::allgather(o);
      };
    };
    // ReduceScatterHalvingDoubling reduces in place and leaves each rank's slice at the start
    // of the buffer; constructed once, as a user would, and run on scratch.
    std::vector<int> slices(n, int(count / n));
    slices[n - 1] += int(count % n);
    std::vector<float*> ptrs{scratch.data()};
    gloo::ReduceScatterHalvingDoubling<float> naive_rs_algo(naive_rs, ptrs, int(count), slices);
    gloo::ReduceScatterHalvingDoubling<float> best_rs_algo(best_ctx, ptrs, int(count), slices);

    struct Row {
      const char* op;
      double ours, naive, best, scale;
    };
    std::vector<Row> rows;
    rows.push_back({"allreduce",
                    best_time(iters, our_barrier,
                              [&] {
                                ours->run({OpKind::allreduce, buf.data(), buf.data(), count, DType::f32});
                              }),
                    best_time(iters, gloo_barrier(naive_ar), raw_allreduce(naive_ar, 0)),
                    best_time(iters, gloo_barrier(best_ctx), raw_allreduce(best_ctx, size_t{1} << 20)), ar_bytes});
    rows.push_back({"allgather",
                    best_time(iters, our_barrier,
                              [&] {
                                ours->run({OpKind::allgather, small.data(), buf.data(), count / n, DType::f32});
                              }),
                    best_time(iters, gloo_barrier(naive_ag), raw_allgather(naive_ag)),
                    best_time(iters, gloo_barrier(best_ctx), raw_allgather(best_ctx)), ag_bytes});
    rows.push_back({"reduce_scatter",
                    best_time(iters, our_barrier,
                              [&] {
                                ours->run({OpKind::reduce_scatter, buf.data(), small.data(), count / n, DType::f32});
                              }),
                    best_time(iters, gloo_barrier(naive_rs), [&] { naive_rs_algo.run(); }),
                    best_time(iters, gloo_barrier(best_ctx), [&] { best_rs_algo.run(); }), ag_bytes});
    if (rank == 0) {
      for (const Row& r : rows) {
        auto bw = [&](double t) { return r.scale / t / 1e9; };
        std::printf("%5d %6zu  %-14s %8.2f %8.2f %8.2f    %6.2fx %6.2fx\n", n, mb, r.op, bw(r.ours), bw(r.naive),
                    bw(r.best), r.naive / r.ours, r.best / r.ours);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--ranks") {
      options.ranks.clear();
      for (size_t r : parse_list(argv[i + 1])) options.ranks.push_back(static_cast<int>(r));
    } else if (flag == "--sizes") {
      options.sizes_mb = parse_list(argv[i + 1]);
    } else if (flag == "--iters") {
      options.iters = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: %s [--ranks 2,3,4] [--sizes 1,16,64] [--iters N]\n", argv[0]);
      return 2;
    }
  }
  std::printf("gloo on 127.0.0.1, fp32, busbw in GB/s (best of N runs); ratio = ours / gloo\n");
  std::printf("ranks    MiB  op                 ours    naive     best    vs naive vs best\n");
  std::fflush(stdout);
  int status_all = 0;
  for (int n : options.ranks) {
    TcpStoreOptions so;
    so.port = 0;
    so.host_server = true;
    TcpStore server(so);
    std::vector<pid_t> children;
    for (int rank = 0; rank < n; ++rank) {
      pid_t pid = fork();
      if (pid == 0) {
        int rc = 1;
        try {
          rc = run_rank(rank, n, server.port(), options);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "rank %d of %d: %s\n", rank, n, e.what());
        }
        std::fflush(stdout);
        _exit(rc);
      }
      children.push_back(pid);
    }
    for (pid_t pid : children) {
      int status = 0;
      waitpid(pid, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) status_all = 1;
    }
  }
  return status_all;
}

#else

int main() {
  std::printf("bench_gloo: this dscpp was built without gloo; nothing to measure\n");
  return 0;
}

#endif
