// The optimizers behind runtime/optim/optimizer.h: hyperparameter handling, per-group state and step
// counts here; the per-element math in kernels/optimizer_math.h, run by the DeviceMath of the
// memory each group's state lives in (the vectorised loops of kernels/cpu/optim on the host, the
// multi-tensor kernels of kernels/cuda/optim on a GPU).
#include "runtime/optim/optimizer.h"

#include "core/error.h"
#include "kernels/device_math.h"
#include "kernels/optimizer_math.h"

#include <algorithm>
#include <cmath>

namespace dscpp::runtime {
namespace {

using config::OptimizerKind;
using config::OptimizerParams;

constexpr const char* kSupported = "Adam, AdamW, Lamb, Lion, Adagrad, SGD";

// [begin, end) of a group with one weight decay, and Lamb's segment bounds inside it (relative
// to begin).
struct Run {
  int64_t begin = 0, end = 0;
  bool decay = true;
  std::vector<int64_t> bounds;
};

struct Group {
  int64_t numel = 0;
  std::vector<int64_t> bounds;  // segments tiling [0, numel) (gaps become segments of their own)
  Run whole;                    // [0, numel)
  std::vector<Run> runs;        // tiling [0, numel): `whole`, unless some ranges take no weight decay
  int64_t steps = 0;
  bool external = false;             // state arrays bound by the caller (bind_state), not owned
  Device* device = nullptr;          // owned groups: where their state is allocated
  kernels::DeviceMath* math = nullptr;  // runs the update where the state lives
  std::vector<std::string> names;    // state names, in order
  std::vector<DeviceBuffer> owned;   // owned groups: the arrays `data` points at
  std::vector<float*> data;          // the state arrays (numel floats each); null until bound
  bool momentum_started = false;  // SGD: the buffer holds a momentum (torch: buf is not None)
};

std::vector<int64_t> segment_bounds(int64_t numel, std::vector<Segment> segments) {
  std::vector<int64_t> bounds{0};
  std::sort(segments.begin(), segments.end(), [](const Segment& a, const Segment& b) { return a.offset < b.offset; });
  for (const Segment& s : segments) {
    if (s.offset < 0 || s.numel < 0 || s.offset + s.numel > numel)
      fail("optimizer: segment [{}, {}) lies outside the group's {} elements", s.offset, s.offset + s.numel, numel);
    if (s.offset < bounds.back())
      fail("optimizer: segment [{}, {}) overlaps the previous one (which ends at {})", s.offset, s.offset + s.numel,
           bounds.back());
    if (s.numel == 0) continue;
    if (s.offset > bounds.back()) bounds.push_back(s.offset);  // a gap: its own segment
    bounds.push_back(s.offset + s.numel);
  }
  if (bounds.back() < numel || numel == 0) bounds.push_back(numel);
  return bounds;
}

std::vector<Run> runs_of(const std::vector<int64_t>& bounds, int64_t numel, std::vector<Segment> no_decay) {
  std::sort(no_decay.begin(), no_decay.end(), [](const Segment& a, const Segment& b) { return a.offset < b.offset; });
  std::vector<std::pair<int64_t, bool>> cuts;  // (start, decay) of each run
  int64_t at = 0;
  for (const Segment& r : no_decay) {
    if (r.offset < at || r.numel < 0 || r.offset + r.numel > numel)
      fail("optimizer: no-decay range [{}, {}) overlaps another or lies outside the group's {} elements", r.offset,
           r.offset + r.numel, numel);
    if (r.numel == 0) continue;
    if (r.offset > at) cuts.push_back({at, true});
    if (!cuts.empty() && !cuts.back().second && at == r.offset) at = r.offset + r.numel;  // adjoins the last
    else cuts.push_back({r.offset, false}), at = r.offset + r.numel;
  }
  if (at < numel || cuts.empty()) cuts.push_back({at, true});
  std::vector<Run> runs;
  for (size_t i = 0; i < cuts.size(); ++i) {
    Run r{cuts[i].first, i + 1 < cuts.size() ? cuts[i + 1].first : numel, cuts[i].second, {0}};
    for (int64_t b : bounds)
      if (b > r.begin && b < r.end) r.bounds.push_back(b - r.begin);
    r.bounds.push_back(r.end - r.begin);
    runs.push_back(std::move(r));
  }
  return runs;
}

void check_beta(const char* what, double b) {
  if (!(b >= 0.0 && b < 1.0)) fail("optimizer: {} must be in [0, 1), got {}", what, b);
}

class OptimizerBase : public Optimizer {
 public:
  OptimizerBase(const config::OptimizerConfig& config, Device& device) : p_(config.params), device_(device) {}

