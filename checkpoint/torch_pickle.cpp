// The restricted unpickler. Opcodes follow CPython's Lib/pickle.py (_Unpickler) and
// pickletools' descriptions; what it refuses, it refuses naming the opcode or the global and the
// byte where the pickle has it. Only the top-level dict of the result is walked, so nothing
// recurses over the pickle's values.
#include "checkpoint/torch_pickle.h"

#include "checkpoint/zip_reader.h"
#include "core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <unordered_map>

namespace dscpp::ckpt {

void BytesInput::read(void* dst, size_t n) {
  if (n > bytes_.size() - pos_)
    fail("{}: the pickle ends before its STOP opcode (truncated file?): {} bytes wanted at byte {} of {}", where_, n,
         pos_, bytes_.size());
  std::memcpy(dst, bytes_.data() + pos_, n);
  pos_ += n;
}

FileInput::FileInput(int fd, std::string path, uint64_t start, uint64_t file_size)
    : fd_(fd), path_(std::move(path)), pos_(start), size_(file_size) {}

void FileInput::read(void* dst, size_t n) {
  if (n > size_ - pos_)
    fail("{}: the file ends inside a pickle (truncated file?): {} bytes wanted at byte {} of {}", path_, n, pos_,
         size_);
  char* out = static_cast<char*>(dst);
  while (n > 0) {
    if (pos_ < buf_at_ || pos_ >= buf_at_ + buf_.size()) {
      buf_.resize(static_cast<size_t>(std::min<uint64_t>(64 << 10, size_ - pos_)));
      pread_exact(fd_, path_, "a pickle", buf_.data(), buf_.size(), pos_);
      buf_at_ = pos_;
    }
    const size_t take = std::min<size_t>(n, static_cast<size_t>(buf_at_ + buf_.size() - pos_));
    std::memcpy(out, buf_.data() + (pos_ - buf_at_), take);
    out += take, pos_ += take, n -= take;
  }
}

namespace {

enum class Kind : uint8_t {
  none,
  boolean,
  integer,
  big_integer,
  floating,
  str,
  bytes,
  tuple,
  list,
  dict,
  global,
  storage,
  tensor
};

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::none:
      return "None";
    case Kind::boolean:
      return "bool";
    case Kind::integer:
    case Kind::big_integer:
      return "int";
    case Kind::floating:
      return "float";
    case Kind::str:
      return "str";
    case Kind::bytes:
      return "bytes";
    case Kind::tuple:
      return "tuple";
    case Kind::list:
      return "list";
    case Kind::dict:
      return "dict";
    case Kind::global:
      return "global";
    case Kind::storage:
      return "storage";
    case Kind::tensor:
      return "tensor";
  }
  return "?";
}

// The globals a state dict names. Nothing else resolves.
enum class Fn : uint8_t {
  ordered_dict,
  rebuild_tensor,
  rebuild_tensor_v2,
  rebuild_parameter,
  rebuild_parameter_with_state,
  storage_type,
  dtype
};

struct Obj {
  Kind kind = Kind::none;
  int64_t i = 0;  // bool, int; global: its Fn; storage: index of the key; tensor: index into built
  double f = 0;
  std::string s;            // str, bytes, big int (little-endian two's complement), global ("module.name")
  std::vector<Obj*> items;  // tuple, list; dict: key, value, key, value, ...
  size_t type = 0;          // storage type (global of a storage type: the same) as an index into kTypes
  int64_t view = 0;         // storage: elements its legacy view starts into the key's storage
};

