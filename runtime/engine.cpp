#include "runtime/engine.h"

#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "checkpoint/checkpoint_dir.h"
#include "runtime/init.h"
#include "kernels/cpu/amp/amp_cpu.h"

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
  const config::ZeroConfig& z = cfg_.zero_optimization;
  stage_ = static_cast<int>(z.stage);
  if (stage_ < 0 || stage_ > 3) fail("zero_optimization.stage must be 0, 1, 2 or 3 (got {})", stage_);
  if (cfg_.fp16.enabled)
    fail("fp16 mixed precision is not available yet in dscpp-runtime (bf16 is): train in bf16 or fp32");
  if (cfg_.bf16.enabled) dtype_ = DType::bf16;
  micro_ = cfg_.train_micro_batch_size_per_gpu.value_or(1);
  gas_ = cfg_.gradient_accumulation_steps.value_or(1);
  train_batch_ = cfg_.train_batch_size.value_or(micro_ * gas_ * world.size());
  DSCPP_CHECK_EQ(train_batch_, micro_ * gas_ * world.size());

  Grouping grouping;
  grouping.parts = stage_ == 0 ? 1 : world.size();
  if (stage_ == 3)
    grouping.layer_per_group = true;
  else if (stage_ > 0)
    grouping.max_group_elements = z.reduce_bucket_size;
  layout_ = make_flat_layout(plugin.layers(), grouping);

  Stage3Options s3;
  s3.prefetch_bucket_size = z.prefetch_bucket_size;
  s3.max_live_parameters = z.max_live_parameters;
  s3.max_reuse_distance = z.max_reuse_distance;
  s3.param_persistence_threshold = z.param_persistence_threshold;
  s3.model_persistence_threshold = z.model_persistence_threshold;
  params_ = std::make_unique<ParamStore>(layout_, world, device, dtype_, stage_ == 3, s3);
  GradReduceOptions r;
  r.stage = stage_;
  r.bucket_elements = z.reduce_bucket_size;
  r.predivide_factor = cfg_.gradient_predivide_factor;
  r.prescale = cfg_.prescale_gradients;
  r.reduce_scatter = z.reduce_scatter;
  r.overlap = z.overlap();
  grads_ = std::make_unique<GradReducer>(world, layout_, device, dtype_, r);

  runner_ = std::make_unique<LayerRunner>(plugin, device, ops_, layout_, micro_, dtype_);
  runner_->set_source([this](int layer, bool backward) {
    return LayerRunner::LayerMemory{params_->layer_params(layer, backward),
                                    backward ? grads_->layer_grads(layer) : nullptr};
  });
  runner_->after_layer = [this](int layer, bool backward) {
    params_->layer_done(layer, backward);
    if (backward) grads_->layer_done(layer);
  };

  DistributedSampler sampler(plugin.data().train_size, world.rank(), world.size(), options_.shuffle, options_.seed,
                             cfg_.dataloader_drop_last);
  loader_ = std::make_unique<BatchLoader>(plugin, device, 0, micro_, sampler, cfg_.dataloader_drop_last);

  if (!cfg_.optimizer) fail("the config has no optimizer section");
  optimizer_ = make_optimizer(*cfg_.optimizer, device);
  master_ = std::make_unique<MasterWeights>(layout_, *params_, *optimizer_, device);
  schedule_ = make_lr_schedule(cfg_.scheduler, optimizer_->base_lr(), optimizer_->base_momentum());

  total_steps_ = options_.steps ? *options_.steps
                                : steps_for_epochs(options_.epochs.value_or(1.0), plugin.data().train_size, world.size(),
                                                   micro_, gas_, cfg_.dataloader_drop_last);
  if (total_steps_ < 0) fail("--steps must be ≥ 0 (got {})", total_steps_);
}

Engine::~Engine() = default;

