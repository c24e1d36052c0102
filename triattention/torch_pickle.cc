// The torch.save reader: a pickle virtual machine reduced to what a saved dict of tensors needs.
// Design:
//  - Whitelist, not blacklist. Python's pickle runs whatever GLOBAL + REDUCE name; here a GLOBAL
//    is looked up in a table of nine names and only the interpreter's own code acts on them:
//    OrderedDict() becomes an empty dict, _rebuild_tensor(_v2) a bounds-checked TorchTensor, and
//    a storage type is only accepted inside a persistent id. Every other opcode (INST, OBJ,
//    NEWOBJ, EXT*, PERSID, the text-protocol opcodes, ...) is refused, naming its byte.
//  - Iterative, with explicit limits: the interpreter never recurses, and every structure a hostile
//    pickle could grow (stack, mark stack, memo, values, container slots, string length, tensor
//    rank and size) has a bound whose violation is an error naming it.
//  - Values live in an arena (the checkpoint's object list) and refer to each other by pointer, so
//    memo sharing and even cycles cost nothing and free nothing twice; consumers only walk the
//    few fixed levels they expect.
//  - Storages are zip entries checked against their CRC-32 once, the first time a persistent id
//    names them; tensors are views into them, never copies, until TensorToFloats.
#include "triattention/torch_pickle.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <iterator>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/coding.h"
#include "common/status_macros.h"
#include "triattention/zip_archive.h"

namespace kvtier::triattention {

static_assert(std::endian::native == std::endian::little,
              "torch storages are little-endian and are read in place");

namespace {

// Pickle opcodes this reader implements (Lib/pickle.py names).
enum Opcode : uint8_t {
  kMark = '(',
  kStop = '.',
  kBinInt = 'J',
  kBinInt1 = 'K',
  kBinInt2 = 'M',
  kNone = 'N',
  kBinPersId = 'Q',
  kReduce = 'R',
  kBinUnicode = 'X',
  kEmptyList = ']',
  kAppend = 'a',
  kBuild = 'b',
  kGlobal = 'c',
  kDict = 'd',
  kEmptyDict = '}',
  kAppends = 'e',
  kBinGet = 'h',
  kLongBinGet = 'j',
  kList = 'l',
  kBinPut = 'q',
  kLongBinPut = 'r',
  kSetItem = 's',
  kTuple = 't',
  kEmptyTuple = ')',
  kSetItems = 'u',
  kBinFloat = 'G',
  kBinBytes = 'B',
  kShortBinBytes = 'C',
  kProto = 0x80,
  kTuple1 = 0x85,
  kTuple2 = 0x86,
  kTuple3 = 0x87,
  kNewTrue = 0x88,
  kNewFalse = 0x89,
  kLong1 = 0x8a,
  kShortBinUnicode = 0x8c,
  kBinUnicode8 = 0x8d,
  kMemoize = 0x94,
  kStackGlobal = 0x93,
  kFrame = 0x95,
};

enum class GlobalRole : uint8_t { kOrderedDict, kRebuildTensorV2, kRebuildTensor, kStorageType };

struct WhitelistedGlobal {
  absl::string_view module;
  absl::string_view name;
  GlobalRole role;
  TorchDType dtype;  // kStorageType only
};

constexpr WhitelistedGlobal kWhitelist[] = {
    {"collections", "OrderedDict", GlobalRole::kOrderedDict, TorchDType::kFloat32},
    {"torch._utils", "_rebuild_tensor_v2", GlobalRole::kRebuildTensorV2, TorchDType::kFloat32},
    {"torch._utils", "_rebuild_tensor", GlobalRole::kRebuildTensor, TorchDType::kFloat32},
    {"torch", "FloatStorage", GlobalRole::kStorageType, TorchDType::kFloat32},
    {"torch", "ComplexFloatStorage", GlobalRole::kStorageType, TorchDType::kComplex64},
    {"torch", "BFloat16Storage", GlobalRole::kStorageType, TorchDType::kBFloat16},
    {"torch", "HalfStorage", GlobalRole::kStorageType, TorchDType::kFloat16},
    {"torch", "LongStorage", GlobalRole::kStorageType, TorchDType::kInt64},
    {"torch", "IntStorage", GlobalRole::kStorageType, TorchDType::kInt32},
};

constexpr size_t kMaxGlobalNameBytes = 256;
// Elements of one tensor (a float32 tensor of this size is 1 GiB, the largest calibration file).
constexpr size_t kMaxTensorElements = size_t{1} << 28;

// Checks that `tensor` addresses only elements inside its storage and has at most
// `max_elements` elements.
absl::Status CheckTensorExtent(const TorchTensor& tensor, size_t max_elements) {
  const std::string what = absl::StrCat("tensor on storage '", absl::CHexEscape(tensor.storage_key),
                                        "' (", TorchDTypeName(tensor.dtype), ")");
  if (tensor.shape.size() != tensor.strides.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " has ", tensor.shape.size(), " sizes but ", tensor.strides.size(), " strides"));
  }
  if (tensor.storage_offset < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has negative storage offset ", tensor.storage_offset));
  }
  uint64_t elements = 1;
  for (size_t d = 0; d < tensor.shape.size(); ++d) {
    if (tensor.shape[d] < 0 || tensor.strides[d] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, " has size ", tensor.shape[d],
                                                     " and stride ", tensor.strides[d],
                                                     " in dimension ", d, "; both must be >= 0"));
    }
    const uint64_t size = static_cast<uint64_t>(tensor.shape[d]);
    if (size != 0 && elements > max_elements / size) {
      return absl::InvalidArgumentError(absl::StrCat(what, " has more than ", max_elements,
                                                     " elements (shape [",
                                                     absl::StrJoin(tensor.shape, ", "), "])"));
    }
    elements *= size;
  }
  const uint64_t storage_elements = tensor.storage.size() / TorchDTypeBytes(tensor.dtype);
  const uint64_t offset = static_cast<uint64_t>(tensor.storage_offset);
  const std::string extent_error =
      absl::StrCat(what, " with offset ", offset, ", shape [", absl::StrJoin(tensor.shape, ", "),
                   "] and strides [", absl::StrJoin(tensor.strides, ", "),
                   "] reaches outside its storage of ", storage_elements, " elements");
  if (elements == 0) {
    if (offset > storage_elements) return absl::InvalidArgumentError(extent_error);
    return absl::OkStatus();
  }
  if (offset >= storage_elements) return absl::InvalidArgumentError(extent_error);
  // Last addressed element: offset + sum (size - 1) * stride, which must stay below
  // storage_elements; `room` is what is left, so no product can overflow.
  uint64_t room = storage_elements - 1 - offset;
  for (size_t d = 0; d < tensor.shape.size(); ++d) {
    const uint64_t steps = static_cast<uint64_t>(tensor.shape[d]) - 1;
    const uint64_t stride = static_cast<uint64_t>(tensor.strides[d]);
    if (steps == 0 || stride == 0) continue;
    if (steps > room / stride) return absl::InvalidArgumentError(extent_error);
    room -= steps * stride;
  }
  return absl::OkStatus();
}

