#include "runtime/train/forward_passes.h"

#include "core/error.h"
#include "kernels/device_math.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace dscpp::runtime {

std::string format_eval(const EvalResult& r, int64_t tokens_per_sample, int loss_digits) {
  // A language model's loss is the mean cross-entropy per token: exp of it is the perplexity.
  // What the loss layer counted: predicted positions of a language model, else samples.
  return fmt::format("loss {:.{}f}, accuracy {:.2f}%{} ({} {}){}", r.loss, loss_digits, 100 * r.accuracy,
                     tokens_per_sample > 0 ? fmt::format(", perplexity {:.4f}", std::exp(r.loss)) : std::string(),
                     r.counted, tokens_per_sample > 0 ? "tokens" : "samples",
                     r.bleu ? fmt::format(", bleu {:.2f}, gen_len {:.2f}", *r.bleu, r.gen_len.value_or(0)) : "");
}

std::vector<MonitorEvent> eval_events(const EvalResult& r, int64_t samples, int64_t tokens_per_sample) {
  std::vector<MonitorEvent> e = {{"Eval/Samples/eval_loss", r.loss, samples},
                                 {"Eval/Samples/eval_accuracy", r.accuracy, samples}};
  if (tokens_per_sample > 0) e.push_back({"Eval/Samples/eval_perplexity", std::exp(r.loss), samples});
  if (r.bleu) e.push_back({"Eval/Samples/eval_bleu", *r.bleu, samples});
  if (r.gen_len) e.push_back({"Eval/Samples/eval_gen_len", *r.gen_len, samples});
  return e;
}

EvalResult evaluate(const ForwardPasses& f) {
  const dscpp_data_desc& d = f.plugin.data();
  std::vector<unsigned char> input(static_cast<size_t>(f.micro * d.input_numel * 4));
  std::vector<int32_t> target(static_cast<size_t>(f.micro * d.target_numel));
  DeviceBuffer dinput(f.device, input.size(), MemCategory::buffers);
  DeviceBuffer dtarget(f.device, target.size() * 4, MemCategory::buffers);
  // Rank r evaluates samples r, r+W, ...: every sample exactly once across the world.
  double totals[3] = {0, 0, 0};  // loss sum, counted, correct
  std::vector<int64_t> mine;
  for (int64_t i = f.world.rank(); i < d.eval_size; i += f.world.size()) mine.push_back(i);
  // At stage 3 a forward pass is collective (gathers): every rank runs as many batches as the
  // rank with the most samples, the others following the gathers without computing.
  int64_t batches = (static_cast<int64_t>(mine.size()) + f.micro - 1) / f.micro;
  if (f.collective()) {
    int64_t most = batches;
    f.world.allreduce(&most, 1, DType::i64, comm::ReduceOp::max);
    for (int64_t b = batches; b < most; ++b) f.params.follow_forward();
  }
  for (size_t first = 0; first < mine.size(); first += static_cast<size_t>(f.micro)) {
    int64_t n = std::min<int64_t>(f.micro, static_cast<int64_t>(mine.size() - first));
    for (int64_t k = 0; k < n; ++k)
      f.plugin.load_sample(1, mine[first + static_cast<size_t>(k)], input.data() + k * d.input_numel * 4,
                          target.data() + k * d.target_numel);
    f.device.copy_from_host(dinput.data(), input.data(), static_cast<size_t>(n * d.input_numel * 4));
    f.device.copy_from_host(dtarget.data(), target.data(), static_cast<size_t>(n * d.target_numel) * 4);
    f.params.begin_pass(false, false);
    const StreamLengths lengths = f.plugin.batch_lengths(input.data(), target.data(), n);
    dscpp_metrics m = f.runner.forward(dinput.data(), dtarget.as<int32_t>(), n, false, 0, 0, lengths);
    totals[0] += m.loss_sum;
    totals[1] += static_cast<double>(m.counted);
    totals[2] += static_cast<double>(m.correct);
  }
  if (f.world.size() > 1) f.world.allreduce(totals, 3, DType::f64);
  EvalResult r;
  r.counted = static_cast<int64_t>(totals[1]);
  r.loss = totals[1] > 0 ? totals[0] / totals[1] : 0;
  r.accuracy = totals[1] > 0 ? totals[2] / totals[1] : 0;
  return r;
}


namespace {
struct InferContext {
  const ModelParams* params;
  LayerRunner* runner;
  Device* device;
  const Plugin* plugin;
  comm::Communicator* announce = nullptr;  // stage 3: tell the other ranks a pass begins
};

int infer_forward(const dscpp_infer* self, const void* inputs_host, int64_t batch, float* outputs_host,
                  dscpp_error* err) {
  auto* ctx = static_cast<InferContext*>(self->runtime);
  try {
    if (batch <= 0 || batch > ctx->runner->max_batch())
      fail("infer forward: batch {} outside 1..{}", batch, ctx->runner->max_batch());
    const dscpp_data_desc& d = ctx->plugin->data();
    DeviceBuffer in(*ctx->device, static_cast<size_t>(batch * d.input_numel * 4), MemCategory::buffers);
    ctx->device->copy_from_host(in.data(), inputs_host, in.bytes());
    if (ctx->announce) {
      int64_t cmd = 1;
      ctx->announce->broadcast(&cmd, 1, DType::i64, 0);
    }
    ctx->params->begin_pass(false, false);
    ctx->runner->forward(in.data(), nullptr, batch, false, 0);
    // The loss layer's output in the compute dtype, handed over as fp32 (the ABI's promise).
    const int64_t n = batch * ctx->runner->last_output_numel();
    const void* out = ctx->runner->last_output();
    DeviceBuffer widened;
    if (ctx->runner->compute_dtype() != DType::f32) {
      widened = DeviceBuffer(*ctx->device, static_cast<size_t>(n) * 4, MemCategory::buffers);
      kernels::math_of(*ctx->device).convert_into(widened.data(), DType::f32, out, ctx->runner->compute_dtype(), n);
      out = widened.data();
    }
    ctx->device->copy_to_host(outputs_host, out, static_cast<size_t>(n) * 4);
    return DSCPP_OK;
  } catch (const std::exception& e) {
    snprintf(err->message, sizeof(err->message), "%s", e.what());
    return DSCPP_E_INTERNAL;
  }
}
}  // namespace

void run_plugin_report(const ForwardPasses& f) {
  if (!f.plugin.has_report()) return;
  // The plugin reports on rank 0. At stage 3 each of its forward passes is collective, so rank
  // 0 announces every pass (1) and the end (0); the other ranks follow the gathers.
  const bool collective = f.collective();
  if (f.world.rank() != 0) {
    if (!collective) return;
    for (int64_t cmd = 1; f.world.broadcast(&cmd, 1, DType::i64, 0), cmd == 1;) f.params.follow_forward();
    return;
  }
  InferContext ctx{&f.params, &f.runner, &f.device, &f.plugin, collective ? &f.world : nullptr};
  dscpp_infer infer{&ctx, f.runner.max_batch(), infer_forward};
  try {
    f.plugin.report(infer);
  } catch (...) {
    int64_t end = 0;
    if (collective) f.world.broadcast(&end, 1, DType::i64, 0);
    throw;
  }
  int64_t end = 0;
  if (collective) f.world.broadcast(&end, 1, DType::i64, 0);
}


}  // namespace dscpp::runtime
