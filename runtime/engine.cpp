#include "runtime/engine.h"

#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "runtime/checkpoint_dir.h"
#include "runtime/init.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>

namespace dscpp::runtime {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

Engine::Engine(Plugin& plugin, const config::LoadedConfig& loaded, comm::Communicator& world, Device& device,
               const dscpp_ops& ops, TrainOptions options)
    : plugin_(plugin),
      loaded_(loaded),
      cfg_(loaded.config),
      world_(world),
      device_(device),
      ops_(ops),
      options_(std::move(options)),
      csv_(world.rank() == 0 ? loaded.config.csv_monitor : config::TensorboardConfig{}) {
  if (cfg_.zero_optimization.stage != 0)
    fail("zero_optimization.stage {} is not available yet in dscpp-runtime: only stage 0 (data parallelism) runs",
         cfg_.zero_optimization.stage);
  if (cfg_.fp16.enabled || cfg_.bf16.enabled)
    fail("fp16/bf16 mixed precision is not available yet in dscpp-runtime: train in fp32 (disable the fp16/bf16 "
         "sections)");
  micro_ = cfg_.train_micro_batch_size_per_gpu.value_or(1);
  gas_ = cfg_.gradient_accumulation_steps.value_or(1);
  train_batch_ = cfg_.train_batch_size.value_or(micro_ * gas_ * world.size());
  DSCPP_CHECK_EQ(train_batch_, micro_ * gas_ * world.size());

  layout_ = make_flat_layout(plugin.layers());
  params_ = DeviceBuffer(device, static_cast<size_t>(layout_.total) * 4, MemCategory::params, true);
  grads_ = DeviceBuffer(device, static_cast<size_t>(layout_.total) * 4, MemCategory::grads, true);
  runner_ = std::make_unique<LayerRunner>(plugin, device, ops_, layout_, micro_);
  runner_->bind(params_.as<float>(), grads_.as<float>());

  DistributedSampler sampler(plugin.data().train_size, world.rank(), world.size(), options_.shuffle, options_.seed,
                             cfg_.dataloader_drop_last);
  loader_ = std::make_unique<BatchLoader>(plugin, device, 0, micro_, sampler, cfg_.dataloader_drop_last);

  if (!cfg_.optimizer) fail("the config has no optimizer section");
  optimizer_ = make_optimizer(*cfg_.optimizer, device);
  std::vector<Segment> segments;
  for (const ParamSlot& s : layout_.params) segments.push_back({s.offset, s.numel});
  optimizer_->add_group(layout_.total, std::move(segments));
  schedule_ = make_lr_schedule(cfg_.scheduler, optimizer_->base_lr(), optimizer_->base_momentum());
  grad_sync_ = std::make_unique<Stage0GradSync>(world, layout_, cfg_.zero_optimization.reduce_bucket_size,
                                                cfg_.gradient_predivide_factor, cfg_.prescale_gradients);

  total_steps_ = options_.steps ? *options_.steps
                                : steps_for_epochs(options_.epochs.value_or(1.0), plugin.data().train_size, world.size(),
                                                   micro_, gas_, cfg_.dataloader_drop_last);
  if (total_steps_ < 0) fail("--steps must be ≥ 0 (got {})", total_steps_);
}

Engine::~Engine() = default;

CheckpointView Engine::checkpoint_view() {
  CheckpointView v;
  v.layout = &layout_;
  v.params = params_.as<float>();
  v.optimizer = optimizer_.get();
  v.schedule = schedule_.get();
  v.counters = &counters_;
  v.zero_stage = 0;
  v.train_batch_size = train_batch_;
  v.micro_batch = micro_;
  v.gradient_accumulation_steps = gas_;
  v.seed = options_.seed;
  v.config_json = config::format_effective_config_json(loaded_);
  return v;
}

void Engine::initialise_params() {
  // Each parameter from (seed, name, index); on a non-host device through a host copy.
  std::vector<float> host;
  for (const ParamSlot& s : layout_.params) {
    host.resize(static_cast<size_t>(s.numel));
    init_range(options_.seed, s.name, s.init, s.init_a, 0, s.numel, host.data());
    device_.copy_from_host(params_.as<float>() + s.offset, host.data(), host.size() * 4);
  }
}

void Engine::run() {
  auto t0 = Clock::now();
  initialise_params();
  if (!options_.init_from.empty()) {
    load_weights(options_.init_from, layout_, params_.as<float>());
    if (world_.rank() == 0) log::info("initial weights from {}", options_.init_from);
  }
  std::string resume_dir = options_.load_dir;
  if (resume_dir.empty() && options_.resume_from_save_dir && !options_.save_dir.empty() &&
      read_latest_tag(options_.save_dir)) {
    resume_dir = options_.save_dir;
    if (world_.rank() == 0) log::info("restarted job: resuming from the newest checkpoint in {}", resume_dir);
  }
  if (!resume_dir.empty()) load(resume_dir);
  // The data position follows from the samples seen, whatever the world size was.
  loader_->seek(counters_.global_samples / (micro_ * world_.size()));

  if (world_.rank() == 0)
    log::info("model {}: {} layers, {} parameters ({} fp32); {} train / {} eval samples; training to step {} "
              "(train_batch_size {} = micro {} × accumulation {} × {} ranks); init {:.2f} s",
              plugin_.name(), plugin_.layers().size(), layout_.numel, format_bytes(layout_.numel * 4),
              plugin_.data().train_size, plugin_.data().eval_size, total_steps_, train_batch_, micro_, gas_,
              world_.size(), seconds_since(t0));

  window_start_ = Clock::now();
  // DeepSpeed's throughput timer leaves out the first 2 steps (warm-up); so does the summary.
  const int64_t first_step = counters_.global_steps, warmup = 2;
  const Clock::time_point run_start = Clock::now();
  Clock::time_point timed_from = run_start;
  while (counters_.global_steps < total_steps_) {
    train_step();
    int64_t step = counters_.global_steps;
    if (step - first_step == warmup) timed_from = Clock::now();
    if (options_.eval_interval > 0 && step % options_.eval_interval == 0 && step < total_steps_) {
      EvalResult r = evaluate();
      if (world_.rank() == 0)
        log::info("eval at step {}: loss {:.4f}, accuracy {:.2f}% ({} samples)", step, r.loss, 100 * r.accuracy,
                  r.counted);
    }
    if (!options_.save_dir.empty() && options_.save_interval > 0 && step % options_.save_interval == 0 &&
        step < total_steps_)
      save(options_.save_dir);
  }
  if (int64_t timed = counters_.global_steps - first_step - warmup; timed > 0 && world_.rank() == 0) {
    double secs = seconds_since(timed_from);
    double samples = static_cast<double>(timed * train_batch_) / secs;
    log::info("trained {} steps in {:.2f} s; after the first {}: {:.1f} samples/s{}", counters_.global_steps - first_step,
              seconds_since(run_start), warmup, samples,
              plugin_.data().tokens_per_sample
                  ? fmt::format(", {:.0f} tokens/s", samples * static_cast<double>(plugin_.data().tokens_per_sample))
                  : std::string());
  }
  if (options_.eval && plugin_.data().eval_size > 0) {
    EvalResult r = evaluate();
    if (world_.rank() == 0)
      log::info("final eval: loss {:.4f}, accuracy {:.2f}% ({} samples)", r.loss, 100 * r.accuracy, r.counted);
  }
  if (!options_.save_dir.empty()) save(options_.save_dir);
  if (world_.rank() == 0) report();
}

void Engine::train_step() {
  double loss_sum = 0;  // Σ over micro-batches of the micro-batch mean loss
  for (int64_t j = 0; j < gas_; ++j) {
    MicroBatch mb;
    {
      Timers::Scope t(timers_, "data");
      mb = loader_->next();
    }
    dscpp_metrics m;
    {
      Timers::Scope t(timers_, "fwd");
      m = runner_->forward(mb.input, mb.target, mb.size, true, static_cast<uint64_t>(counters_.micro_steps));
    }
    loss_sum += m.counted ? m.loss_sum / static_cast<double>(m.counted) : 0.0;
    bool last = j == gas_ - 1;
    {
      Timers::Scope t(timers_, "bwd");
      if (last) grad_sync_->begin(grads_.as<float>());
      runner_->backward(1.0f / static_cast<float>(gas_),
                        last ? std::function<void(int)>([this](int l) { grad_sync_->layer_done(l); })
                             : std::function<void(int)>());
    }
    ++counters_.micro_steps;
  }
  {
    Timers::Scope t(timers_, "bwd_allreduce");
    grad_sync_->finish();
  }
  {
    Timers::Scope t(timers_, "step");
    double norm = -1;
    clip_gradients(&norm);
    last_grad_norm_ = norm;
    StepOverrides o;
    o.lr = schedule_->lr();
    o.momentum = schedule_->momentum();
    o.beta2 = schedule_->beta2();
    optimizer_->step(0, params_.as<float>(), grads_.as<float>(), o);
    last_lr_ = *o.lr;
    schedule_->step();
    device_.zero(grads_.data(), grads_.bytes());
  }
  ++counters_.global_steps;
  counters_.global_samples += train_batch_;
  log_step(loss_sum / static_cast<double>(gas_));
}

void Engine::clip_gradients(double* norm_out) {
  double max_norm = cfg_.gradient_clipping;
  if (max_norm <= 0 && cfg_.steps_per_print <= 0) return;
  // The gradients are already averaged and identical on every rank, so the local norm is the
  // global one (DeepSpeed's fp32 path averages identical values over dp: a no-op).
  const float* g = grads_.as<float>();
  // Fixed blocks summed in block order: the norm does not depend on the thread count.
  constexpr int64_t kBlocks = 64;
  int64_t per = (layout_.total + kBlocks - 1) / kBlocks;
  std::vector<double> partial(kBlocks, 0.0);
  parallel_for(kBlocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      double s = 0;
      for (int64_t i = blk * per, e = std::min(layout_.total, (blk + 1) * per); i < e; ++i)
        s += static_cast<double>(g[i]) * g[i];
      partial[static_cast<size_t>(blk)] = s;
    }
  });
  double sq = 0;
  for (double s : partial) sq += s;
  double norm = std::sqrt(sq);
  *norm_out = norm;
  if (max_norm > 0) {
    double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0) {
      float c = static_cast<float>(coef);
      float* gw = grads_.as<float>();
      parallel_for(layout_.total, 1 << 15, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) gw[i] *= c;
      });
    }
  }
}

