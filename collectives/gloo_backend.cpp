// The gloo engine: gloo's TCP transport, connected through our Store, for ranks on different
// hosts (or threads of a test). Allreduce, reduce_scatter and allgather run a segmented ring of
// our own over gloo's unbound buffers; broadcast, all_to_all and barrier are gloo's own.
//
// Why our own ring: gloo's new-style allreduce keeps only two 1 MB segments in flight, and each
// unbound receive costs a notify round trip before the data moves, so on loopback the pipeline
// drains between segments and both cores idle half the time. Posting a window of receives ahead
// keeps the sockets busy. It also gives reduce_scatter with the slice where the caller wants it
// (gloo's ReduceScatterHalvingDoubling writes every rank's slice at the start of the buffer and
// overwrites the input) and allgather/reduce_scatter for counts not divisible by the group.
//
// Why the pinned send buffers: gloo sets SO_SNDBUF on a pair's socket to the size of the first
// bound-buffer message sent on it, which also switches off the kernel's autotuning, and only
// ever raises it afterwards. A small first message (a 2 KB halving-doubling step) leaves ~4 KB
// of send buffer and every later transfer crawls (1 s per 64 MB allreduce, 10+ s stalls at 3-4
// ranks). One large bound-buffer message per pair right after connecting pins a large buffer
// before anything else can pin a small one.
#include "build_config.h"
#include "collectives/backend.h"

#if DSCPP_HAVE_GLOO
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <thread>
#include <vector>

#include <fmt/format.h>
#endif

namespace dscpp::comm {

#if DSCPP_HAVE_GLOO
namespace {

// Ring segment and receive window, chosen by bench_gloo on loopback (2-4 ranks, 1-64 MB).
constexpr size_t kSegmentBytes = size_t{1} << 20;
constexpr size_t kWindow = 4;
// At least the kernel's usual wmem_max (4 MB); gloo caps its request at 32 MB.
constexpr size_t kPinnedSendBuffer = size_t{4} << 20;
// Scratch kept between calls (receive window, reduce_scatter partials) up to this size.
constexpr size_t kKeepScratch = size_t{64} << 20;
// Prefix of our ring's slots, apart from gloo's own (0x01-0x08, types.h).
constexpr uint8_t kRingSlotPrefix = 0x44;

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

// gloo's rendezvous talks to this; keys arrive already prefixed for the group.
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  StoreAdapter(std::shared_ptr<comm::Store> store, Millis timeout, std::string group)
      : store_(std::move(store)), timeout_(timeout), group_(std::move(group)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(key, std::string_view(data.data(), data.size()));
  }
  std::vector<char> get(const std::string& key) override {
    wait({key}, timeout_);
    std::string value = store_->get(key, timeout_);
    return {value.begin(), value.end()};
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> missing = store_->wait(keys, timeout);
    if (missing.empty()) return;
    // gloo's keys are the ranks whose addresses it needs.
    std::vector<int> ranks;
    for (const auto& key : missing) {
      try {
        ranks.push_back(std::stoi(key));
      } catch (const std::exception&) {
        ranks.clear();
        break;
      }
    }
    std::string who = ranks.size() == missing.size()
                          ? (ranks.size() == 1 ? "rank " : "ranks ") + format_rank_list(ranks)
                          : "keys " + fmt::format("{}", fmt::join(missing, ", "));
    throw StoreTimeout(fmt::format("gloo group '{}': {} did not publish a gloo address within {:.1f} s", group_, who,
                                   static_cast<double>(timeout.count()) / 1000.0),
                       std::move(missing));
  }

 private:
  std::shared_ptr<comm::Store> store_;
  Millis timeout_;
  std::string group_;
};

template <typename T>
ReduceFn reduce_for(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return &gloo::sum<T>;
    case ReduceOp::max:
      return &gloo::max<T>;
    case ReduceOp::min:
      return &gloo::min<T>;
    case ReduceOp::avg:
      break;
  }
  return nullptr;
}

ReduceFn reduce_fn(DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::f32:
      return reduce_for<float>(op);
    case DType::f64:
      return reduce_for<double>(op);
    case DType::i32:
      return reduce_for<int32_t>(op);
    case DType::i64:
      return reduce_for<int64_t>(op);
    default:
      return nullptr;
  }
}