  double base_lr() const override { return p_.lr; }
  int64_t state_bytes_per_element() const override {
    return 4 * static_cast<int64_t>(initial_state_names().size());
  }

  int add_group(int64_t numel, std::vector<Segment> segments) override {
    return add_group_on(device_, numel, std::move(segments));
  }

  int add_group_on(Device& device, int64_t numel, std::vector<Segment> segments) override {
    Group g = new_group(numel, std::move(segments), false);
    g.device = &device;
    g.math = &kernels::math_of(device);
    for (const std::string& name : initial_state_names()) add_state(g, name);
    init_state(g);
    groups_.push_back(std::move(g));
    return static_cast<int>(groups_.size()) - 1;
  }

  std::vector<std::string> state_names() const override { return initial_state_names(); }

  int add_external_group(int64_t numel, std::vector<Segment> segments) override {
    Group g = new_group(numel, std::move(segments), true);
    g.math = &kernels::cpu_math();  // the caller's arrays are host memory
    g.names = initial_state_names();
    g.data.assign(g.names.size(), nullptr);
    groups_.push_back(std::move(g));
    return static_cast<int>(groups_.size()) - 1;
  }

  void bind_state(int group, const std::vector<float*>& state, bool initialise) override {
    Group& g = at(group);
    if (!g.external) fail("optimizer {}: group {} owns its state; only external groups are bound", name(), group);
    DSCPP_CHECK_EQ(state.size(), g.names.size());
    g.data = state;
    if (!initialise) return;
    for (float* d : g.data) g.math->fill(d, 0.0f, g.numel);
    init_state(g);
  }

  void exclude_from_weight_decay(int group, std::vector<Segment> ranges) override {
    Group& g = at(group);
    g.runs = runs_of(g.bounds, g.numel, std::move(ranges));
  }

  void step(int group, float* w, const float* grad, const StepOverrides& overrides) override {
    Group& g = at(group);
    double lr = overrides.lr.value_or(p_.lr);
    if (!(lr >= 0.0) || !std::isfinite(lr))
      fail("optimizer {}: learning rate must be finite and >= 0, got {}", name(), lr);
    double momentum = overrides.momentum.value_or(base_momentum());
    beta2_ = overrides.beta2.value_or(p_.betas.size() > 1 ? p_.betas[1] : 0.0);
    ++g.steps;
    if (g.numel == 0) return;
    // Without weight decay the runs differ in nothing: one call over the group.
    if (p_.weight_decay == 0 || g.runs.size() == 1) {
      update(g, g.whole, w, grad, lr, momentum, p_.weight_decay);
    } else {
      for (const Run& r : g.runs)
        update(g, r, w + r.begin, grad + r.begin, lr, momentum, r.decay ? p_.weight_decay : 0.0);
    }
    after_step(g, momentum);
  }

  std::vector<StateTensor> state(int group) override {
    Group& g = at(group);
    std::vector<StateTensor> out;
    for (size_t i = 0; i < g.names.size(); ++i) out.push_back({g.names[i], g.data[i], g.numel});
    return out;
  }

  int64_t step_count(int group) const override { return at(group).steps; }

  void set_step_count(int group, int64_t steps) override {
    if (steps < 0) fail("optimizer: step count must be >= 0, got {}", steps);
    Group& g = at(group);
    g.steps = steps;
    g.momentum_started = steps > 0 && find_state(g, "momentum_buffer") != nullptr;
  }