class Interpreter {
 public:
  Interpreter(absl::Span<const uint8_t> pickle, const TorchCheckpoint::StorageResolver& storages,
              const PickleLimits& limits, std::vector<std::unique_ptr<PickleValue>>* objects)
      : data_(pickle), storages_(storages), limits_(limits), objects_(objects) {}

  absl::StatusOr<const PickleValue*> Run() {
    KVTIER_ASSIGN_OR_RETURN(none_, NewSingleton(PickleValue::Kind::kNone, false));
    KVTIER_ASSIGN_OR_RETURN(true_, NewSingleton(PickleValue::Kind::kBool, true));
    KVTIER_ASSIGN_OR_RETURN(false_, NewSingleton(PickleValue::Kind::kBool, false));
    while (pos_ < data_.size()) {
      op_pos_ = pos_;
      const uint8_t op = data_[pos_++];
      if (op == kStop) return Finish();
      KVTIER_RETURN_IF_ERROR(Step(op));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("calibration pickle ends after ", data_.size(), " bytes without STOP"));
  }

 private:
  absl::Status Fail(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("calibration pickle, opcode at byte ", op_pos_, ": ", what));
  }

  absl::Status Refuse(absl::string_view thing) const {
    return absl::InvalidArgumentError(absl::StrCat("calibration pickle uses ", thing,
                                                   ", which a calibration file does not need "
                                                   "(at byte ",
                                                   op_pos_, ")"));
  }

  // --- Reading the opcode stream.
  absl::StatusOr<absl::Span<const uint8_t>> Take(uint64_t n, absl::string_view what) {
    if (n > data_.size() - pos_) {
      return Fail(absl::StrCat(what, " needs ", n, " bytes but only ", data_.size() - pos_,
                               " remain (truncated pickle)"));
    }
    absl::Span<const uint8_t> bytes = data_.subspan(pos_, n);
    pos_ += n;
    return bytes;
  }

  absl::StatusOr<uint64_t> TakeLe(size_t n, absl::string_view what) {
    KVTIER_ASSIGN_OR_RETURN(absl::Span<const uint8_t> bytes, Take(n, what));
    return DecodeLittleEndian(bytes.data(), n);
  }

  absl::StatusOr<std::string> TakeLine(absl::string_view what) {
    const size_t limit = std::min(data_.size() - pos_, kMaxGlobalNameBytes + 1);
    for (size_t i = 0; i < limit; ++i) {
      if (data_[pos_ + i] == '\n') {
        std::string line(reinterpret_cast<const char*>(data_.data() + pos_), i);
        pos_ += i + 1;
        return line;
      }
    }
    return Fail(absl::StrCat(what, " has no newline within ", limit, " bytes"));
  }

  // --- Values.
  absl::StatusOr<PickleValue*> NewSingleton(PickleValue::Kind kind, bool value) {
    objects_->push_back(std::make_unique<PickleValue>());
    PickleValue* v = objects_->back().get();
    v->kind = kind;
    v->bool_value = value;
    return v;
  }

  absl::StatusOr<PickleValue*> New(PickleValue::Kind kind) {
    if (++created_ > limits_.max_objects) {
      return Fail(absl::StrCat("more than ", limits_.max_objects, " values"));
    }
    objects_->push_back(std::make_unique<PickleValue>());
    PickleValue* v = objects_->back().get();
    v->kind = kind;
    if (kind == PickleValue::Kind::kDict) v->dict = std::make_unique<PickleDict>();
    return v;
  }

  absl::Status CountItems(size_t n) {
    container_items_ += n;
    if (container_items_ > limits_.max_container_items) {
      return Fail(absl::StrCat("more than ", limits_.max_container_items,
                               " elements in lists, tuples and dicts"));
    }
    return absl::OkStatus();
  }

  absl::Status Push(PickleValue* v) {
    if (stack_.size() >= limits_.max_stack) {
      return Fail(absl::StrCat("stack deeper than ", limits_.max_stack, " values"));
    }
    stack_.push_back(v);
    return absl::OkStatus();
  }

  size_t Floor() const { return marks_.empty() ? 0 : marks_.back(); }

  absl::StatusOr<PickleValue*> Pop() {
    if (stack_.size() <= Floor()) return Fail("pops from an empty stack");
    PickleValue* v = stack_.back();
    stack_.pop_back();
    return v;
  }

  absl::StatusOr<PickleValue*> Top() {
    if (stack_.size() <= Floor()) return Fail("reads the top of an empty stack");
    return stack_.back();
  }

  // The values above the innermost MARK, which is removed.
  absl::StatusOr<std::vector<PickleValue*>> PopToMark() {
    if (marks_.empty()) return Fail("needs a MARK but none is open");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<PickleValue*> items(stack_.begin() + mark, stack_.end());
    stack_.resize(mark);
    return items;
  }

  absl::StatusOr<PickleValue*> MakeSequence(PickleValue::Kind kind,
                                            const std::vector<PickleValue*>& items) {
    KVTIER_RETURN_IF_ERROR(CountItems(items.size()));
    KVTIER_ASSIGN_OR_RETURN(PickleValue * seq, New(kind));
    seq->items.assign(items.begin(), items.end());
    return seq;
  }

  absl::Status SetItem(PickleValue* target, const PickleValue* key, const PickleValue* value) {
    if (target->kind != PickleValue::Kind::kDict) {
      return Fail(absl::StrCat("sets an item on a ", target->KindName(), ", not a dict"));
    }
    KVTIER_RETURN_IF_ERROR(CountItems(1));
    PickleDict& dict = *target->dict;
    const size_t index = dict.entries.size();
    if (key->kind == PickleValue::Kind::kString) {
      if (!dict.string_keys.emplace(key->text, index).second) {
        return Fail(absl::StrCat("dict has the key '", absl::CHexEscape(key->text), "' twice"));
      }
    } else if (key->kind == PickleValue::Kind::kInt) {
      if (!dict.int_keys.emplace(key->int_value, index).second) {
        return Fail(absl::StrCat("dict has the key ", key->int_value, " twice"));
      }
    } else {
      return Fail(absl::StrCat("dict key of type ", key->KindName(),
                               "; only str and int keys are supported"));
    }
    dict.entries.emplace_back(key, value);
    return absl::OkStatus();
  }

  absl::Status Append(PickleValue* target, const std::vector<PickleValue*>& items) {
    if (target->kind != PickleValue::Kind::kList) {
      return Fail(absl::StrCat("appends to a ", target->KindName(), ", not a list"));
    }
    KVTIER_RETURN_IF_ERROR(CountItems(items.size()));
    target->items.insert(target->items.end(), items.begin(), items.end());
    return absl::OkStatus();
  }

  absl::Status PushInt(int64_t value) {
    KVTIER_ASSIGN_OR_RETURN(PickleValue * v, New(PickleValue::Kind::kInt));
    v->int_value = value;
    return Push(v);
  }

  absl::Status PushText(PickleValue::Kind kind, uint64_t length_bytes, absl::string_view what) {
    KVTIER_ASSIGN_OR_RETURN(uint64_t n, TakeLe(length_bytes, what));
    if (n > limits_.max_string_bytes) {
      return Fail(absl::StrCat(what, " of ", n, " bytes is longer than the limit of ",
                               limits_.max_string_bytes));
    }
    KVTIER_ASSIGN_OR_RETURN(absl::Span<const uint8_t> bytes, Take(n, what));
    KVTIER_ASSIGN_OR_RETURN(PickleValue * v, New(kind));
    v->text.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return Push(v);
  }

  absl::Status Memoize(uint64_t index) {
    KVTIER_ASSIGN_OR_RETURN(PickleValue * top, Top());
    if (memo_.size() >= limits_.max_memo && !memo_.contains(index)) {
      return Fail(absl::StrCat("memo grows past ", limits_.max_memo, " entries"));
    }
    memo_[index] = top;
    return absl::OkStatus();
  }

  absl::Status Recall(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) return Fail(absl::StrCat("memo entry ", index, " was never stored"));
    return Push(it->second);
  }

  absl::Status PushGlobal(absl::string_view module, absl::string_view name) {
    for (size_t i = 0; i < std::size(kWhitelist); ++i) {
      if (kWhitelist[i].module == module && kWhitelist[i].name == name) {
        KVTIER_ASSIGN_OR_RETURN(PickleValue * v, New(PickleValue::Kind::kGlobal));
        v->int_value = static_cast<int64_t>(i);
        v->text = absl::StrCat(module, ".", name);
        return Push(v);
      }
    }
    return Refuse(absl::StrCat(absl::CHexEscape(module), ".", absl::CHexEscape(name)));
  }

  // BINPERSID: ('storage', <storage type>, key, location, numel), as torch.save's persistent_id
  // returns it.
  absl::Status PersistentLoad() {
    KVTIER_ASSIGN_OR_RETURN(PickleValue * pid, Pop());
    if (pid->kind != PickleValue::Kind::kTuple || pid->items.size() != 5 ||
        pid->items[0]->kind != PickleValue::Kind::kString || pid->items[0]->text != "storage") {
      return Fail(absl::StrCat("persistent id is a ", pid->KindName(), " of ", pid->items.size(),
                               " items; torch writes ('storage', type, key, location, numel)"));
    }
    const PickleValue* type = pid->items[1];
    const PickleValue* key = pid->items[2];
    const PickleValue* location = pid->items[3];
    const PickleValue* numel = pid->items[4];
    if (type->kind != PickleValue::Kind::kGlobal ||
        kWhitelist[type->int_value].role != GlobalRole::kStorageType) {
      return Fail(
          absl::StrCat("persistent id names a ",
                       type->kind == PickleValue::Kind::kGlobal ? type->text : type->KindName(),
                       " where a storage type belongs"));
    }
    if (key->kind != PickleValue::Kind::kString || location->kind != PickleValue::Kind::kString ||
        numel->kind != PickleValue::Kind::kInt || numel->int_value < 0) {
      return Fail(absl::StrCat("persistent id has key ", key->KindName(), ", location ",
                               location->KindName(), " and element count ", numel->KindName(),
                               "; torch writes str, str and a non-negative int"));
    }
    const TorchDType dtype = kWhitelist[type->int_value].dtype;
    auto cached = storage_bytes_.find(key->text);
    absl::Span<const uint8_t> bytes;
    if (cached != storage_bytes_.end()) {
      bytes = cached->second;
    } else {
      KVTIER_ASSIGN_OR_RETURN(bytes, storages_(key->text));
      storage_bytes_.emplace(key->text, bytes);
    }
    const uint64_t element_bytes = TorchDTypeBytes(dtype);
    const uint64_t count = static_cast<uint64_t>(numel->int_value);
    if (count > bytes.size() / element_bytes || count * element_bytes != bytes.size()) {
      return Fail(absl::StrCat("storage '", absl::CHexEscape(key->text), "' holds ", bytes.size(),
                               " bytes, but its persistent id says ", count, " elements of ",
                               type->text, " (", element_bytes, " bytes each)"));
    }
    KVTIER_ASSIGN_OR_RETURN(PickleValue * storage, New(PickleValue::Kind::kStorage));
    storage->tensor = std::make_unique<TorchTensor>();
    storage->tensor->dtype = dtype;
    storage->tensor->shape = {numel->int_value};
    storage->tensor->strides = {1};
    storage->tensor->storage_key = key->text;
    storage->tensor->storage = bytes;
    return Push(storage);
  }

  absl::StatusOr<std::vector<int64_t>> IntTuple(const PickleValue* v, absl::string_view what) {
    if (v->kind != PickleValue::Kind::kTuple) {
      return Fail(absl::StrCat("tensor ", what, " is a ", v->KindName(), ", not a tuple"));
    }
    if (v->items.size() > limits_.max_tensor_rank) {
      return Fail(absl::StrCat("tensor has rank ", v->items.size(), "; the limit is ",
                               limits_.max_tensor_rank));
    }
    std::vector<int64_t> out;
    for (const PickleValue* item : v->items) {
      if (item->kind != PickleValue::Kind::kInt) {
        return Fail(absl::StrCat("tensor ", what, " holds a ", item->KindName()));
      }
      out.push_back(item->int_value);
    }
    return out;
  }

  static bool IsEmptyDict(const PickleValue* v) {
    return v->kind == PickleValue::Kind::kDict && v->dict->entries.empty();
  }

  // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks
  // [, metadata]) or the older _rebuild_tensor(storage, storage_offset, size, stride).
  absl::StatusOr<PickleValue*> RebuildTensor(const PickleValue* args, bool v2) {
    const size_t n = args->items.size();
    if (v2 ? (n != 6 && n != 7) : n != 4) {
      return Fail(absl::StrCat(v2 ? "_rebuild_tensor_v2" : "_rebuild_tensor", " called with ", n,
                               " arguments; torch passes ", v2 ? "6 or 7" : "4"));
    }
    const PickleValue* storage = args->items[0];
    const PickleValue* offset = args->items[1];
    if (storage->kind != PickleValue::Kind::kStorage) {
      return Fail(absl::StrCat("tensor storage is a ", storage->KindName(),
                               ", not a persistent-id storage"));
    }
    if (offset->kind != PickleValue::Kind::kInt) {
      return Fail(absl::StrCat("tensor storage offset is a ", offset->KindName()));
    }
    auto tensor = std::make_unique<TorchTensor>();
    tensor->dtype = storage->tensor->dtype;
    tensor->storage_key = storage->tensor->storage_key;
    tensor->storage = storage->tensor->storage;
    tensor->storage_offset = offset->int_value;
    KVTIER_ASSIGN_OR_RETURN(tensor->shape, IntTuple(args->items[2], "size"));
    KVTIER_ASSIGN_OR_RETURN(tensor->strides, IntTuple(args->items[3], "stride"));
    if (v2) {
      if (args->items[4]->kind != PickleValue::Kind::kBool) {
        return Fail(absl::StrCat("tensor requires_grad is a ", args->items[4]->KindName()));
      }
      if (!IsEmptyDict(args->items[5])) {
        return Fail(absl::StrCat("tensor backward_hooks is a ", args->items[5]->KindName(),
                                 " that is not empty; a calibration file has no hooks"));
      }
      if (n == 7 && args->items[6]->kind != PickleValue::Kind::kNone &&
          !IsEmptyDict(args->items[6])) {
        return Fail(
            "tensor carries metadata (conjugate or negative bits, ...), which a "
            "calibration file does not need");
      }
    }
    absl::Status extent = CheckTensorExtent(*tensor, kMaxTensorElements);
    if (!extent.ok()) return Fail(extent.message());
    KVTIER_ASSIGN_OR_RETURN(PickleValue * v, New(PickleValue::Kind::kTensor));
    v->tensor = std::move(tensor);
    return v;
  }

  absl::Status Reduce() {
    KVTIER_ASSIGN_OR_RETURN(PickleValue * args, Pop());
    KVTIER_ASSIGN_OR_RETURN(PickleValue * callable, Pop());
    if (callable->kind != PickleValue::Kind::kGlobal) {
      return Fail(absl::StrCat("REDUCE calls a ", callable->KindName(),
                               "; only whitelisted globals can be called"));
    }
    if (args->kind != PickleValue::Kind::kTuple) {
      return Fail(absl::StrCat("REDUCE arguments of ", callable->text, " are a ", args->KindName(),
                               ", not a tuple"));
    }
    PickleValue* result = nullptr;
    switch (kWhitelist[callable->int_value].role) {
      case GlobalRole::kOrderedDict: {
        if (!args->items.empty()) {
          return Fail(absl::StrCat("collections.OrderedDict called with ", args->items.size(),
                                   " arguments; torch pickles it with none"));
        }
        KVTIER_ASSIGN_OR_RETURN(result, New(PickleValue::Kind::kDict));
        break;
      }
      case GlobalRole::kRebuildTensorV2: {
        KVTIER_ASSIGN_OR_RETURN(result, RebuildTensor(args, /*v2=*/true));
        break;
      }
      case GlobalRole::kRebuildTensor: {
        KVTIER_ASSIGN_OR_RETURN(result, RebuildTensor(args, /*v2=*/false));
        break;
      }
      case GlobalRole::kStorageType:
        return Fail(
            absl::StrCat("calls ", callable->text, "; storages come only through persistent ids"));
    }
    return Push(result);
  }

  // BUILD sets an object's state; torch emits none for plain tensors and OrderedDicts, so only
  // an empty state on one of them is accepted (and ignored).
  absl::Status Build() {
    KVTIER_ASSIGN_OR_RETURN(PickleValue * state, Pop());
    KVTIER_ASSIGN_OR_RETURN(PickleValue * target, Top());
    const bool target_ok =
        target->kind == PickleValue::Kind::kDict || target->kind == PickleValue::Kind::kTensor;
    const bool state_empty = state->kind == PickleValue::Kind::kNone || IsEmptyDict(state) ||
                             (state->kind == PickleValue::Kind::kTuple && state->items.empty());
    if (!target_ok || !state_empty) {
      return Fail(absl::StrCat("BUILD sets a ", state->KindName(), " state on a ",
                               target->KindName(),
                               "; only an empty state on a dict or tensor is accepted"));
    }
    return absl::OkStatus();
  }

  absl::Status Step(uint8_t op) {
    switch (op) {
      case kProto: {
        KVTIER_ASSIGN_OR_RETURN(uint64_t version, TakeLe(1, "PROTO"));
        if (version < 2 || version > 5) {
          return Fail(absl::StrCat("pickle protocol ", version, "; torch.save writes 2"));
        }
        return absl::OkStatus();
      }
      case kFrame: {
        KVTIER_ASSIGN_OR_RETURN(uint64_t length, TakeLe(8, "FRAME"));
        if (length > data_.size() - pos_) {
          return Fail(absl::StrCat("FRAME of ", length, " bytes but only ", data_.size() - pos_,
                                   " remain"));
        }
        return absl::OkStatus();
      }
      case kMark:
        if (marks_.size() >= limits_.max_mark_depth) {
          return Fail(absl::StrCat("more than ", limits_.max_mark_depth, " nested MARKs"));
        }
        marks_.push_back(stack_.size());
        return absl::OkStatus();
      case kEmptyDict:
      case kEmptyList:
      case kEmptyTuple: {
        const PickleValue::Kind kind = op == kEmptyDict   ? PickleValue::Kind::kDict
                                       : op == kEmptyList ? PickleValue::Kind::kList
                                                          : PickleValue::Kind::kTuple;
        KVTIER_ASSIGN_OR_RETURN(PickleValue * v, New(kind));
        return Push(v);
      }
      case kTuple:
      case kList: {
        KVTIER_ASSIGN_OR_RETURN(std::vector<PickleValue*> items, PopToMark());
        KVTIER_ASSIGN_OR_RETURN(
            PickleValue * v,
            MakeSequence(op == kTuple ? PickleValue::Kind::kTuple : PickleValue::Kind::kList,
                         items));
        return Push(v);
      }
      case kTuple1:
      case kTuple2:
      case kTuple3: {
        const size_t n = op - kTuple1 + 1;
        std::vector<PickleValue*> items(n);
        for (size_t i = n; i-- > 0;) {
          KVTIER_ASSIGN_OR_RETURN(items[i], Pop());
        }
        KVTIER_ASSIGN_OR_RETURN(PickleValue * v, MakeSequence(PickleValue::Kind::kTuple, items));
        return Push(v);
      }
      case kDict:
      case kSetItems: {
        KVTIER_ASSIGN_OR_RETURN(std::vector<PickleValue*> items, PopToMark());
        if (items.size() % 2 != 0) {
          return Fail(absl::StrCat(op == kDict ? "DICT" : "SETITEMS", " over ", items.size(),
                                   " values, not key-value pairs"));
        }
        PickleValue* target = nullptr;
        if (op == kDict) {
          KVTIER_ASSIGN_OR_RETURN(target, New(PickleValue::Kind::kDict));
        } else {
          KVTIER_ASSIGN_OR_RETURN(target, Top());
        }
        for (size_t i = 0; i < items.size(); i += 2) {
          KVTIER_RETURN_IF_ERROR(SetItem(target, items[i], items[i + 1]));
        }
        return op == kDict ? Push(target) : absl::OkStatus();
      }
      case kSetItem: {
        KVTIER_ASSIGN_OR_RETURN(PickleValue * value, Pop());
        KVTIER_ASSIGN_OR_RETURN(PickleValue * key, Pop());
        KVTIER_ASSIGN_OR_RETURN(PickleValue * target, Top());
        return SetItem(target, key, value);
      }
      case kAppend: {
        KVTIER_ASSIGN_OR_RETURN(PickleValue * value, Pop());
        KVTIER_ASSIGN_OR_RETURN(PickleValue * target, Top());
        return Append(target, {value});
      }
      case kAppends: {
        KVTIER_ASSIGN_OR_RETURN(std::vector<PickleValue*> items, PopToMark());
        KVTIER_ASSIGN_OR_RETURN(PickleValue * target, Top());
        return Append(target, items);
      }
      case kBinPut: {
        KVTIER_ASSIGN_OR_RETURN(uint64_t index, TakeLe(1, "BINPUT"));
        return Memoize(index);
      }
      case kLongBinPut: {
        KVTIER_ASSIGN_OR_RETURN(uint64_t index, TakeLe(4, "LONG_BINPUT"));
        return Memoize(index);
      }
      case kMemoize:
        return Memoize(memo_.size());
      case kBinGet: {
        KVTIER_ASSIGN_OR_RETURN(uint64_t index, TakeLe(1, "BINGET"));
        return Recall(index);
      }
      case kLongBinGet: {
        KVTIER_ASSIGN_OR_RETURN(uint64_t index, TakeLe(4, "LONG_BINGET"));
        return Recall(index);
      }
      case kBinInt: {
        KVTIER_ASSIGN_OR_RETURN(uint64_t v, TakeLe(4, "BININT"));
        return PushInt(static_cast<int32_t>(static_cast<uint32_t>(v)));
      }
      case kBinInt1: {
        KVTIER_ASSIGN_OR_RETURN(uint64_t v, TakeLe(1, "BININT1"));
        return PushInt(static_cast<int64_t>(v));
      }
      case kBinInt2: {
        KVTIER_ASSIGN_OR_RETURN(uint64_t v, TakeLe(2, "BININT2"));
        return PushInt(static_cast<int64_t>(v));
      }
      case kLong1: {
        KVTIER_ASSIGN_OR_RETURN(uint64_t n, TakeLe(1, "LONG1"));
        if (n > 8) return Fail(absl::StrCat("LONG1 of ", n, " bytes does not fit in 64 bits"));
        KVTIER_ASSIGN_OR_RETURN(uint64_t v, TakeLe(n, "LONG1"));
        if (n > 0 && n < 8 && (v >> (8 * n - 1)) != 0) v |= ~uint64_t{0} << (8 * n);
        return PushInt(static_cast<int64_t>(v));
      }
      case kBinFloat: {
        KVTIER_ASSIGN_OR_RETURN(absl::Span<const uint8_t> bytes, Take(8, "BINFLOAT"));
        KVTIER_ASSIGN_OR_RETURN(PickleValue * v, New(PickleValue::Kind::kFloat));
        v->float_value = std::bit_cast<double>(DecodeBigEndian64(bytes.data()));
        return Push(v);
      }
      case kNone:
        return Push(none_);
      case kNewTrue:
        return Push(true_);
      case kNewFalse:
        return Push(false_);
      case kBinUnicode:
        return PushText(PickleValue::Kind::kString, 4, "BINUNICODE");
      case kShortBinUnicode:
        return PushText(PickleValue::Kind::kString, 1, "SHORT_BINUNICODE");
      case kBinUnicode8:
        return PushText(PickleValue::Kind::kString, 8, "BINUNICODE8");
      case kBinBytes:
        return PushText(PickleValue::Kind::kBytes, 4, "BINBYTES");
      case kShortBinBytes:
        return PushText(PickleValue::Kind::kBytes, 1, "SHORT_BINBYTES");
      case kGlobal: {
        KVTIER_ASSIGN_OR_RETURN(std::string module, TakeLine("GLOBAL module"));
        KVTIER_ASSIGN_OR_RETURN(std::string name, TakeLine("GLOBAL name"));
        return PushGlobal(module, name);
      }
      case kStackGlobal: {
        KVTIER_ASSIGN_OR_RETURN(PickleValue * name, Pop());
        KVTIER_ASSIGN_OR_RETURN(PickleValue * module, Pop());
        if (module->kind != PickleValue::Kind::kString ||
            name->kind != PickleValue::Kind::kString) {
          return Fail(absl::StrCat("STACK_GLOBAL of a ", module->KindName(), " and a ",
                                   name->KindName(), ", not two str"));
        }
        return PushGlobal(module->text, name->text);
      }
      case kReduce:
        return Reduce();
      case kBuild:
        return Build();
      case kBinPersId:
        return PersistentLoad();
      default: {
        const bool printable = op >= 0x20 && op < 0x7f;
        return Refuse(absl::StrFormat(
            "opcode 0x%02x%s", static_cast<unsigned>(op),
            printable ? absl::StrFormat(" ('%c')", static_cast<char>(op)) : std::string()));
      }
    }
  }

  absl::StatusOr<const PickleValue*> Finish() {
    if (!marks_.empty()) {
      return Fail(absl::StrCat("STOP with ", marks_.size(), " MARKs still open"));
    }
    if (stack_.size() != 1) {
      return Fail(absl::StrCat("STOP with ", stack_.size(), " values on the stack, not 1"));
    }
    if (pos_ != data_.size()) {
      return Fail(absl::StrCat("STOP followed by ", data_.size() - pos_, " more bytes"));
    }
    return stack_.back();
  }

  absl::Span<const uint8_t> data_;
  const TorchCheckpoint::StorageResolver& storages_;
  const PickleLimits& limits_;
  std::vector<std::unique_ptr<PickleValue>>* objects_;

  size_t pos_ = 0;
  size_t op_pos_ = 0;
  size_t created_ = 0;
  size_t container_items_ = 0;
  std::vector<PickleValue*> stack_;
  std::vector<size_t> marks_;  // stack sizes at each open MARK
  absl::flat_hash_map<uint64_t, PickleValue*> memo_;
  absl::flat_hash_map<std::string, absl::Span<const uint8_t>> storage_bytes_;
  PickleValue* none_ = nullptr;
  PickleValue* true_ = nullptr;
  PickleValue* false_ = nullptr;
};

}  // namespace