// gloo's messages start with "[./gloo/transport/tcp/pair.cc:598] "; the source line helps no user.
std::string gloo_message(const std::exception& e) {
  std::string what = e.what();
  if (!what.empty() && what[0] == '[') {
    size_t end = what.find("] ");
    if (end != std::string::npos) what.erase(0, end + 2);
  }
  return what;
}

// One ring pass. Chunk c of the group's data is [off[c], off[c] + len[c]) elements. With the
// reduce-scatter phase, rank r ends up owning the reduction of chunk r; with the allgather
// phase, every rank's `out` receives every chunk. Receives from the left neighbour are posted
// kWindow segments ahead into `window`; a segment's partial sum is written to `partial(c)` and
// sent on from there, so a window slot is free as soon as it has been reduced and no send ever
// has to complete before the next receive is posted (which would deadlock the ring).
struct RingPass {
  int size = 1, rank = 0;
  size_t esize = 1;
  std::vector<size_t> off, len;
  // Reduce-scatter phase (skipped when in == nullptr).
  const char* in = nullptr;  // every rank's full contribution, off/len layout
  ReduceFn reduce = nullptr;
  std::vector<char*> partial;  // per chunk: where its partial sum lives (ring order)
  char* own = nullptr;         // where the reduction of chunk `rank` goes
  // Allgather phase (skipped when out == nullptr); chunk `rank` of out must be final.
  char* out = nullptr;
};

class GlooBackend final : public Backend {
 public:
  GlooBackend(const GroupContext& context, std::shared_ptr<gloo::transport::Device> device)
      : context_(context), device_(std::move(device)) {
    try {
      gloo_ = std::make_shared<gloo::rendezvous::Context>(context_.rank, context_.size);
      gloo_->setTimeout(context_.timeout);
      StoreAdapter store(context_.store, context_.timeout, context_.name);
      gloo_->connectFullMesh(store, device_);
      pin_send_buffers();
    } catch (const gloo::Exception& e) {
      fail("gloo group '{}': rank {} of {} could not connect to its peers: {}", context_.name, context_.rank,
           context_.size, gloo_message(e));
    }
  }

  std::string_view name() const override { return "gloo"; }
  int rank() const override { return context_.rank; }
  int size() const override { return context_.size; }

  bool supports(DType dtype, ReduceOp op) const override { return reduce_fn(dtype, op) != nullptr; }

  void run(const OpDesc& op) override {
    if (!broken_.empty())
      throw PeerFailure(
          fmt::format("gloo group '{}': {} refused: the group failed earlier and cannot be used again ({})",
                      context_.name, op_kind_name(op.kind), broken_));
    peer_ = -1;
    try {
      dispatch(op);
    } catch (const gloo::Exception& e) {
      // gloo names sockets ("[127.0.0.1]:41234"), not ranks; the ring knows which neighbour it
      // was exchanging with.
      std::string detail = gloo_message(e);
      bool hung_up =
          detail.find("closed by peer") != std::string::npos || detail.find("reset by peer") != std::string::npos;
      if (peer_ >= 0 && hung_up) {
        detail = fmt::format("rank {} closed the connection; it exited or crashed ({})", peer_, detail);
        record_failure(detail);
        // The group is dead. Hanging up on every peer now wakes those still waiting on this
        // rank, so they record their reasons while this rank (maybe the store's host) lives.
        hang_up_on_all();
        detail += hang_up_diagnosis(peer_);
      } else {
        if (peer_ >= 0 && detail.find("Timed out") != std::string::npos)
          detail = fmt::format("nothing from rank {} within {:.1f} s, it is stuck, behind or gone ({})", peer_,
                               static_cast<double>(context_.timeout.count()) / 1000.0, detail);
        else if (peer_ >= 0)
          detail = fmt::format("while exchanging with rank {}: {}", peer_, detail);
        record_failure(detail);
      }
      broken_ = detail;
      throw PeerFailure(fmt::format("gloo group '{}': {} failed on rank {} of {}: {}", context_.name,
                                    op_kind_name(op.kind), context_.rank, context_.size, detail));
    }
  }