// torch's typed storage classes; those dscpp reads as weights carry a DType.
struct TypeRow {
  const char* cls;
  const char* name;
  size_t size;
  std::optional<DType> dtype;
};
const TypeRow kTypes[] = {
    {"FloatStorage", "torch.float32", 4, DType::f32},
    {"HalfStorage", "torch.float16", 2, DType::f16},
    {"BFloat16Storage", "torch.bfloat16", 2, DType::bf16},
    {"DoubleStorage", "torch.float64", 8, DType::f64},
    {"LongStorage", "torch.int64", 8, {}},
    {"IntStorage", "torch.int32", 4, {}},
    {"ShortStorage", "torch.int16", 2, {}},
    {"CharStorage", "torch.int8", 1, {}},
    {"ByteStorage", "torch.uint8", 1, {}},
    {"BoolStorage", "torch.bool", 1, {}},
    {"ComplexFloatStorage", "torch.complex64", 8, {}},
    {"ComplexDoubleStorage", "torch.complex128", 16, {}},
    {"QInt8Storage", "torch.qint8", 1, {}},
    {"QUInt8Storage", "torch.quint8", 1, {}},
    {"QInt32Storage", "torch.qint32", 4, {}},
    {"QUInt4x2Storage", "torch.quint4x2", 1, {}},
    {"QUInt2x4Storage", "torch.quint2x4", 1, {}},
};
const char* const kDtypes[] = {"float32", "float", "float16", "half",  "bfloat16", "float64", "double", "int64",
                               "long",    "int32", "int",     "int16", "short",    "int8",    "uint8",  "bool"};

TorchType torch_type(size_t row) {
  return TorchType{kTypes[row].name, kTypes[row].size, kTypes[row].dtype};
}

constexpr size_t kMaxDims = 64;
constexpr size_t kMaxLine = 256;          // a GLOBAL's module or name
constexpr uint64_t kMaxOps = 1ull << 26;  // a state dict of 100k tensors takes ~3M

class Unpickler {
 public:
  // `out` null: a pickle of plain values, with no globals or persistent ids (legacy headers).
  Unpickler(PickleInput& in, const std::string& where, StateDict* out) : in_(in), where_(where), out_(out) {}