size_t TorchDTypeBytes(TorchDType dtype) {
  switch (dtype) {
    case TorchDType::kFloat32:
    case TorchDType::kInt32:
      return 4;
    case TorchDType::kComplex64:
    case TorchDType::kInt64:
      return 8;
    case TorchDType::kBFloat16:
    case TorchDType::kFloat16:
      return 2;
  }
  return 1;
}

absl::string_view TorchDTypeName(TorchDType dtype) {
  switch (dtype) {
    case TorchDType::kFloat32:
      return "float32";
    case TorchDType::kComplex64:
      return "complex64";
    case TorchDType::kBFloat16:
      return "bfloat16";
    case TorchDType::kFloat16:
      return "float16";
    case TorchDType::kInt64:
      return "int64";
    case TorchDType::kInt32:
      return "int32";
  }
  return "unknown";
}

int64_t TorchTensor::NumElements() const {
  int64_t n = 1;
  for (int64_t size : shape) n *= size;
  return n;
}

absl::StatusOr<std::vector<float>> TensorToFloats(const TorchTensor& tensor) {
  if (tensor.dtype != TorchDType::kFloat32 && tensor.dtype != TorchDType::kComplex64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor on storage '", absl::CHexEscape(tensor.storage_key), "' is ",
        TorchDTypeName(tensor.dtype), "; only float32 and complex64 convert to floats"));
  }
  KVTIER_RETURN_IF_ERROR(CheckTensorExtent(tensor, kMaxTensorElements));
  const size_t element_bytes = TorchDTypeBytes(tensor.dtype);
  const size_t floats_per_element = element_bytes / sizeof(float);
  const size_t n = static_cast<size_t>(tensor.NumElements());
  std::vector<float> out(n * floats_per_element);
  const size_t rank = tensor.shape.size();
  std::vector<int64_t> index(rank, 0);
  // Unsigned: a size-1 dimension may carry any stride, so the running position can pass through
  // values far outside the storage (wrapping, which is defined) before it comes back; every
  // position actually read was bounds-checked by CheckTensorExtent.
  uint64_t element = static_cast<uint64_t>(tensor.storage_offset);
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(&out[i * floats_per_element], tensor.storage.data() + element * element_bytes,
                element_bytes);
    // Advance the row-major index, last dimension fastest.
    for (size_t d = rank; d-- > 0;) {
      const uint64_t stride = static_cast<uint64_t>(tensor.strides[d]);
      element += stride;
      if (++index[d] < tensor.shape[d]) break;
      element -= stride * static_cast<uint64_t>(tensor.shape[d]);
      index[d] = 0;
    }
  }
  return out;
}