  std::unique_ptr<Backend> split(const SplitPlan& plan) override {
    if (plan.color < 0) return nullptr;
    return std::make_unique<GlooBackend>(plan.context, device_);
  }

 private:
  void pin_send_buffers();
  void dispatch(const OpDesc& op);
  void ring(const RingPass& pass);
  RingPass reducing_pass(const OpDesc& op) const;
  void allreduce(const OpDesc& op);
  void reduce_scatter(const OpDesc& op);
  void allgather(const OpDesc& op);
  void broadcast(const OpDesc& op);
  void all_to_all(const OpDesc& op);
  char* scratch(std::vector<char>& buffer, size_t bytes);
  void trim(std::vector<char>& buffer);
  uint32_t next_tag() { return tag_++; }

  // A ring rank only hears from the peer it waits on, and gloo does not pass one pair's error to
  // the others: when rank 2 dies, rank 1 may sit waiting on rank 0 until rank 0 exits, then name
  // rank 0 (which had named rank 2), or rank 0 may first see rank 1 hang up. Each failing rank
  // leaves its reason in the group's store; a rank that saw a peer hang up gives the others a
  // moment to do so, then names the ranks that recorded nothing and what its peer recorded.
  static std::string failure_key(int rank) { return fmt::format("failed/{}", rank); }
  void record_failure(const std::string& detail) {
    try {
      context_.store->set(failure_key(context_.rank), detail);
    } catch (const std::exception&) {  // the store's host may be the rank that died
    }
  }
  void hang_up_on_all() {
    for (int r = 0; r < context_.size; ++r) {
      if (r == context_.rank) continue;
      try {
        gloo_->getPair(r)->close();
      } catch (const std::exception&) {  // already closed by its own error
      }
    }
    gloo_.reset();
  }
  std::string hang_up_diagnosis(int peer) {
    const auto start = std::chrono::steady_clock::now();
    std::string told;  // first: the peer's record, while its store's host may still be up
    try {
      if (context_.store->check(failure_key(peer)))
        told = fmt::format("; rank {} had failed: {}", peer,
                           context_.store->get(failure_key(peer), std::chrono::seconds(5)));
    } catch (const std::exception&) {  // the store went with its host
      return "";
    }
    std::vector<std::string> keys;
    for (int r = 0; r < context_.size; ++r)
      if (r != context_.rank) keys.push_back(failure_key(r));
    std::vector<std::string> missing;
    try {
      // One parked request, not a poll: every survivor of a large group asks at once.
      missing =
          context_.store->wait(keys, std::min<std::chrono::milliseconds>(context_.timeout, std::chrono::seconds(2)));
    } catch (const std::exception&) {
      return told;
    }
    std::vector<int> silent;
    for (int r = 0; r < context_.size; ++r)
      if (std::find(missing.begin(), missing.end(), failure_key(r)) != missing.end()) silent.push_back(r);
    if (silent.empty()) return told;
    return fmt::format("; no failure recorded by {} {} within {:.1f} s: exited, crashed or not communicating{}",
                       silent.size() == 1 ? "rank" : "ranks", fmt::join(silent, ", "),
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), told);
  }

  GroupContext context_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> gloo_;
  std::vector<char> window_, partials_;
  uint32_t tag_ = 1;
  int peer_ = -1;       // the rank a failing wait was waiting on, for the message
  std::string broken_;  // what gloo said when the group failed
};

void GlooBackend::pin_send_buffers() {
  const int size = context_.size, me = context_.rank;
  if (size == 1) return;
  // Every pair receives into the same block: all reads happen on the device's one loop thread
  // and the bytes are never looked at.
  std::vector<char> send(kPinnedSendBuffer), recv(kPinnedSendBuffer);
  const int slot = gloo_->nextSlot();
  std::vector<std::unique_ptr<gloo::transport::Buffer>> sends, recvs;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == me) continue;
    recvs.push_back(gloo_->getPair(peer)->createRecvBuffer(slot, recv.data(), recv.size()));
  }
  // Data for a bound buffer that is not registered yet makes the receiver's loop thread spin
  // until it is; a barrier first keeps that from happening.
  gloo::BarrierOptions barrier(gloo_);
  barrier.setTag(next_tag());
  gloo::barrier(barrier);
  for (int peer = 0; peer < size; ++peer) {
    if (peer == me) continue;
    sends.push_back(gloo_->getPair(peer)->createSendBuffer(slot, send.data(), send.size()));
  }
  for (auto& buffer : sends) buffer->send();
  for (auto& buffer : sends) buffer->waitSend();
  for (auto& buffer : recvs) buffer->waitRecv();
}

