// A strict reader for what torch.save writes (the zip format of torch >= 1.6): the ZIP container
// (ZipArchive) and a pickle interpreter that knows only the opcodes and the handful of
// whitelisted globals that a dict of tensors, numbers and strings needs. It never imports or calls
// anything: a global is a name compared against the whitelist, and a tensor is a typed, bounds-
// checked view of bytes inside the file. Main types: TorchCheckpoint (the result), PickleValue
// (the values it holds), TorchTensor. A checkpoint is immutable once read and may be shared
// between threads. torch_pickle.cc is over 800 lines because the ZIP reader and the pickle
// interpreter are one strict parser: the interpreter reads only what the archive's bounds checks
// admitted, and splitting them would expose an unchecked interface between the two.
#ifndef KVTIER_TRIATTENTION_TORCH_PICKLE_H_
#define KVTIER_TRIATTENTION_TORCH_PICKLE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace kvtier::triattention {

// Element types of the storages a checkpoint may name (torch.FloatStorage and friends).
enum class TorchDType : uint8_t {
  kFloat32,    // torch.FloatStorage
  kComplex64,  // torch.ComplexFloatStorage: (real, imaginary) float32 pairs
  kBFloat16,   // torch.BFloat16Storage
  kFloat16,    // torch.HalfStorage
  kInt64,      // torch.LongStorage
  kInt32,      // torch.IntStorage
};

// Bytes per element: 4, 8, 2, 2, 8, 4.
size_t TorchDTypeBytes(TorchDType dtype);
// torch's name: "float32", "complex64", "bfloat16", "float16", "int64", "int32".
absl::string_view TorchDTypeName(TorchDType dtype);

// A tensor as _rebuild_tensor_v2 describes it: a strided view of a storage, which is one zip
// entry, `<archive>/data/<storage_key>`, holding little-endian elements. Reading checks that
// every element the view addresses lies inside the storage.
struct TorchTensor {
  TorchDType dtype = TorchDType::kFloat32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;       // in elements, each >= 0, same rank as shape
  int64_t storage_offset = 0;         // in elements
  std::string storage_key;            // the persistent id's key
  absl::Span<const uint8_t> storage;  // the whole storage, borrowed from the file

  int64_t NumElements() const;
};

// Copies the elements of a float32 or complex64 tensor in row-major order of its shape, following
// its strides; a complex64 element yields two floats (real, imaginary). InvalidArgument for other
// dtypes.
absl::StatusOr<std::vector<float>> TensorToFloats(const TorchTensor& tensor);

struct PickleValue;

// The entries of a pickled dict (or OrderedDict), in insertion order; keys are str or int.
struct PickleDict {
  std::vector<std::pair<const PickleValue*, const PickleValue*>> entries;
  absl::flat_hash_map<std::string, size_t> string_keys;  // key -> index into entries
  absl::flat_hash_map<int64_t, size_t> int_keys;
};

// One value of the pickle. Values are owned by their TorchCheckpoint; containers point at their
// elements, and the same value may be reached from several places (the pickle memo).
struct PickleValue {
  enum class Kind : uint8_t {
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kBytes,
    kList,
    kTuple,
    kDict,
    kTensor,
    kGlobal,   // a whitelisted name; only the interpreter uses it
    kStorage,  // a persistent id's storage; only the interpreter uses it
  };

  Kind kind = Kind::kNone;
  bool bool_value = false;                // kBool
  int64_t int_value = 0;                  // kInt
  double float_value = 0;                 // kFloat
  std::string text;                       // kString (bytes as pickled), kBytes, kGlobal
  std::vector<const PickleValue*> items;  // kList, kTuple
  std::unique_ptr<PickleDict> dict;       // kDict
  std::unique_ptr<TorchTensor> tensor;    // kTensor; kStorage: the storage as a 1-D tensor

  // The value under the str key `key` of a dict; nullptr when this is not a dict or has no such
  // key.
  const PickleValue* Find(absl::string_view key) const;
  // "None", "bool", "int", "float", "str", "bytes", "list", "tuple", "dict", "tensor", ...
  absl::string_view KindName() const;
};

// Bounds on what one pickle may build; each violation is InvalidArgument naming the limit.
struct PickleLimits {
  size_t max_objects = size_t{1} << 21;          // values created (None/True/False excluded)
  size_t max_container_items = size_t{1} << 23;  // elements added to lists, tuples and dicts
  size_t max_stack = size_t{1} << 20;            // values on the interpreter's stack
  size_t max_mark_depth = 256;                   // MARKs open at once (nesting depth)
  size_t max_memo = size_t{1} << 21;             // memo entries
  size_t max_string_bytes = size_t{16} << 20;    // one str or bytes value
  size_t max_tensor_rank = 16;
};

class TorchCheckpoint {
 public:
  // Returns the bytes of storage `key` (the persistent id's key), or an error.
  using StorageResolver =
      std::function<absl::StatusOr<absl::Span<const uint8_t>>(absl::string_view key)>;

  // Reads a torch.save zip archive: exactly one `<archive>/data.pkl`, storages in
  // `<archive>/data/<key>`, `<archive>/byteorder` (when present) "little", `<archive>/version`
  // (when present) a decimal number; other entries are ignored. Every entry used is checked
  // against its CRC-32. `file` is borrowed: tensors point into it, so it must outlive the
  // checkpoint. InvalidArgument for a malformed archive or pickle, an opcode or a global outside
  // the whitelist ("calibration pickle uses os.system, which a calibration file does not need"),
  // a tensor reaching outside its storage, a storage whose entry is missing or has the wrong
  // size, or an exceeded limit; DataLoss for a CRC mismatch. Does not block.
  static absl::StatusOr<TorchCheckpoint> Read(absl::Span<const uint8_t> file,
                                              const PickleLimits& limits = PickleLimits());

  // Runs the interpreter over a bare pickle (a data.pkl). `storages` resolves persistent ids; it
  // is called once per distinct key while reading, and the spans it returns must outlive the
  // checkpoint. Errors as for Read.
  static absl::StatusOr<TorchCheckpoint> ReadPickle(absl::Span<const uint8_t> pickle,
                                                    const StorageResolver& storages,
                                                    const PickleLimits& limits = PickleLimits());

  // The unpickled object (for torch.save of a dict, a kDict).
  const PickleValue& root() const { return *root_; }

 private:
  std::vector<std::unique_ptr<PickleValue>> objects_;
  const PickleValue* root_ = nullptr;
};

}  // namespace kvtier::triattention

#endif  // KVTIER_TRIATTENTION_TORCH_PICKLE_H_