CheckpointView Engine::checkpoint_view() {
  CheckpointView v;
  v.layout = &layout_;
  v.master = master_.get();
  v.params = params_.get();
  v.device = &device_;
  v.params_dtype = dtype_;
  v.optimizer = optimizer_.get();
  v.schedule = schedule_.get();
  v.counters = &counters_;
  v.zero_stage = stage_;
  v.train_batch_size = train_batch_;
  v.micro_batch = micro_;
  v.gradient_accumulation_steps = gas_;
  v.seed = options_.seed;
  v.config_json = config::format_effective_config_json(loaded_);
  return v;
}

void Engine::initialise_params() {
  // Only the elements this rank owns (zero.Init: at stage 3 no rank ever holds the whole
  // model), each from (seed, name, index) whatever the layout; below stage 3 every rank holds
  // everything and owns it all for this purpose. On a non-host device through a host copy.
  const int owner = stage_ == 3 ? world_.rank() : 0;
  const size_t elem = dtype_size(dtype_);
  std::vector<float> host;
  std::vector<unsigned char> converted;
  for (size_t gi = 0; gi < layout_.groups.size(); ++gi) {
    const PartitionGroup& g = layout_.groups[gi];
    const int64_t own_begin = stage_ == 3 ? g.owned_begin(owner) : g.begin;
    const int64_t own_end = own_begin + (stage_ == 3 ? g.part : g.numel);
    char* base = stage_ == 3 ? static_cast<char*>(params_->owned(static_cast<int>(gi)))
                             : static_cast<char*>(params_->full()) + g.begin * static_cast<int64_t>(elem);
    for (const ParamSlot& s : layout_.params) {
      int64_t lo = std::max(own_begin, s.offset), hi = std::min(own_end, s.offset + s.numel);
      if (hi <= lo) continue;
      host.resize(static_cast<size_t>(hi - lo));
      init_range(options_.seed, s.name, s.init, s.init_a, lo - s.offset, hi - lo, host.data());
      converted.resize(host.size() * elem);
      convert(host.data(), DType::f32, converted.data(), dtype_, host.size());
      device_.copy_from_host(base + (lo - own_begin) * static_cast<int64_t>(elem), converted.data(), converted.size());
    }
  }
  master_->refresh_from_params();
  params_->publish();
}