char* GlooBackend::scratch(std::vector<char>& buffer, size_t bytes) {
  if (buffer.size() < bytes) {
    buffer.clear();
    buffer.shrink_to_fit();
    buffer.resize(bytes);
  }
  return buffer.data();
}

void GlooBackend::trim(std::vector<char>& buffer) {
  if (buffer.size() > kKeepScratch) {
    buffer.clear();
    buffer.shrink_to_fit();
  }
}

void GlooBackend::dispatch(const OpDesc& op) {
  switch (op.kind) {
    case OpKind::allreduce:
      return allreduce(op);
    case OpKind::reduce_scatter:
      return reduce_scatter(op);
    case OpKind::allgather:
      return allgather(op);
    case OpKind::broadcast:
      return broadcast(op);
    case OpKind::all_to_all:
      return all_to_all(op);
    case OpKind::barrier: {
      gloo::BarrierOptions options(gloo_);
      options.setTag(next_tag());
      gloo::barrier(options);
      return;
    }
  }
  fail("gloo group '{}': unknown operation kind {}", context_.name, static_cast<int>(op.kind));
}

void GlooBackend::ring(const RingPass& pass) {
  const int n = pass.size, me = pass.rank;
  const int left = (me + n - 1) % n, right = (me + 1) % n;
  const size_t es = pass.esize, seg = std::max<size_t>(1, kSegmentBytes / es);
  const uint64_t slot = gloo::Slot::build(kRingSlotPrefix, next_tag());
  const Millis timeout = context_.timeout;
  auto chunk_at = [n](int c) { return ((c % n) + n) % n; };
  auto segments = [&](int c) { return (pass.len[c] + seg - 1) / seg; };
  auto seg_len = [&](int c, size_t k) { return std::min(seg, pass.len[c] - k * seg); };
  auto byte_off = [&](int c, size_t k) { return (pass.off[c] + k * seg) * es; };
  const size_t total = (pass.off[n - 1] + pass.len[n - 1]) * es;

  // Receive order (the left neighbour sends in exactly this order): reduce-scatter step s brings
  // chunk me-s-2, allgather step s brings chunk me-s-1.
  struct Item {
    int step, chunk;
    size_t k;
  };
  std::vector<Item> rs_items, ag_items;
  const bool rs = pass.in != nullptr, ag = pass.out != nullptr;
  for (int s = 0; s < n - 1; ++s) {
    if (rs)
      for (size_t k = 0, c = chunk_at(me - s - 2); k < segments(c); ++k) rs_items.push_back({s, int(c), k});
    if (ag)
      for (size_t k = 0, c = chunk_at(me - s - 1); k < segments(c); ++k) ag_items.push_back({s, int(c), k});
  }

  std::unique_ptr<gloo::transport::UnboundBuffer> in_buf, out_buf, win_buf;
  char* window = nullptr;
  if (rs) {
    in_buf = gloo_->createUnboundBuffer(const_cast<char*>(pass.in), total);
    window = scratch(window_, kWindow * seg * es);
    win_buf = gloo_->createUnboundBuffer(window, kWindow * seg * es);
  }
  if (ag) out_buf = gloo_->createUnboundBuffer(pass.out, total);
  // Partial sums are sent from their own (unbound) buffers, one per chunk in flight.
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> partial_bufs(n);
  size_t in_sends = 0, out_sends = 0;
  std::vector<size_t> partial_sends(n, 0);

  peer_ = right;
  // The first reduce-scatter step sends this rank's own contribution; a pure allgather starts
  // with the chunk this rank owns.
  if (rs) {
    int c = chunk_at(me - 1);
    for (size_t k = 0; k < segments(c); ++k, ++in_sends) in_buf->send(right, slot, byte_off(c, k), seg_len(c, k) * es);
  } else if (ag) {
    for (size_t k = 0; k < segments(me); ++k, ++out_sends)
      out_buf->send(right, slot, byte_off(me, k), seg_len(me, k) * es);
  }

  size_t posted = 0;
  bool ag_posted = false;
  auto post = [&](size_t upto) {
    for (; posted < std::min(upto, rs_items.size()); ++posted) {
      const Item& item = rs_items[posted];
      win_buf->recv(left, slot, (posted % kWindow) * seg * es, seg_len(item.chunk, item.k) * es);
    }
    if (posted == rs_items.size() && !ag_posted) {
      ag_posted = true;
      for (const Item& item : ag_items)
        out_buf->recv(left, slot, byte_off(item.chunk, item.k), seg_len(item.chunk, item.k) * es);
    }
  };
  auto wait_recv = [&](gloo::transport::UnboundBuffer& buffer) {
    peer_ = left;
    if (!buffer.waitRecv(timeout)) throw gloo::IoException("receive aborted");
  };
  auto wait_sends = [&](gloo::transport::UnboundBuffer* buffer, size_t count) {
    peer_ = right;
    for (size_t i = 0; i < count; ++i)
      if (!buffer->waitSend(timeout)) throw gloo::IoException("send aborted");
  };

  post(kWindow);
  for (size_t i = 0; i < rs_items.size(); ++i) {
    wait_recv(*win_buf);
    const Item& item = rs_items[i];
    const char* received = window + (i % kWindow) * seg * es;
    const size_t len = seg_len(item.chunk, item.k), at = byte_off(item.chunk, item.k);
    const char* mine = pass.in + at;
    if (item.step < n - 2) {
      char* base = pass.partial[item.chunk];
      const size_t local = item.k * seg * es;
      pass.reduce(base + local, received, mine, len);
      if (!partial_bufs[item.chunk])
        partial_bufs[item.chunk] = gloo_->createUnboundBuffer(base, pass.len[item.chunk] * es);
      partial_bufs[item.chunk]->send(right, slot, local, len * es);
      ++partial_sends[item.chunk];
    } else {
      char* dest = pass.own + item.k * seg * es;
      pass.reduce(dest, received, mine, len);
      if (ag) {
        out_buf->send(right, slot, at, len * es);
        ++out_sends;
      }
    }
    post(i + 1 + kWindow);
  }
  post(0);
  for (const Item& item : ag_items) {
    wait_recv(*out_buf);
    if (item.step < n - 2) {
      out_buf->send(right, slot, byte_off(item.chunk, item.k), seg_len(item.chunk, item.k) * es);
      ++out_sends;
    }
  }
  if (in_buf) wait_sends(in_buf.get(), in_sends);
  if (out_buf) wait_sends(out_buf.get(), out_sends);
  for (int c = 0; c < n; ++c)
    if (partial_bufs[c]) wait_sends(partial_bufs[c].get(), partial_sends[c]);
  trim(window_);
}

