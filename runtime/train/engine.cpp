#include "runtime/train/engine.h"

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/manifest.h"
#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "kernels/cpu/amp/amp_cpu.h"  // store_from_f32 on the host
#include "kernels/device_math.h"
#include "runtime/model/frozen_params.h"
#include "runtime/model/init.h"
#include "runtime/train/fault_injection.h"
#include "runtime/zero/local_partitions.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>

namespace dscpp::runtime {

namespace {

using Clock = std::chrono::steady_clock;
constexpr float kInf = std::numeric_limits<float>::infinity();

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

Engine::Engine(Plugin& plugin, config::TrainPlan plan, comm::Communicator& world, Device& device,
               const dscpp_ops& ops, TrainOptions options, Device* host)
    : plugin_(plugin),
      plan_(std::move(plan)),
      world_(world),
      device_(device),
      own_host_(host ? nullptr : make_host_device()),
      host_(host ? host : own_host_.get()),
      options_(std::move(options)) {
  // The config's checks have run (configs/rules.cpp, unsupported_features) and the plan is
  // resolved: what is left here is building what it says.
  log_ = std::make_unique<StepLog>(StepLogOptions::for_plan(plan_, plugin.data().tokens_per_sample), world, device);
  check_fault_settings();
  guard_ = std::make_unique<GradGuard>(plan_.loss_scale, GradGuardOptions::for_plan(plan_), world);

  if (!options_.steps)  // dscpp-runtime gives the steps; a caller may give epochs instead
    options_.steps = steps_for_epochs(options_.epochs.value_or(1.0), plugin.data().train_size, world.size(),
                                      plan_.batch.micro, plan_.batch.gas, plan_.batch.drop_last);
  if (*options_.steps < 0) fail("--steps must be ≥ 0 (got {})", *options_.steps);

  // With frozen parameters, two layouts of one grouping rule: the trained parameters (gradients,
  // master weights, optimizer) and the frozen ones (a parameter store of their own).
  const Grouping grouping = grouping_for(plan_.zero, world.size());
  const bool frozen = count_frozen(plugin.layers()).frozen_params > 0;
  zero_.layout = make_flat_layout(plugin.layers(), grouping, frozen ? ParamSet::trainable : ParamSet::all);
  if (frozen) {
    zero_.frozen_layout = make_flat_layout(plugin.layers(), grouping, ParamSet::frozen);
    if (world.rank() == 0) log::info("{}", describe_frozen(plugin.layers()));
  }
  if (!options_.eval_only) {
    if (!plan_.optimizer) fail("the config has no optimizer section");
    if (plugin.data().train_size == 0)
      fail("model {} has no training samples: give it its data (the model families take --data FILE after --)",
           plugin.name());
    // Offloaded to the CPU, the optimizer's loops run on the host (MasterWeights places each
    // sub-group's state: on the host, or on the device for those a partial offload keeps there).
    zero_.optimizer =
        make_optimizer(*plan_.optimizer, plan_.optimizer_offload.device == OffloadDevice::cpu ? *host_ : device);
  }
  const ParamOffloadPlan& offload = plan_.param_offload;
  if (options_.eval_only && world.rank() == 0 &&
      (!plan_.zero.parameters_partitioned || offload.device == OffloadDevice::none))
    log::warn(
        "--eval_only at ZeRO stage {} without offload_param: every rank holds {}; ZeRO-Inference keeps "
        "only the live layers on the device with zero_optimization.stage 3 and offload_param cpu or nvme",
        plan_.zero.stage, plan_.zero.parameters_partitioned ? "its partitions on the device" : "the whole model");

  const int nodes = options_.ranks_per_node > 0 ? world.size() / options_.ranks_per_node : 1;
  if (world.rank() == 0)
    if (std::string zpp = describe_zeropp(plan_.zero, plan_.stage3, world.size(), nodes); !zpp.empty())
      log::info("{}", zpp);
  memory_ = std::make_unique<RunMemory>(plugin.layers(), plan_, memory_facts(ops));
  memory_plan_ =
      memory_->plan(zero_.layout, world.size(), zero_.frozen_layout.params.empty() ? nullptr : &zero_.frozen_layout);
  if (world.rank() == 0)
    log::info("ZeRO stage {} over {} rank{}, {} parameters, {} gradients{}; memory plan:\n{}", plan_.zero.stage,
              world.size(), world.size() == 1 ? "" : "s", dtype_name(plan_.precision.params),
              dtype_name(plan_.precision.grads),
              guard_->scaler().checks_overflow() ? ", loss scaling " + guard_->scaler().describe() : std::string(),
              format_memory_plan(memory_plan_, nullptr, deepspeed_estimate()));
  if (world.rank() == 0) {
    const auto act = static_cast<size_t>(MemCategory::activations);
    log::info("{}; planned activations per rank (bytes): device={}, host={}",
              describe_checkpointing(memory_->facts().checkpointing, static_cast<int>(plugin.layers().size())),
              memory_plan_.bytes[act], memory_plan_.host[act]);
  }
  try {
    allocate(ops);
  } catch (const OutOfDeviceMemory& e) {
    out_of_memory(e);
  }
}

void Engine::allocate(const dscpp_ops& ops) {
  comm::Communicator& world = world_;
  Device& device = device_;
  Plugin& plugin = plugin_;
  const ParamOffloadPlan& offload = plan_.param_offload;
  zero_.params = std::make_unique<ParamStore>(zero_.layout, world, device, plan_.precision.params,
                                         plan_.zero.parameters_partitioned, plan_.stage3, host_, offload);
  if (world.rank() == 0 && offload.device != OffloadDevice::none) log::info("{}", zero_.params->home().describe());
  if (!zero_.frozen_layout.params.empty()) {
    ParamOffloadPlan frozen_offload = offload;
    frozen_offload.swap_suffix = "-frozen";
    zero_.frozen = std::make_unique<ParamStore>(zero_.frozen_layout, world, device, plan_.precision.params,
                                                plan_.zero.parameters_partitioned, plan_.stage3, host_, frozen_offload);
    if (world.rank() == 0 && offload.device != OffloadDevice::none)
      log::info("frozen parameters: {}", zero_.frozen->home().describe());
  }
  if (plan_.flops_profiler.enabled) {
    std::vector<std::string> names;
    std::vector<int64_t> params;
    for (size_t l = 0; l < plugin.layers().size(); ++l) {
      names.push_back(plugin.layers()[l].name);
      int64_t n = zero_.layout.layer_range[l].second - zero_.layout.layer_range[l].first;
      if (zero_.frozen) n += zero_.frozen_layout.layer_range[l].second - zero_.frozen_layout.layer_range[l].first;
      params.push_back(n);
    }
    profiler_ = std::make_unique<FlopsProfiler>(ops, std::move(names), std::move(params), plan_.flops_profiler);
  }
  runner_ = std::make_unique<LayerRunner>(
      plugin, device, profiler_ ? profiler_->ops() : ops, zero_.layout, plan_.batch.micro, plan_.precision.params,
      plan_.precision.grads, memory_->facts().checkpointing, host_, zero_.frozen ? &zero_.frozen_layout : nullptr);
  runner_->set_source([this](int layer, LayerPass pass) {  // a recompute: parameters only, no prefetch
    const ModelParams::Layer p =
        zero_.model().layer_params(layer, pass != LayerPass::forward, pass != LayerPass::recompute);
    LayerRunner::LayerMemory m{p.trained, pass == LayerPass::backward ? zero_.grads->layer_grads(layer) : nullptr,
                               p.frozen};
    // After the gather: the layer's own time. A recompute belongs to backward (DeepSpeed profiles
    // the forward pass; recompute_fwd_factor accounts for recomputation).
    if (profiler_) profiler_->enter(layer, pass != LayerPass::forward);
    return m;
  });
  runner_->after_layer = [this](int layer, bool backward) {
    if (profiler_) profiler_->leave();
    zero_.model().layer_done(layer, backward);
    if (backward) zero_.grads->layer_done(layer);
  };
  if (options_.eval_only) return;  // ZeRO-Inference: no gradients, optimizer state or training data

  zero_.master = std::make_unique<MasterWeights>(zero_.layout, *zero_.params, *zero_.optimizer, device,
                                                 MasterOptions::for_plan(plan_, host_, world.rank()));

  GradReduceOptions r = reduce_options_for(plan_, plan_.zero, device_.is_host(), options_.ranks_per_node,
                                          plan_.optimizer_offload.device != OffloadDevice::none ? host_ : nullptr);
  // The offloaded sub-groups' share of the gradient partition (all of it unless ratio < 1).
  if (r.partition_device) r.partition_device_elements = zero_.master->split().offloaded_elements;
  zero_.grads = std::make_unique<GradReducer>(world, zero_.layout, device, plan_.precision.grads, r);

  DistributedSampler sampler(plugin.data().train_size, world.rank(), world.size(), options_.shuffle, options_.seed,
                             plan_.batch.drop_last);
  loader_ = std::make_unique<BatchLoader>(plugin, device, 0, plan_.batch.micro, sampler, plan_.batch.drop_last);

  schedule_ = make_lr_schedule(plan_.scheduler, zero_.optimizer->base_lr(), zero_.optimizer->base_momentum(),
                               plan_.default_schedule);
  if (world.rank() == 0 && !plan_.scheduler && plan_.default_schedule.type != "constant")
    log::info("LR schedule (no scheduler block): the HF Trainer's {} over {} steps, {} of them warmup from 0, peak {}",
              plan_.default_schedule.type, plan_.default_schedule.total_steps, plan_.default_schedule.warmup_steps,
              zero_.optimizer->base_lr());

}

Engine::~Engine() = default;

void Engine::run() {
  if (options_.eval_only) return run_eval_only();
  auto t0 = Clock::now();
  initialise_params();
  std::string resume_dir = options_.load_dir;
  if (resume_dir.empty() && options_.resume_from_save_dir && !options_.save_dir.empty() &&
      ckpt::read_latest_tag(options_.save_dir)) {
    resume_dir = options_.save_dir;
    if (world_.rank() == 0) log::info("restarted job: resuming from the newest checkpoint in {}", resume_dir);
  }
  // Initial weights only for a fresh start: a checkpoint replaces them all.
  if (const InitialWeights init = initial_weights(); !init.path.empty() && resume_dir.empty()) {
    load_initial_weights(init, world_, checkpoint_view());
    if (world_.rank() == 0) log::info("initial weights from {}", init.path);
  }
  // A restarted job continues its own run in full, whatever the first start took from --load_dir.
  if (resume_dir == options_.load_dir && !resume_dir.empty())
    load(resume_dir, options_.load_tag, options_.resume);
  else if (!resume_dir.empty())
    load(resume_dir);
  // The data position follows from the samples seen, whatever the world size was.
  loader_->seek(counters_.global_samples / (plan_.batch.micro * world_.size()));

  if (world_.rank() == 0)
    log::info(
        "model {}: {} layers, {} parameters ({} fp32){}; {} train / {} eval samples; training to step {} "
        "(train_batch_size {} = micro {} × accumulation {} × {} ranks); init {:.2f} s",
        plugin_.name(), plugin_.layers().size(), zero_.layout.numel + zero_.frozen_layout.numel,
        format_bytes((zero_.layout.numel + zero_.frozen_layout.numel) * 4),
        zero_.frozen ? fmt::format(", {} of them trained", zero_.layout.numel) : std::string(),
        plugin_.data().train_size, plugin_.data().eval_size, total_steps(), plan_.batch.train_batch, plan_.batch.micro,
        plan_.batch.gas, world_.size(), seconds_since(t0));

  const int64_t first_step = counters_.global_steps;
  log_->begin(first_step, counters_.global_samples);
  while (counters_.global_steps < total_steps()) {
    try {
      train_step();
    } catch (const OutOfDeviceMemory& e) {
      out_of_memory(e);
    }
    int64_t step = counters_.global_steps;
    if (step - first_step == 1 && world_.rank() == 0) {
      MemoryStats m = device_.stats();
      MemoryStats h = host_stats();
      log::info("memory after the first step:\n{}", format_memory_plan(memory_plan_, &m, deepspeed_estimate(), &h));
    }
    if (options_.eval_interval > 0 && step % options_.eval_interval == 0 && step < total_steps()) {
      EvalResult r = evaluate();
      if (world_.rank() == 0)
        log::info("eval at step {}: {}", step, format_eval(r, plugin_.data().tokens_per_sample));
      log_->record_eval(eval_events(r, counters_.global_samples, plugin_.data().tokens_per_sample));
    }
    if (!options_.save_dir.empty() && options_.save_interval > 0 && step % options_.save_interval == 0 &&
        step < total_steps())
      save(options_.save_dir);
    // Tests of what a killed run leaves (monitor files, checkpoints): no unwinding, no flushing.
    inject_fault(FaultPoint::crash, step, world_.rank(), world_.size(), [] { std::_Exit(137); });
  }
  log_->end(counters_.global_steps);
  if (options_.eval && plugin_.data().eval_size > 0) {
    EvalResult r = evaluate();
    if (world_.rank() == 0)
      log::info("final eval: {}", format_eval(r, plugin_.data().tokens_per_sample));
    log_->record_eval(eval_events(r, counters_.global_samples, plugin_.data().tokens_per_sample));
  }
  if (!options_.save_dir.empty()) save(options_.save_dir);
  report();  // collective at stage 3
  log_memory_peaks();
  if (world_.rank() == 0 && world_.size() > 1) {
    log::info("communication (rank 0, whole run): {}", comm::format_traffic(world_.stats()));
    for (const comm::Communicator* c : {zero_.params->hpz_group(), zero_.grads ? zero_.grads->qgz_node() : nullptr,
                                        zero_.grads ? zero_.grads->qgz_cross() : nullptr})
      if (c)
        log::info("{} group communication (rank 0, whole run): {}", c->group_name(), comm::format_traffic(c->stats()));
  }
  if (const std::string comms = log_->comms_summary(); !comms.empty() && world_.rank() == 0) log::info("{}", comms);
}

void Engine::say_lengths(const MicroBatch& mb) {
  if (said_lengths_ || world_.rank() != 0 || (mb.lengths[0] == 0 && mb.lengths[1] == 0)) return;
  said_lengths_ = true;
  const EncoderDecl& enc = plugin_.encoder();
  const int64_t most[2] = {enc.layers > 0 ? enc.len : plugin_.data().tokens_per_sample,
                           enc.layers > 0 ? plugin_.data().target_numel : 0};
  std::string what;
  for (int s = 0; s < 2; ++s)
    if (mb.lengths[size_t(s)] > 0)
      what += fmt::format("{}{} of {} {} positions", what.empty() ? "" : " and ", mb.lengths[size_t(s)], most[s],
                          enc.layers > 0 ? (s == 0 ? "source" : "target") : "token");
  log::info("micro-batches are padded to their own longest sample (the model's batch_lengths): the first computes {}",
            what);
}

void Engine::train_step() {
  double loss_sum = 0;  // Σ over micro-batches of the micro-batch mean loss
  GradVerdict verdict;
  std::optional<double> lr;  // the step's, when it was taken
  // d(objective)/d(micro-batch mean loss): the mean over the accumulation window, and over the
  // ranks where DeepSpeed divides by the world before the reduction (configs/plans.h
  // GradScaling; GradReducer's reductions are plain sums there).
  float loss_grad = static_cast<float>(
      guard_->scaler().scale() /
      static_cast<double>(plan_.batch.gas * (plan_.gradients.scaling.world_in_loss ? world_.size() : 1)));
  // The profiled step is bracketed (and each layer in it, through enter/leave) by device
  // synchronizations, so that its latencies are device time on an asynchronous device.
  const bool profiling = profiling_step();
  if (profiling) profiler_->begin_step(device_);
  for (int64_t j = 0; j < plan_.batch.gas; ++j) {
    MicroBatch mb;
    {
      Timers::Scope t(log_->timers(), "data");
      mb = loader_->next();
    }
    say_lengths(mb);
    dscpp_metrics m;
    {
      Timers::Scope t(log_->timers(), "fwd");
      zero_.model().begin_pass(false, true);
      m = runner_->forward(mb.input, mb.target, mb.size, true, static_cast<uint64_t>(counters_.micro_steps), 0,
                           mb.lengths);
    }
    loss_sum += m.counted ? m.loss_sum / static_cast<double>(m.counted) : 0.0;
    inject_fault(FaultPoint::loss_nan, counters_.global_steps + 1, world_.rank(), world_.size(),
                 [&] { loss_sum = std::numeric_limits<double>::quiet_NaN(); });
    {
      Timers::Scope t(log_->timers(), "bwd");
      zero_.model().begin_pass(true, true);
      zero_.grads->begin_micro(j == 0, j == plan_.batch.gas - 1);
      runner_->backward(loss_grad);
    }
    {
      Timers::Scope t(log_->timers(), "bwd_allreduce");
      zero_.grads->end_micro();
    }
    ++counters_.micro_steps;
  }
  {
    Timers::Scope t(log_->timers(), "step");
    verdict = check_gradients(loss_sum);
    if (verdict.step) {
      StepOverrides o;
      o.lr = schedule_->lr();
      o.momentum = schedule_->momentum();
      o.beta2 = schedule_->beta2();
      zero_.master->step([this](int g) { return zero_.grads->owned(g); }, zero_.grads->dtype(), verdict.grad_scale, o);
      lr = o.lr;
      schedule_->step();
      zero_.grads->zero();
      Timers::Scope g(log_->timers(), "optimizer_allgather");
      zero_.params->publish();
    } else {
      ++counters_.skipped_steps;  // DeepSpeed: no optimizer or LR step, global_steps still advances
      zero_.grads->zero();
    }
  }
  ++counters_.global_steps;
  counters_.global_samples += plan_.batch.train_batch;
  // Tests of the save's guard: a NaN the step guard could not have caught.
  inject_fault(FaultPoint::weights_nan, counters_.global_steps, world_.rank(), world_.size(), [this] {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    LocalPartitions(zero_.layout, world_.rank(), zero_.master.get(), zero_.optimizer.get(), zero_.params.get())
        .copy_in(ckpt::kMasterWeights, 0, 1, &nan);
  });
  // Tests of the launcher's blame: one rank fails on its own.
  inject_fault(FaultPoint::rank_failure, counters_.global_steps, world_.rank(), world_.size(), [this] {
    fail("DSCPP_FAULT_INJECT=fail_slowly: rank {} fails at step {}", world_.rank(), counters_.global_steps);
  });
  // Tests of --check_schedule: one rank takes a different path.
  inject_fault(FaultPoint::step_end, counters_.global_steps, world_.rank(), world_.size(),
               [this] { world_.barrier(); });
  // --check_schedule: a rank that ends the step early is caught here, not left hanging.
  world_.schedule_checkpoint(fmt::format("end of step {}", counters_.global_steps));
  if (profiling) {
    const double step_s = profiler_->end_step();
    if (world_.rank() == 0) profiler_->publish(step_s, plan_.batch.train_batch / world_.size());
  }
  StepOutcome out;
  out.step = counters_.global_steps;
  out.total_steps = total_steps();
  out.global_samples = counters_.global_samples;
  out.skipped = counters_.skipped_steps;
  out.local_loss = loss_sum / static_cast<double>(plan_.batch.gas);
  out.lr = lr;
  out.grad_norm = verdict.norm;
  if (guard_->scaler().checks_overflow()) out.loss_scale = guard_->scaler().scale();
  if (plan_.optimizer_offload.device == OffloadDevice::nvme) out.swap = zero_.master->swap_stats();
  out.extra = runner_->checkpoint_profile();
  log_->after_step(out);
}

GradVerdict Engine::check_gradients(double local_loss) {
  std::vector<GradSlice> slices;
  for (size_t g = 0; g < zero_.layout.groups.size(); ++g)
    if (zero_.layout.groups[g].part > 0)
      slices.push_back({zero_.grads->owned(static_cast<int>(g)), zero_.layout.groups[g].part,
                        &zero_.grads->owned_device(static_cast<int>(g))});
  const int64_t step = counters_.global_steps + 1;
  // Tests of the guard: a NaN in one rank's gradients (any precision), an inf where overflow is checked.
  auto write_all = [&](float value) {
    unsigned char bits[8];
    kernels::store_from_f32(bits, zero_.grads->dtype(), &value, 1);
    for (const GradSlice& s : slices) s.device->copy_from_host(s.data, bits, dtype_size(zero_.grads->dtype()));
  };
  inject_fault(FaultPoint::gradients_nan, step, world_.rank(), world_.size(),
               [&] { write_all(std::numeric_limits<float>::quiet_NaN()); });
  if (guard_->checks_overflow())
    inject_fault(FaultPoint::gradients_reduced, step, world_.rank(), world_.size(), [&] { write_all(kInf); });
  // Stage 0: the gradients are already reduced and identical on every rank. Stages 1-3: each
  // rank holds its own partition.
  return guard_->check(slices, zero_.grads->dtype(), plan_.zero.optimizer_partitioned && world_.size() > 1, local_loss,
                       step);
}

}  // namespace dscpp::runtime