void Engine::log_step(double local_loss) {
  // The loss the user sees is the mean over ranks; one small allreduce per step.
  double loss = local_loss;
  if (world_.size() > 1) {
    world_.allreduce(&loss, 1, DType::f64);
    loss /= world_.size();
  }
  int64_t step = counters_.global_steps;
  if (world_.rank() == 0) {
    csv_.record("Train/Samples/train_loss", counters_.global_samples, loss);
    csv_.record("Train/Samples/lr", counters_.global_samples, last_lr_);
  }
  window_loss_ += loss;
  ++window_steps_;
  int64_t every = cfg_.steps_per_print;
  if (every <= 0 || (step % every != 0 && step != total_steps_)) return;
  double secs = seconds_since(window_start_);
  StepReport r;
  r.step = step;
  r.total_steps = total_steps_;
  r.loss = window_loss_ / static_cast<double>(window_steps_);
  r.lr = last_lr_;
  r.samples_per_s = static_cast<double>(window_steps_ * train_batch_) / secs;
  r.tokens_per_s = r.samples_per_s * static_cast<double>(plugin_.data().tokens_per_sample);
  r.grad_norm = last_grad_norm_;
  r.skipped = counters_.skipped_steps;
  r.memory = device_.stats();
  if (world_.rank() == 0) {
    log::info("{}", format_step_line(r));
    if (cfg_.wall_clock_breakdown) log::info("time (ms) | {}", timers_.report_and_reset());
  }
  window_start_ = Clock::now();
  window_steps_ = 0;
  window_loss_ = 0;
}