RingPass GlooBackend::reducing_pass(const OpDesc& op) const {
  RingPass pass;
  pass.size = context_.size;
  pass.rank = context_.rank;
  pass.esize = dtype_size(op.dtype);
  pass.reduce = reduce_fn(op.dtype, op.reduce);
  if (!pass.reduce)
    fail("gloo group '{}': {} cannot reduce {} with {} (supports() said so; stage it)", context_.name,
         op_kind_name(op.kind), dtype_name(op.dtype), reduce_op_name(op.reduce));
  return pass;
}

void GlooBackend::allreduce(const OpDesc& op) {
  const int n = context_.size;
  if (op.count == 0 || n == 1) return;
  RingPass pass = reducing_pass(op);
  char* buffer = static_cast<char*>(op.output);
  for (int c = 0; c < n; ++c) {
    pass.off.push_back(op.count * c / n);
    pass.len.push_back(op.count * (c + 1) / n - op.count * c / n);
    pass.partial.push_back(buffer + pass.off[c] * pass.esize);
  }
  // In place: partial sums land where the final values will, and are overwritten by the
  // allgather only after every rank has used them.
  pass.in = static_cast<const char*>(op.input ? op.input : op.output);
  pass.own = pass.partial[context_.rank];
  pass.out = buffer;
  ring(pass);
}