const PickleValue* PickleValue::Find(absl::string_view key) const {
  if (kind != Kind::kDict) return nullptr;
  auto it = dict->string_keys.find(key);
  return it == dict->string_keys.end() ? nullptr : dict->entries[it->second].second;
}

absl::string_view PickleValue::KindName() const {
  switch (kind) {
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kBytes:
      return "bytes";
    case Kind::kList:
      return "list";
    case Kind::kTuple:
      return "tuple";
    case Kind::kDict:
      return "dict";
    case Kind::kTensor:
      return "tensor";
    case Kind::kGlobal:
      return "global";
    case Kind::kStorage:
      return "storage";
  }
  return "unknown";
}

absl::StatusOr<TorchCheckpoint> TorchCheckpoint::ReadPickle(absl::Span<const uint8_t> pickle,
                                                            const StorageResolver& storages,
                                                            const PickleLimits& limits) {
  TorchCheckpoint checkpoint;
  Interpreter interpreter(pickle, storages, limits, &checkpoint.objects_);
  KVTIER_ASSIGN_OR_RETURN(checkpoint.root_, interpreter.Run());
  return checkpoint;
}

absl::StatusOr<TorchCheckpoint> TorchCheckpoint::Read(absl::Span<const uint8_t> file,
                                                      const PickleLimits& limits) {
  KVTIER_ASSIGN_OR_RETURN(ZipArchive zip, ZipArchive::Parse(file));
  // The pickle is "<archive>/data.pkl", where <archive> is one path component (torch names it
  // after the file, or "archive").
  const ZipEntry* pickle_entry = nullptr;
  std::string prefix;
  for (const ZipEntry& entry : zip.entries()) {
    if (!absl::EndsWith(entry.name, "/data.pkl")) continue;
    const std::string candidate = entry.name.substr(0, entry.name.size() - 8);
    if (candidate.size() < 2 || candidate.find('/') != candidate.size() - 1) continue;
    if (pickle_entry != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("torch archive holds two pickles, '",
                                                     absl::CHexEscape(pickle_entry->name),
                                                     "' and '", absl::CHexEscape(entry.name), "'"));
    }
    pickle_entry = &entry;
    prefix = candidate;
  }
  if (pickle_entry == nullptr) {
    std::vector<std::string> names;
    for (const ZipEntry& entry : zip.entries()) {
      if (names.size() == 8) {
        names.push_back("...");
        break;
      }
      names.push_back(absl::StrCat("'", absl::CHexEscape(entry.name), "'"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("zip archive has no '<archive>/data.pkl' entry, so it is not a torch.save "
                     "file; its entries: ",
                     absl::StrJoin(names, ", ")));
  }
  if (const ZipEntry* byteorder = zip.Find(prefix + "byteorder"); byteorder != nullptr) {
    KVTIER_ASSIGN_OR_RETURN(absl::Span<const uint8_t> bytes, zip.Read(*byteorder));
    const absl::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    if (text != "little") {
      return absl::InvalidArgumentError(absl::StrCat("torch archive byteorder is '",
                                                     absl::CHexEscape(text.substr(0, 32)),
                                                     "'; only little-endian files are supported"));
    }
  }
  const ZipEntry* version = zip.Find(prefix + "version");
  if (version == nullptr) version = zip.Find(prefix + ".data/version");
  if (version != nullptr) {
    KVTIER_ASSIGN_OR_RETURN(absl::Span<const uint8_t> bytes, zip.Read(*version));
    absl::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    absl::ConsumeSuffix(&text, "\n");
    const bool digits = !text.empty() && text.size() <= 4 &&
                        text.find_first_not_of("0123456789") == absl::string_view::npos;
    if (!digits) {
      return absl::InvalidArgumentError(
          absl::StrCat("torch archive version record '", absl::CHexEscape(version->name), "' is '",
                       absl::CHexEscape(text.substr(0, 32)), "', not a decimal number"));
    }
  }
  KVTIER_ASSIGN_OR_RETURN(absl::Span<const uint8_t> pickle, zip.Read(*pickle_entry));
  const StorageResolver resolver =
      [&zip, &prefix](absl::string_view key) -> absl::StatusOr<absl::Span<const uint8_t>> {
    const std::string name = absl::StrCat(prefix, "data/", key);
    const ZipEntry* entry = zip.Find(name);
    if (entry == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("calibration pickle names storage '", absl::CHexEscape(key),
                       "', but the archive has no entry '", absl::CHexEscape(name), "'"));
    }
    return zip.Read(*entry);
  };
  return ReadPickle(pickle, resolver, limits);
}

}  // namespace kvtier::triattention