EvalResult Engine::evaluate() {
  const dscpp_data_desc& d = plugin_.data();
  std::vector<unsigned char> input(static_cast<size_t>(micro_ * d.input_numel * 4));
  std::vector<int32_t> target(static_cast<size_t>(micro_ * d.target_numel));
  DeviceBuffer dinput(device_, input.size(), MemCategory::buffers);
  DeviceBuffer dtarget(device_, target.size() * 4, MemCategory::buffers);
  // Rank r evaluates samples r, r+W, ...: every sample exactly once across the world.
  double totals[3] = {0, 0, 0};  // loss sum, counted, correct
  std::vector<int64_t> mine;
  for (int64_t i = world_.rank(); i < d.eval_size; i += world_.size()) mine.push_back(i);
  for (size_t first = 0; first < mine.size(); first += static_cast<size_t>(micro_)) {
    int64_t n = std::min<int64_t>(micro_, static_cast<int64_t>(mine.size() - first));
    for (int64_t k = 0; k < n; ++k)
      plugin_.load_sample(1, mine[first + static_cast<size_t>(k)], input.data() + k * d.input_numel * 4,
                          target.data() + k * d.target_numel);
    device_.copy_from_host(dinput.data(), input.data(), static_cast<size_t>(n * d.input_numel * 4));
    device_.copy_from_host(dtarget.data(), target.data(), static_cast<size_t>(n * d.target_numel) * 4);
    dscpp_metrics m = runner_->forward(dinput.data(), dtarget.as<int32_t>(), n, false, 0);
    totals[0] += m.loss_sum;
    totals[1] += static_cast<double>(m.counted);
    totals[2] += static_cast<double>(m.correct);
  }
  if (world_.size() > 1) world_.allreduce(totals, 3, DType::f64);
  EvalResult r;
  r.counted = static_cast<int64_t>(totals[1]);
  r.loss = totals[1] > 0 ? totals[0] / totals[1] : 0;
  r.accuracy = totals[1] > 0 ? totals[2] / totals[1] : 0;
  return r;
}