void GlooBackend::reduce_scatter(const OpDesc& op) {
  const int n = context_.size;
  const size_t bytes = op.count * dtype_size(op.dtype);
  if (op.count == 0) return;
  if (n == 1) {
    std::memmove(op.output, op.input, bytes);
    return;
  }
  RingPass pass = reducing_pass(op);
  // The input is the caller's and read-only: partial sums of the n-2 chunks that pass through
  // this rank go to scratch, in the order the ring brings them.
  char* partials = scratch(partials_, bytes * static_cast<size_t>(std::max(n - 2, 0)));
  pass.partial.assign(n, nullptr);
  for (int c = 0; c < n; ++c) {
    pass.off.push_back(op.count * c);
    pass.len.push_back(op.count);
  }
  for (int s = 0; s < n - 2; ++s) pass.partial[((context_.rank - s - 2) % n + n) % n] = partials + bytes * s;
  pass.in = static_cast<const char*>(op.input);
  pass.own = static_cast<char*>(op.output);
  ring(pass);
  trim(partials_);
}

void GlooBackend::allgather(const OpDesc& op) {
  const int n = context_.size;
  const size_t esize = dtype_size(op.dtype), bytes = op.count * esize;
  if (op.count == 0) return;
  char* out = static_cast<char*>(op.output);
  char* mine = out + bytes * context_.rank;
  if (op.input != mine) std::memcpy(mine, op.input, bytes);
  if (n == 1) return;
  RingPass pass;
  pass.size = n;
  pass.rank = context_.rank;
  pass.esize = esize;
  for (int c = 0; c < n; ++c) {
    pass.off.push_back(op.count * c);
    pass.len.push_back(op.count);
  }
  pass.out = out;
  ring(pass);
}

void GlooBackend::broadcast(const OpDesc& op) {
  if (op.count == 0 || context_.size == 1) return;
  if (op.root < 0 || op.root >= context_.size)
    fail("gloo group '{}': broadcast root {} is not a rank of the group (size {})", context_.name, op.root,
         context_.size);
  gloo::BroadcastOptions options(gloo_);
  options.setOutput(static_cast<uint8_t*>(op.output), op.count * dtype_size(op.dtype));
  options.setRoot(op.root);
  options.setTag(next_tag());
  if (context_.rank != op.root) peer_ = op.root;
  gloo::broadcast(options);
}

void GlooBackend::all_to_all(const OpDesc& op) {
  const size_t bytes = op.count * dtype_size(op.dtype) * static_cast<size_t>(context_.size);
  if (op.count == 0) return;
  if (context_.size == 1) {
    std::memcpy(op.output, op.input, bytes);
    return;
  }
  gloo::AlltoallOptions options(gloo_);
  options.setInput(static_cast<uint8_t*>(const_cast<void*>(op.input)), bytes);
  options.setOutput(static_cast<uint8_t*>(op.output), bytes);
  options.setTag(next_tag());
  gloo::alltoall(options);
}

}  // namespace

std::unique_ptr<Backend> make_gloo_backend(const GroupContext& context) {
  // gloo's TCP pairs write with writev(), so a peer that died turns our next write into SIGPIPE,
  // which would kill this rank silently instead of letting the write fail and the error name the
  // peer. Python ignores SIGPIPE at start-up, which is why torch's gloo never sees it; we do the
  // same, unless the program chose its own disposition.
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) std::signal(SIGPIPE, SIG_IGN);
  std::shared_ptr<gloo::transport::Device> device;
  try {
    gloo::transport::tcp::attr attr;
    // The address this rank reaches the master from (loopback when the job is on one host): gloo's
    // pairs take the first connection that arrives and carry data in the clear, and the gloo this
    // builds against has no TLS transport, so no wider than that (docs/security.md).
    attr.hostname = context.address;
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    fail("gloo group '{}': cannot open a TCP device on '{}' (this rank's address): {}", context.name, context.address,
         gloo_message(e));
  }
  return std::make_unique<GlooBackend>(context, std::move(device));
}

#else

std::unique_ptr<Backend> make_gloo_backend(const GroupContext& context) {
  fail(
      "gloo group '{}': this dscpp was built without gloo (libgloo-dev was not found at configure time); "
      "choose another backend or rebuild with gloo",
      context.name);
}

#endif

}  // namespace dscpp::comm