 protected:
  virtual std::vector<std::string> initial_state_names() const = 0;
  virtual void init_state(Group&) {}
  // One update of elements [r.begin, r.end) of the group: `w` and `grad` already point at
  // r.begin, the state arrays at state(g, i, r).
  virtual void update(Group& g, const Run& r, float* w, const float* grad, double lr, double momentum,
                      double weight_decay) = 0;
  virtual void after_step(Group&, double /*momentum*/) {}
  static float* state_at(const Group& g, size_t i, const Run& r) { return g.data[i] + r.begin; }

  Group new_group(int64_t numel, std::vector<Segment> segments, bool external) {
    if (numel < 0) fail("optimizer: group size must be >= 0, got {}", numel);
    Group g;
    g.numel = numel;
    g.bounds = segment_bounds(numel, std::move(segments));
    g.runs = runs_of(g.bounds, numel, {});
    g.whole = g.runs.front();
    g.external = external;
    return g;
  }
  float* add_state(Group& g, const std::string& name) {
    if (g.external)
      fail("optimizer {}: state '{}' would be created during training, but this group's state lives outside the "
           "optimizer (optimizer offload), whose state set is fixed at the start; configure a non-zero momentum "
           "from the start or do not offload the optimizer",
           this->name(), name);
    size_t bytes = static_cast<size_t>(std::max<int64_t>(g.numel, 1)) * sizeof(float);
    g.owned.emplace_back(*g.device, bytes, MemCategory::optimizer_state, /*zero=*/true);
    g.names.push_back(name);
    g.data.push_back(g.owned.back().as<float>());
    return g.data.back();
  }
  static float* find_state(Group& g, const std::string& name) {
    for (size_t i = 0; i < g.names.size(); ++i)
      if (g.names[i] == name) return g.data[i];
    return nullptr;
  }
  Group& at(int group) {
    if (group < 0 || group >= static_cast<int>(groups_.size()))
      fail("optimizer: no parameter group {} ({} registered)", group, groups_.size());
    return groups_[static_cast<size_t>(group)];
  }
  const Group& at(int group) const { return const_cast<OptimizerBase*>(this)->at(group); }

  OptimizerParams p_;
  double beta2_ = 0;  // this step's beta2 (the configured one unless a schedule overrides it)
  Device& device_;
  std::vector<Group> groups_;
};

// ---- Adam / AdamW (DeepSpeed CPU Adam) --------------------------------------------------------
class Adam final : public OptimizerBase {
 public:
  Adam(const config::OptimizerConfig& config, Device& device)
      : OptimizerBase(config, device), decoupled_(config.decoupled_weight_decay()) {}
  std::string name() const override { return decoupled_ ? "adamw" : "adam"; }
  double base_momentum() const override { return p_.betas[0]; }

 protected:
  std::vector<std::string> initial_state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  void update(Group& g, const Run& r, float* w, const float* grad, double lr, double beta1, double wd) override {
    check_beta("beta1", beta1);
    auto c = kernels::adam_coeffs(lr, beta1, beta2_, p_.eps, wd, p_.bias_correction, decoupled_, g.steps);
    g.math->adam_step(w, grad, state_at(g, 0, r), state_at(g, 1, r), r.end - r.begin, c);
  }

 private:
  bool decoupled_;
};

// ---- LAMB (DeepSpeed FusedLamb) -------------------------------------------------------------
class Lamb final : public OptimizerBase {
 public:
  using OptimizerBase::OptimizerBase;
  std::string name() const override { return "lamb"; }
  double base_momentum() const override { return p_.betas[0]; }