void Engine::run() {
  auto t0 = Clock::now();
  initialise_params();
  if (!options_.init_from.empty()) {
    load_initial_weights(options_.init_from, world_, checkpoint_view());
    if (world_.rank() == 0) log::info("initial weights from {}", options_.init_from);
  }
  std::string resume_dir = options_.load_dir;
  if (resume_dir.empty() && options_.resume_from_save_dir && !options_.save_dir.empty() &&
      ckpt::read_latest_tag(options_.save_dir)) {
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
  report();  // collective at stage 3
}

void Engine::train_step() {
  double loss_sum = 0;  // Σ over micro-batches of the micro-batch mean loss
  // d(objective)/d(micro-batch mean loss): the mean over the accumulation window, and at
  // stages 1–3 also over the ranks (GradReducer's reductions are plain sums there).
  float loss_grad = 1.0f / static_cast<float>(gas_ * (stage_ > 0 ? world_.size() : 1));
  for (int64_t j = 0; j < gas_; ++j) {
    MicroBatch mb;
    {
      Timers::Scope t(timers_, "data");
      mb = loader_->next();
    }
    dscpp_metrics m;
    {
      Timers::Scope t(timers_, "fwd");
      params_->begin_pass(false, true);
      m = runner_->forward(mb.input, mb.target, mb.size, true, static_cast<uint64_t>(counters_.micro_steps));
    }
    loss_sum += m.counted ? m.loss_sum / static_cast<double>(m.counted) : 0.0;
    {
      Timers::Scope t(timers_, "bwd");
      params_->begin_pass(true, true);
      grads_->begin_micro(j == 0, j == gas_ - 1);
      runner_->backward(loss_grad);
    }
    {
      Timers::Scope t(timers_, "bwd_allreduce");
      grads_->end_micro();
    }
    ++counters_.micro_steps;
  }
  {
    Timers::Scope t(timers_, "step");
    float grad_scale = 1.0f;
    if (prepare_gradients(&grad_scale)) {
      StepOverrides o;
      o.lr = schedule_->lr();
      o.momentum = schedule_->momentum();
      o.beta2 = schedule_->beta2();
      master_->step(grads_->owned(), grads_->dtype(), grad_scale, o);
      last_lr_ = *o.lr;
      schedule_->step();
    } else {
      ++counters_.skipped_steps;
    }
    grads_->zero();
  }
  {
    Timers::Scope t(timers_, "optimizer_allgather");
    params_->publish();
  }
  ++counters_.global_steps;
  counters_.global_samples += train_batch_;
  log_step(loss_sum / static_cast<double>(gas_));
}

bool Engine::prepare_gradients(float* grad_scale) {
  double max_norm = cfg_.gradient_clipping;
  *grad_scale = 1.0f;
  last_grad_norm_ = -1;
  if (max_norm <= 0 && cfg_.steps_per_print <= 0) return true;
  // Stage 0: the gradients are already averaged and identical on every rank, so the local norm
  // is the global one. Stages 1–3: each rank sums its own partition, then the world sums.
  double sq = kernels::sum_squares(grads_->owned(), grads_->dtype(), layout_.part_total);
  if (stage_ > 0 && world_.size() > 1) world_.allreduce(&sq, 1, DType::f64);
  double norm = std::sqrt(sq);
  last_grad_norm_ = norm;
  if (max_norm > 0) {
    double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0) *grad_scale = static_cast<float>(coef);
  }
  return true;
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
  // At stage 3 a forward pass is collective (gathers): every rank runs as many batches as the
  // rank with the most samples, the others following the gathers without computing.
  int64_t batches = (static_cast<int64_t>(mine.size()) + micro_ - 1) / micro_;
  if (stage_ == 3 && world_.size() > 1) {
    int64_t most = batches;
    world_.allreduce(&most, 1, DType::i64, comm::ReduceOp::max);
    for (int64_t b = batches; b < most; ++b) params_->follow_forward();
  }
  for (size_t first = 0; first < mine.size(); first += static_cast<size_t>(micro_)) {
    int64_t n = std::min<int64_t>(micro_, static_cast<int64_t>(mine.size() - first));
    for (int64_t k = 0; k < n; ++k)
      plugin_.load_sample(1, mine[first + static_cast<size_t>(k)], input.data() + k * d.input_numel * 4,
                          target.data() + k * d.target_numel);
    device_.copy_from_host(dinput.data(), input.data(), static_cast<size_t>(n * d.input_numel * 4));
    device_.copy_from_host(dtarget.data(), target.data(), static_cast<size_t>(n * d.target_numel) * 4);
    params_->begin_pass(false, false);
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
  auto tag = ckpt::read_latest_tag(load_dir);
  if (!tag) fail("--load_dir {}: there is no `latest` file, so no checkpoint to resume from", load_dir);
  std::string dir = (std::filesystem::path(load_dir) / *tag).string();
  load_checkpoint(dir, world_, checkpoint_view());
  if (world_.rank() == 0)
    log::info("resumed from {} at step {} ({} samples seen)", dir, counters_.global_steps, counters_.global_samples);
}

namespace {
struct InferContext {
  Engine* engine;
  ParamStore* params;
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
  // The plugin reports on rank 0. At stage 3 each of its forward passes is collective, so rank
  // 0 announces every pass (1) and the end (0); the other ranks follow the gathers.
  const bool collective = stage_ == 3 && world_.size() > 1;
  if (world_.rank() != 0) {
    if (!collective) return;
    for (int64_t cmd = 1; world_.broadcast(&cmd, 1, DType::i64, 0), cmd == 1;) params_->follow_forward();
    return;
  }
  InferContext ctx{this, params_.get(), runner_.get(), &device_, &plugin_, collective ? &world_ : nullptr};
  dscpp_infer infer{&ctx, runner_->max_batch(), infer_forward};
  try {
    plugin_.report(infer);
  } catch (...) {
    int64_t end = 0;
    if (collective) world_.broadcast(&end, 1, DType::i64, 0);
    throw;
  }
  int64_t end = 0;
  if (collective) world_.broadcast(&end, 1, DType::i64, 0);
}

}  // namespace dscpp::runtime