  Obj* run() {
    for (uint64_t ops = 0;; ++ops) {
      at_ = in_.position();
      if (ops == kMaxOps) bad("more than {} opcodes, far more than a state dict has", kMaxOps);
      const uint8_t op = u8();
      // One line an opcode, as pickletools lists them.
      switch (op) {
        case 0x80: u8(); break;                                                     // PROTO
        case 0x95: uint(8); break;                                                  // FRAME: a length, for buffering
        case '.': return pop();                                                     // STOP
        case '(': marks_.push_back(stack_.size()); break;                           // MARK
        case '}': push(make(Kind::dict)); break;                                    // EMPTY_DICT
        case ']': push(make(Kind::list)); break;                                    // EMPTY_LIST
        case ')': push(make(Kind::tuple)); break;                                   // EMPTY_TUPLE
        case 't': push(sequence(Kind::tuple, pop_mark())); break;                   // TUPLE
        case 'l': push(sequence(Kind::list, pop_mark())); break;                    // LIST
        case 'd': push(set_items(make(Kind::dict), pop_mark())); break;             // DICT
        case 0x85: case 0x86: case 0x87: push(small_tuple(op - 0x84u)); break;      // TUPLE1, TUPLE2, TUPLE3
        case 'a': append(pop_n(1)); break;                                          // APPEND
        case 'e': append(pop_mark()); break;                                        // APPENDS
        case 's': set_items(pop_n(2)); break;                                       // SETITEM
        case 'u': set_items(pop_mark()); break;                                     // SETITEMS
        case 'J': push(integer(static_cast<int32_t>(uint(4)))); break;              // BININT
        case 'K': push(integer(u8())); break;                                       // BININT1
        case 'M': push(integer(static_cast<int64_t>(uint(2)))); break;              // BININT2
        case 0x8a: push(long_int(u8())); break;                                     // LONG1
        case 0x8b: push(long_int(length(4, true))); break;                          // LONG4
        case 'G': push(binfloat()); break;                                          // BINFLOAT
        case 'N': push(make(Kind::none)); break;                                    // NONE
        case 0x88: case 0x89: push(boolean(op == 0x88)); break;                     // NEWTRUE, NEWFALSE
        case 'X': push(text(Kind::str, length(4, false))); break;                   // BINUNICODE
        case 0x8c: push(text(Kind::str, u8())); break;                              // SHORT_BINUNICODE
        case 0x8d: push(text(Kind::str, length(8, false))); break;                  // BINUNICODE8
        case 'T': push(text(Kind::str, length(4, true))); break;                    // BINSTRING (Python 2)
        case 'U': push(text(Kind::str, u8())); break;                               // SHORT_BINSTRING
        case 'B': push(text(Kind::bytes, length(4, false))); break;                 // BINBYTES
        case 'C': push(text(Kind::bytes, u8())); break;                             // SHORT_BINBYTES
        case 0x8e: push(text(Kind::bytes, length(8, false))); break;                // BINBYTES8
        case 'q': put(u8()); break;                                                 // BINPUT
        case 'r': put(uint(4)); break;                                              // LONG_BINPUT
        case 0x94: put(memo_.size()); break;                                        // MEMOIZE
        case 'h': push(memo(u8())); break;                                          // BINGET
        case 'j': push(memo(uint(4))); break;                                       // LONG_BINGET
        case 'c': push(global_line()); break;                                       // GLOBAL
        case 0x93: push(stack_global()); break;                                     // STACK_GLOBAL
        case 'R': { Obj* args = pop(); Obj* fn = pop(); push(reduce(fn, args)); break; }  // REDUCE
        case 'b': build(pop()); break;                                              // BUILD
        case 'Q': push(persistent(pop())); break;                                   // BINPERSID
        case '0': pop(); break;                                                     // POP
        case '1': pop_mark(); break;                                                // POP_MARK
        case '2': push(top()); break;                                               // DUP
        case 0x81: case 0x92: case 'i': case 'o': refuse_class(op); break;          // NEWOBJ(_EX), INST, OBJ
        default:
          bad("opcode 0x{:02x}{} is not one torch.save writes for a state dict (not a torch file, or damaged)", op,
              op >= 0x20 && op < 0x7f ? fmt::format(" ('{}')", static_cast<char>(op)) : std::string());
      }
    }
  }

  const std::vector<PickledTensor>& built() const { return built_; }

 private:
  template <typename... Args>
  [[noreturn]] void bad(fmt::format_string<Args...> format, Args&&... args) const {
    fail("{}: {} (pickle byte {})", where_, fmt::format(format, std::forward<Args>(args)...), at_);
  }

  Obj* make(Kind k) {
    arena_.emplace_back();
    arena_.back().kind = k;
    return &arena_.back();
  }
  Obj* boolean(bool v) {
    Obj* o = make(Kind::boolean);
    o->i = v;
    return o;
  }
  Obj* binfloat() {  // big-endian
    const uint64_t bits = __builtin_bswap64(uint(8));
    Obj* o = make(Kind::floating);
    std::memcpy(&o->f, &bits, sizeof bits);
    return o;
  }
  Obj* integer(int64_t v) {
    Obj* o = make(Kind::integer);
    o->i = v;
    return o;
  }
  uint8_t u8() {
    uint8_t b;
    in_.read(&b, 1);
    return b;
  }
  uint64_t uint(size_t n) {  // little-endian
    unsigned char b[8] = {};
    in_.read(b, n);
    uint64_t v = 0;
    for (size_t k = 0; k < n; ++k) v |= static_cast<uint64_t>(b[k]) << (8 * k);
    return v;
  }
  // A length field, checked against the input left before anything is allocated for it.
  uint64_t length(size_t n, bool is_signed) {
    const uint64_t v = uint(n);
    if (is_signed && (v >> 31) & 1) bad("negative length");
    if (v > in_.remaining()) bad("a length of {} bytes, more than the {} left (truncated file?)", v, in_.remaining());
    return v;
  }
  Obj* text(Kind k, uint64_t n) {
    if (n > in_.remaining()) bad("a length of {} bytes, more than the {} left (truncated file?)", n, in_.remaining());
    Obj* o = make(k);
    o->s.resize(n);
    in_.read(o->s.data(), n);
    return o;
  }
  Obj* long_int(uint64_t n) {
    if (n > 8) return text(Kind::big_integer, n);  // only compared (the legacy magic number)
    unsigned char b[8] = {};
    in_.read(b, n);
    uint64_t v = 0;
    for (size_t k = 0; k < n; ++k) v |= static_cast<uint64_t>(b[k]) << (8 * k);
    if (n > 0 && n < 8 && (b[n - 1] & 0x80)) v |= ~uint64_t{0} << (8 * n);  // sign-extend
    return integer(static_cast<int64_t>(v));
  }
  std::string line() {
    std::string s;
    for (char c; (c = static_cast<char>(u8())) != '\n';) {
      if (s.size() == kMaxLine) bad("GLOBAL names longer than {} characters", kMaxLine);
      s += c;
    }
    return s;
  }