 protected:
  std::vector<std::string> initial_state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  void update(Group& g, const Run& r, float* w, const float* grad, double lr, double beta1, double wd) override {
    check_beta("beta1", beta1);
    auto c = kernels::lamb_coeffs(beta1, beta2_, p_.eps, wd, p_.eps_inside_sqrt);
    double step_size = kernels::lamb_step_size(lr, beta1, beta2_, p_.bias_correction, g.steps);
    g.math->lamb_step(w, grad, state_at(g, 0, r), state_at(g, 1, r), r.bounds, c, step_size, p_.min_coeff,
                      p_.max_coeff);
  }
};

// ---- SGD (torch.optim.SGD) ------------------------------------------------------------------
class Sgd final : public OptimizerBase {
 public:
  using OptimizerBase::OptimizerBase;
  std::string name() const override { return "sgd"; }
  double base_momentum() const override { return p_.momentum; }

 protected:
  // The buffer exists from the start when momentum is configured; otherwise it is created the
  // first time a scheduler's momentum override makes momentum non-zero (torch: buf is None).
  std::vector<std::string> initial_state_names() const override {
    return p_.momentum != 0 ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{};
  }
  void update(Group& g, const Run& r, float* w, const float* grad, double lr, double momentum, double wd) override {
    if (momentum < 0) fail("optimizer sgd: momentum must be >= 0, got {}", momentum);
    float* buf = nullptr;
    if (momentum != 0) {
      buf = find_state(g, "momentum_buffer");
      if (!buf) buf = add_state(g, "momentum_buffer");
      buf += r.begin;
    }
    bool first = momentum != 0 && !g.momentum_started;
    auto c = kernels::sgd_coeffs(lr, momentum, p_.dampening, wd, p_.nesterov, p_.maximize, first);
    g.math->sgd_step(w, grad, buf, r.end - r.begin, c);
  }
  void after_step(Group& g, double momentum) override {
    if (momentum != 0) g.momentum_started = true;
  }
};

// ---- Adagrad (torch.optim.Adagrad) ------------------------------------------------------------
class Adagrad final : public OptimizerBase {
 public:
  using OptimizerBase::OptimizerBase;
  std::string name() const override { return "adagrad"; }
  double base_momentum() const override { return 0.0; }

 protected:
  std::vector<std::string> initial_state_names() const override { return {"sum"}; }
  void init_state(Group& g) override {
    if (p_.initial_accumulator_value != 0)
      g.math->fill(g.data[0], static_cast<float>(p_.initial_accumulator_value), g.numel);
  }
  void update(Group& g, const Run& r, float* w, const float* grad, double lr, double, double wd) override {
    auto c = kernels::adagrad_coeffs(lr, p_.lr_decay, p_.eps, wd, p_.maximize, g.steps);
    g.math->adagrad_step(w, grad, state_at(g, 0, r), r.end - r.begin, c);
  }
};

// ---- Lion (DeepSpeed) -----------------------------------------------------------------------
class Lion final : public OptimizerBase {
 public:
  using OptimizerBase::OptimizerBase;
  std::string name() const override { return "lion"; }
  double base_momentum() const override { return p_.betas[0]; }

 protected:
  std::vector<std::string> initial_state_names() const override { return {"exp_avg"}; }
  void update(Group& g, const Run& r, float* w, const float* grad, double lr, double beta1, double wd) override {
    check_beta("beta1", beta1);
    auto c = kernels::lion_coeffs(lr, beta1, beta2_, wd);
    g.math->lion_step(w, grad, state_at(g, 0, r), r.end - r.begin, c);
  }
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const config::OptimizerConfig& config, Device& device) {
  switch (config.kind) {
    case OptimizerKind::adam:
    case OptimizerKind::adamw:
      return std::make_unique<Adam>(config, device);
    case OptimizerKind::lamb:
      return std::make_unique<Lamb>(config, device);
    case OptimizerKind::sgd:
      return std::make_unique<Sgd>(config, device);
    case OptimizerKind::adagrad:
      return std::make_unique<Adagrad>(config, device);
    case OptimizerKind::lion:
      return std::make_unique<Lion>(config, device);
    default:
      break;
  }
  fail("optimizer type '{}' is not supported by dscpp; supported: {}", config.type.empty() ? "?" : config.type,
       kSupported);
}

}  // namespace dscpp::runtime