void Engine::save(const std::string& save_dir) {
  auto t0 = Clock::now();
  std::string dir = save_checkpoint(save_dir, step_tag(counters_.global_steps), world_, checkpoint_view());
  if (world_.rank() == 0) log::info("saved checkpoint {} in {:.2f} s", dir, seconds_since(t0));
}

void Engine::load(const std::string& load_dir) {
  auto tag = read_latest_tag(load_dir);
  if (!tag) fail("--load_dir {}: there is no `latest` file, so no checkpoint to resume from", load_dir);
  std::string dir = (std::filesystem::path(load_dir) / *tag).string();
  load_checkpoint(dir, world_, checkpoint_view());
  if (world_.rank() == 0)
    log::info("resumed from {} at step {} ({} samples seen)", dir, counters_.global_steps, counters_.global_samples);
}

namespace {
struct InferContext {
  Engine* engine;
  LayerRunner* runner;
  Device* device;
  const Plugin* plugin;
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
    ctx->runner->forward(in.data(), nullptr, batch, false, 0);
    ctx->device->copy_to_host(outputs_host, ctx->runner->last_output(),
                              static_cast<size_t>(batch * ctx->runner->last_output_numel()) * 4);
    return DSCPP_OK;
  } catch (const std::exception& e) {
    snprintf(err->message, sizeof(err->message), "%s", e.what());
    return DSCPP_E_INTERNAL;
  }
}
}  // namespace

void Engine::report() {
  if (!plugin_.has_report()) return;
  InferContext ctx{this, runner_.get(), &device_, &plugin_};
  dscpp_infer infer{&ctx, runner_->max_batch(), infer_forward};
  plugin_.report(infer);
}

}  // namespace dscpp::runtime