  size_t fence() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(Obj* o) { stack_.push_back(o); }
  Obj* top() const {
    if (stack_.size() <= fence()) bad("the stack is empty where a value is expected");
    return stack_.back();
  }
  Obj* pop() {
    Obj* o = top();
    stack_.pop_back();
    return o;
  }
  std::vector<Obj*> pop_mark() {
    if (marks_.empty()) bad("an opcode takes the items above a MARK, and there is none");
    std::vector<Obj*> items(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  std::vector<Obj*> pop_n(size_t n) {
    if (stack_.size() < fence() + n)
      bad("an opcode takes {} item(s), and the stack has {}", n, stack_.size() - fence());
    std::vector<Obj*> items(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
    stack_.resize(stack_.size() - n);
    return items;
  }
  Obj* container(Kind k, const char* op) {
    Obj* c = top();
    if (c->kind != k) bad("{} on a {}, not a {}", op, kind_name(c->kind), kind_name(k));
    return c;
  }
  Obj* sequence(Kind k, std::vector<Obj*> items) {
    Obj* o = make(k);
    o->items = std::move(items);
    return o;
  }
  Obj* small_tuple(size_t n) { return sequence(Kind::tuple, pop_n(n)); }
  // The items are popped before the list or dict under them is looked at.
  void append(const std::vector<Obj*>& items) {
    auto& list = container(Kind::list, "APPEND")->items;
    list.insert(list.end(), items.begin(), items.end());
  }
  Obj* set_items(Obj* dict, const std::vector<Obj*>& kv) {
    if (kv.size() % 2) bad("an odd number of items ({}) for a dict's keys and values", kv.size());
    dict->items.insert(dict->items.end(), kv.begin(), kv.end());
    return dict;
  }
  void set_items(const std::vector<Obj*>& kv) { set_items(container(Kind::dict, "SETITEM(S)"), kv); }
  void put(uint64_t key) { memo_[key] = top(); }
  Obj* memo(uint64_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) bad("memo entry {} is read before it is written", key);
    return it->second;
  }

  Obj* global_line() {
    const std::string module = line();
    return global(module, line());
  }
  Obj* stack_global() {
    Obj* name = pop();
    Obj* module = pop();
    if (module->kind != Kind::str || name->kind != Kind::str) bad("STACK_GLOBAL of a non-string");
    return global(module->s, name->s);
  }
  // An OrderedDict's attributes (a state dict's _metadata), a parameter's state: kept nowhere.
  void build(Obj*) {
    if (top()->kind != Kind::dict && top()->kind != Kind::tensor)
      bad("BUILD sets the state of a {}; only a dict's or a tensor's is expected", kind_name(top()->kind));
  }
  [[noreturn]] void refuse_class(uint8_t op) {
    bad("opcode {} builds an object of a class, which a state dict never needs; dscpp does not run code from a "
        "pickle",
        op == 0x81   ? "NEWOBJ"
        : op == 0x92 ? "NEWOBJ_EX"
        : op == 'i'  ? "INST"
                     : "OBJ");
  }

  Obj* global(const std::string& module, const std::string& name) {
    const std::string full = module + "." + name;
    auto refuse = [&] {
      bad("the pickle names the global '{}', which a state dict never needs; dscpp reads only tensors, OrderedDict "
          "and torch's storage types and dtypes, and runs no code from a pickle (the file may be malicious, or hold "
          "more than weights)",
          full);
    };
    if (!out_) refuse();
    Obj* o = make(Kind::global);
    o->s = full;
    if (module == "collections" && name == "OrderedDict") {
      o->i = static_cast<int64_t>(Fn::ordered_dict);
    } else if (module == "torch._utils" && name == "_rebuild_tensor") {
      o->i = static_cast<int64_t>(Fn::rebuild_tensor);
    } else if (module == "torch._utils" && name == "_rebuild_tensor_v2") {
      o->i = static_cast<int64_t>(Fn::rebuild_tensor_v2);
    } else if (module == "torch._utils" && name == "_rebuild_parameter") {
      o->i = static_cast<int64_t>(Fn::rebuild_parameter);
    } else if (module == "torch._utils" && name == "_rebuild_parameter_with_state") {
      o->i = static_cast<int64_t>(Fn::rebuild_parameter_with_state);
    } else if (module == "torch") {
      auto row = std::find_if(std::begin(kTypes), std::end(kTypes), [&](const TypeRow& t) { return name == t.cls; });
      if (row != std::end(kTypes)) {
        o->i = static_cast<int64_t>(Fn::storage_type);
        o->type = static_cast<size_t>(row - std::begin(kTypes));
      } else if (std::find(std::begin(kDtypes), std::end(kDtypes), name) != std::end(kDtypes)) {
        o->i = static_cast<int64_t>(Fn::dtype);
      } else {
        refuse();
      }
    } else {
      refuse();
    }
    return o;
  }

  // ('storage', torch.<T>Storage, key, location, numel[, view_metadata]): torch's persistent_id.
  Obj* persistent(Obj* pid) {
    if (!out_) bad("a persistent id where the pickle should hold plain values");
    const auto& p = pid->items;
    if (pid->kind != Kind::tuple || p.size() < 5 || p.size() > 6 || p[0]->kind != Kind::str || p[0]->s != "storage")
      bad("a persistent id that is not torch's ('storage', type, key, location, size[, view])");
    if (p[1]->kind != Kind::global || p[1]->i != static_cast<int64_t>(Fn::storage_type))
      bad("a persistent id whose storage type is a {}, not one of torch's storage classes", kind_name(p[1]->kind));
    std::string key;
    if (p[2]->kind == Kind::str)
      key = p[2]->s;
    else if (p[2]->kind == Kind::integer)
      key = std::to_string(p[2]->i);
    else
      bad("a persistent id whose key is a {}", kind_name(p[2]->kind));
    if (p[4]->kind != Kind::integer || p[4]->i < 0) bad("a persistent id whose size is not a non-negative int");
    Obj* o = make(Kind::storage);
    o->type = p[1]->type;
    if (p.size() == 6 && p[5]->kind != Kind::none) {  // legacy: a view into the key's storage
      const auto& v = p[5]->items;
      if (p[5]->kind != Kind::tuple || v.size() != 3 || v[1]->kind != Kind::integer || v[1]->i < 0)
        bad("a storage view that is not (key, offset, size)");
      o->view = v[1]->i;
    }
    auto [it, fresh] = keys_.emplace(key, out_->storages.size());
    if (fresh) out_->storages.push_back(StorageRef{key, torch_type(o->type), p[4]->i});
    o->i = static_cast<int64_t>(it->second);
    return o;
  }

  std::vector<int64_t> ints(Obj* t, const char* what) {
    if (t->kind != Kind::tuple && t->kind != Kind::list)
      bad("a tensor's {} is a {}, not a tuple", what, kind_name(t->kind));
    if (t->items.size() > kMaxDims) bad("a tensor's {} has {} dimensions", what, t->items.size());
    std::vector<int64_t> v;
    for (Obj* e : t->items) {
      if (e->kind != Kind::integer || e->i < 0) bad("a tensor's {} holds something not a non-negative int", what);
      v.push_back(e->i);
    }
    return v;
  }

  Obj* reduce(Obj* fn, Obj* args) {
    if (fn->kind != Kind::global) bad("REDUCE calls a {} value, not a function", kind_name(fn->kind));
    if (args->kind != Kind::tuple)
      bad("REDUCE calls {} with a {} of arguments, not a tuple", fn->s, kind_name(args->kind));
    const auto& a = args->items;
    switch (static_cast<Fn>(fn->i)) {
      case Fn::ordered_dict:
        if (!a.empty()) bad("collections.OrderedDict called with arguments");
        return make(Kind::dict);
      case Fn::rebuild_parameter:
      case Fn::rebuild_parameter_with_state:
        if (a.size() != (static_cast<Fn>(fn->i) == Fn::rebuild_parameter ? 3u : 4u) || a[0]->kind != Kind::tensor)
          bad("{} called with arguments other than (tensor, requires_grad, hooks[, state])", fn->s);
        return a[0];
      case Fn::rebuild_tensor:
      case Fn::rebuild_tensor_v2: {
        const bool v2 = static_cast<Fn>(fn->i) == Fn::rebuild_tensor_v2;
        if (v2 ? a.size() < 6 || a.size() > 7 : a.size() != 4) bad("{} called with {} arguments", fn->s, a.size());
        if (a[0]->kind != Kind::storage) bad("{} called on a {}, not a storage", fn->s, kind_name(a[0]->kind));
        if (a[1]->kind != Kind::integer || a[1]->i < 0)
          bad("{} called with a storage offset that is not an int >= 0", fn->s);
        PickledTensor t;
        t.storage = static_cast<size_t>(a[0]->i);
        t.type = torch_type(a[0]->type);
        t.shape = ints(a[2], "size");
        t.stride = ints(a[3], "stride");
        if (t.shape.size() != t.stride.size())
          bad("a tensor with {} sizes and {} strides", t.shape.size(), t.stride.size());
        // Elements past the offset the tensor can touch, checked for overflow; the file's reader
        // checks them against the storage's bytes.
        constexpr int64_t kMax = std::numeric_limits<int64_t>::max() / 16;
        if (a[1]->i > kMax - a[0]->view) bad("a storage offset out of range");
        t.offset = a[1]->i + a[0]->view;
        int64_t numel = 1, last = t.offset;
        for (size_t d = 0; d < t.shape.size(); ++d) {
          if (t.shape[d] != 0 && numel > kMax / t.shape[d]) bad("a tensor size that overflows");
          numel *= t.shape[d];
          if (t.shape[d] > 0 && t.stride[d] > 0 && (t.shape[d] - 1) > (kMax - last) / t.stride[d])
            bad("a tensor stride out of range");
          if (t.shape[d] > 0) last += (t.shape[d] - 1) * t.stride[d];
        }
        Obj* o = make(Kind::tensor);
        o->i = static_cast<int64_t>(built_.size());
        built_.push_back(std::move(t));
        return o;
      }
      case Fn::storage_type:
      case Fn::dtype:
        break;
    }
    bad("REDUCE calls {}, which a state dict never calls; dscpp runs no code from a pickle", fn->s);
  }

  PickleInput& in_;
  const std::string& where_;
  StateDict* out_;
  uint64_t at_ = 0;
  std::deque<Obj> arena_;
  std::vector<Obj*> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Obj*> memo_;
  std::map<std::string, size_t> keys_;  // storage key → index into out_->storages
  std::vector<PickledTensor> built_;
};

}  // namespace

StateDict unpickle_state_dict(PickleInput& in, const std::string& where) {
  StateDict out;
  Unpickler u(in, where, &out);
  const Obj* root = u.run();
  if (root->kind != Kind::dict)
    fail(
        "{}: the pickle holds a {}, not a state dict (a dict of name → tensor, as torch.save(model.state_dict()) "
        "writes)",
        where, kind_name(root->kind));
  std::map<std::string, size_t> index;  // name → position in out.tensors
  std::vector<std::string> others;
  for (size_t k = 0; k + 1 < root->items.size(); k += 2) {
    const Obj* key = root->items[k];
    const Obj* value = root->items[k + 1];
    if (value->kind != Kind::tensor) {
      if (key->kind == Kind::str) others.push_back(key->s);
      continue;
    }
    if (key->kind != Kind::str)
      fail("{}: a tensor of the state dict is named by a {}, not a str", where, kind_name(key->kind));
    PickledTensor t = u.built()[static_cast<size_t>(value->i)];
    t.name = key->s;
    auto [it, fresh] = index.emplace(key->s, out.tensors.size());
    if (fresh)
      out.tensors.push_back(std::move(t));
    else
      out.tensors[it->second] = std::move(t);
  }
  if (out.tensors.empty()) {
    std::string keys;
    for (size_t k = 0; k < others.size() && k < 8; ++k) keys += (k ? ", '" : "'") + others[k] + "'";
    fail(
        "{}: the pickle's dict holds no tensors{}; dscpp reads a state dict, name → tensor, as "
        "torch.save(model.state_dict()) and save_pretrained write it",
        where, keys.empty() ? std::string() : " (its keys: " + keys + (others.size() > 8 ? ", ...)" : ")"));
  }
  return out;
}

void unpickle_legacy_header(PickleInput& in, const std::string& where) {
  // torch.serialization's MAGIC_NUMBER 0x1950a86a20f9469cfc6c, as LONG1 writes it.
  static const std::string kMagic("\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 10);
  // Each result lives in its unpickler's arena.
  Unpickler first(in, where, nullptr), second(in, where, nullptr), third(in, where, nullptr);
  const Obj* magic = first.run();
  if (magic->kind != Kind::big_integer || magic->s != kMagic)
    fail("{}: not a torch.save file (its first pickle is not torch's magic number)", where);
  const Obj* version = second.run();
  if (version->kind != Kind::integer || version->i != 1001)
    fail("{}: torch.save legacy format of protocol version {}, dscpp reads 1001", where,
         version->kind == Kind::integer ? std::to_string(version->i) : kind_name(version->kind));
  const Obj* info = third.run();
  if (info->kind != Kind::dict)
    fail("{}: the legacy format's sys_info is a {}, not a dict", where, kind_name(info->kind));
  for (size_t k = 0; k + 1 < info->items.size(); k += 2)
    if (info->items[k]->kind == Kind::str && info->items[k]->s == "little_endian" &&
        !(info->items[k + 1]->kind == Kind::boolean && info->items[k + 1]->i == 1))
      fail("{}: saved on a big-endian machine; dscpp reads little-endian files only", where);
}

std::vector<std::string> unpickle_string_list(PickleInput& in, const std::string& where) {
  Unpickler u(in, where, nullptr);
  const Obj* list = u.run();
  if (list->kind != Kind::list && list->kind != Kind::tuple)
    fail("{}: the legacy format's storage keys are a {}, not a list", where, kind_name(list->kind));
  std::vector<std::string> keys;
  for (const Obj* k : list->items) {
    if (k->kind == Kind::str)
      keys.push_back(k->s);
    else if (k->kind == Kind::integer)
      keys.push_back(std::to_string(k->i));
    else
      fail("{}: the legacy format's storage keys hold a {}", where, kind_name(k->kind));
  }
  return keys;
}

}  // namespace dscpp::ckpt
