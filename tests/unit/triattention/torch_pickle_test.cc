// Tests of the torch.save reader (triattention/torch_pickle.h, zip_archive.h) on hand-built
// pickles and archives: every opcode's value, memo sharing and cycles, each limit, refusal of
// code-running opcodes and globals, tensors as strided views with bounds checks, and the ZIP
// checks (stored only, CRC, names, overlaps). Python-written files are covered by
// calibration_test.cc.
#include "triattention/torch_pickle.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/coding.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "triattention/zip_archive.h"

namespace kvtier::triattention {
namespace {

using ::testing::HasSubstr;

// Appends pickle opcodes to a byte string.
class PickleWriter {
 public:
  PickleWriter() { Op(0x80).Byte(2); }  // PROTO 2
  PickleWriter& Op(uint8_t op) { return Byte(op); }
  PickleWriter& Byte(uint8_t b) {
    bytes_.push_back(b);
    return *this;
  }
  PickleWriter& Le(uint64_t v, size_t n) {
    PutLittleEndian(&bytes_, v, n);
    return *this;
  }
  PickleWriter& Str(const std::string& s) {
    Op('X').Le(s.size(), 4);
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  PickleWriter& Int(int64_t v) {
    if (v >= 0 && v < 256) return Op('K').Byte(static_cast<uint8_t>(v));
    return Op(0x8a).Byte(8).Le(static_cast<uint64_t>(v), 8);  // LONG1
  }
  PickleWriter& Global(const std::string& module, const std::string& name) {
    Op('c');
    bytes_.insert(bytes_.end(), module.begin(), module.end());
    Byte('\n');
    bytes_.insert(bytes_.end(), name.begin(), name.end());
    return Byte('\n');
  }
  // _rebuild_tensor_v2(('storage', torch.FloatStorage, key, 'cpu', numel), offset, size,
  // stride, False, OrderedDict()).
  PickleWriter& Tensor(const std::string& key, int64_t numel, int64_t offset,
                       const std::vector<int64_t>& size, const std::vector<int64_t>& stride,
                       const std::string& storage_type = "FloatStorage") {
    Global("torch._utils", "_rebuild_tensor_v2").Op('(');
    Op('(').Str("storage").Global("torch", storage_type).Str(key).Str("cpu").Int(numel).Op('t');
    Op('Q').Int(offset);
    Op('(');
    for (int64_t s : size) Int(s);
    Op('t').Op('(');
    for (int64_t s : stride) Int(s);
    Op('t').Op(0x89).Global("collections", "OrderedDict").Op(')').Op('R');
    return Op('t').Op('R');
  }
  std::vector<uint8_t> Stop() {
    std::vector<uint8_t> out = bytes_;
    out.push_back('.');
    return out;
  }

 private:
  std::vector<uint8_t> bytes_;
};

absl::StatusOr<TorchCheckpoint> Read(const std::vector<uint8_t>& pickle,
                                     const PickleLimits& limits = PickleLimits()) {
  return TorchCheckpoint::ReadPickle(
      pickle,
      [](absl::string_view key) -> absl::StatusOr<absl::Span<const uint8_t>> {
        return absl::NotFoundError(absl::StrCat("no storage ", key));
      },
      limits);
}

void ExpectError(const absl::StatusOr<TorchCheckpoint>& result, absl::string_view substring) {
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  EXPECT_THAT(std::string(result.status().message()), HasSubstr(std::string(substring)));
}

TEST(TorchPickleTest, ReadsScalarsStringsAndContainers) {
  PickleWriter w;
  w.Op('}').Op('(');
  w.Str("small").Int(200);
  w.Str("int2").Op('M').Le(60000, 2);
  w.Str("negative").Op('J').Le(static_cast<uint32_t>(-5), 4);
  w.Str("long").Op(0x8a).Byte(2).Le(0xff00, 2);  // LONG1 of 2 bytes: -256
  w.Str("big").Int(int64_t{1} << 40);
  w.Str("float").Op('G');
  for (uint8_t b : {0x40, 0x09, 0x21, 0xfb, 0x54, 0x44, 0x2d, 0x18}) w.Byte(b);  // pi, big-endian
  w.Str("flags").Op(0x88).Op(0x89).Op('N').Op(0x87);  // (True, False, None)
  w.Str("short").Op(0x8c).Byte(2).Byte('h').Byte('i');
  w.Str("bytes").Op('C').Byte(1).Byte(0xff);
  w.Str("list").Op(']').Op('q').Byte(7).Op('(').Int(1).Int(2).Op('e');
  w.Str("again").Op('h').Byte(7).Op(0x85);  // the memoized list, in a 1-tuple
  w.Op('u');
  absl::StatusOr<TorchCheckpoint> c = Read(w.Stop());
  ASSERT_TRUE(c.ok()) << c.status();
  const PickleValue& root = c->root();
  ASSERT_EQ(root.kind, PickleValue::Kind::kDict);
  EXPECT_EQ(root.Find("small")->int_value, 200);
  EXPECT_EQ(root.Find("int2")->int_value, 60000);
  EXPECT_EQ(root.Find("negative")->int_value, -5);
  EXPECT_EQ(root.Find("long")->int_value, -256);
  EXPECT_EQ(root.Find("big")->int_value, int64_t{1} << 40);
  EXPECT_DOUBLE_EQ(root.Find("float")->float_value, 3.141592653589793);
  const PickleValue* flags = root.Find("flags");
  ASSERT_EQ(flags->kind, PickleValue::Kind::kTuple);
  ASSERT_EQ(flags->items.size(), 3u);
  EXPECT_TRUE(flags->items[0]->bool_value);
  EXPECT_FALSE(flags->items[1]->bool_value);
  EXPECT_EQ(flags->items[2]->kind, PickleValue::Kind::kNone);
  EXPECT_EQ(root.Find("short")->text, "hi");
  EXPECT_EQ(root.Find("bytes")->kind, PickleValue::Kind::kBytes);
  const PickleValue* list = root.Find("list");
  ASSERT_EQ(list->kind, PickleValue::Kind::kList);
  ASSERT_EQ(list->items.size(), 2u);
  EXPECT_EQ(list->items[1]->int_value, 2);
  const PickleValue* again = root.Find("again");
  ASSERT_EQ(again->kind, PickleValue::Kind::kTuple);
  ASSERT_EQ(again->items.size(), 1u);
  EXPECT_EQ(again->items[0], list);  // BINGET recalls the same value, not a copy
  EXPECT_EQ(root.Find("absent"), nullptr);
}

TEST(TorchPickleTest, ASelfContainingListIsHarmless) {
  PickleWriter w;
  w.Op(']').Op('q').Byte(0).Op('h').Byte(0).Op('a');  // l = []; l.append(l)
  absl::StatusOr<TorchCheckpoint> c = Read(w.Stop());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->root().items[0], &c->root());
}

TEST(TorchPickleTest, RefusesCodeAndUnknownOpcodes) {
  PickleWriter eval;
  eval.Global("builtins", "eval").Str("1").Op(0x85).Op('R');
  ExpectError(Read(eval.Stop()),
              "calibration pickle uses builtins.eval, which a calibration file "
              "does not need");
  PickleWriter stack_global;
  stack_global.Str("os").Str("system").Op(0x93);
  ExpectError(Read(stack_global.Stop()), "uses os.system");
  PickleWriter newobj;
  newobj.Global("collections", "OrderedDict").Op(')').Op(0x81);
  ExpectError(Read(newobj.Stop()), "uses opcode 0x81");
  PickleWriter storage_call;
  storage_call.Global("torch", "FloatStorage").Op(')').Op('R');
  ExpectError(Read(storage_call.Stop()), "storages come only through persistent ids");
  PickleWriter reduce_int;
  reduce_int.Int(1).Op(')').Op('R');
  ExpectError(Read(reduce_int.Stop()), "REDUCE calls a int");
  PickleWriter build;
  build.Op('}').Str("state").Op('b');
  ExpectError(Read(build.Stop()), "BUILD sets a str state on a dict");
}

TEST(TorchPickleTest, RefusesMalformedStreams) {
  ExpectError(Read({0x80, 0x02}), "without STOP");
  ExpectError(Read({0x80, 0x02, '.'}), "STOP with 0 values on the stack, not 1");
  ExpectError(Read({0x80, 0x02, 'a', '.'}), "pops from an empty stack");
  ExpectError(Read({0x80, 0x02, 'N', '(', 0x85, '.'}), "pops from an empty stack");
  PickleWriter two;
  two.Int(1).Int(2);
  ExpectError(Read(two.Stop()), "STOP with 2 values on the stack, not 1");
  std::vector<uint8_t> trailing = PickleWriter().Int(1).Stop();
  trailing.push_back('N');
  ExpectError(Read(trailing), "STOP followed by 1 more bytes");
  ExpectError(Read({0x80, 0x02, 'X', 10, 0, 0, 0, 'a'}), "needs 10 bytes but only 1 remain");
  ExpectError(Read({0x80, 0x02, 0x8a, 9}), "LONG1 of 9 bytes does not fit in 64 bits");
  ExpectError(Read({0x80, 0x02, 'h', 3, '.'}), "memo entry 3 was never stored");
  ExpectError(Read({0x80, 0x01, 'N', '.'}), "pickle protocol 1");
  PickleWriter duplicate;
  duplicate.Op('}').Op('(').Str("k").Int(1).Str("k").Int(2).Op('u');
  ExpectError(Read(duplicate.Stop()), "dict has the key 'k' twice");
  PickleWriter float_key;
  float_key.Op('}').Op('G').Le(0, 8).Int(1).Op('s');
  ExpectError(Read(float_key.Stop()), "dict key of type float");
  PickleWriter odd;
  odd.Op('(').Int(1).Op('d');
  ExpectError(Read(odd.Stop()), "DICT over 1 values");
  PickleWriter append_dict;
  append_dict.Op('}').Int(1).Op('a');
  ExpectError(Read(append_dict.Stop()), "appends to a dict, not a list");
}

TEST(TorchPickleTest, EnforcesEveryLimit) {
  PickleLimits limits;
  limits.max_mark_depth = 4;
  PickleWriter marks;
  for (int i = 0; i < 5; ++i) marks.Op('(');
  ExpectError(Read(marks.Stop(), limits), "more than 4 nested MARKs");

  limits = PickleLimits();
  limits.max_stack = 10;
  PickleWriter stack;
  for (int i = 0; i < 11; ++i) stack.Op('N');
  ExpectError(Read(stack.Stop(), limits), "stack deeper than 10 values");

  limits = PickleLimits();
  limits.max_objects = 5;
  PickleWriter objects;
  objects.Op(']').Op('(');
  for (int i = 0; i < 6; ++i) objects.Int(i);
  objects.Op('e');
  ExpectError(Read(objects.Stop(), limits), "more than 5 values");

  limits = PickleLimits();
  limits.max_container_items = 100;
  PickleWriter items;  // one list, appended to itself 101 times: no new values, many slots
  items.Op(']').Op('q').Byte(0);
  for (int i = 0; i < 101; ++i) items.Op('h').Byte(0).Op('a');
  ExpectError(Read(items.Stop(), limits), "more than 100 elements");

  limits = PickleLimits();
  limits.max_string_bytes = 3;
  ExpectError(Read(PickleWriter().Str("four").Stop(), limits),
              "BINUNICODE of 4 bytes is longer than the limit of 3");

  limits = PickleLimits();
  limits.max_memo = 2;
  PickleWriter memo;
  memo.Op('N').Op('q').Byte(0).Op('q').Byte(1).Op('q').Byte(2);
  ExpectError(Read(memo.Stop(), limits), "memo grows past 2 entries");
}

// Storage "s": 12 float32 values 0, 1, ..., 11.
class TensorPickleTest : public ::testing::Test {
 protected:
  TensorPickleTest() : storage_(12 * sizeof(float)) {
    for (int i = 0; i < 12; ++i) {
      const float v = static_cast<float>(i);
      std::memcpy(storage_.data() + 4 * i, &v, 4);
    }
  }

  absl::StatusOr<TorchCheckpoint> ReadTensor(PickleWriter& w) {
    return TorchCheckpoint::ReadPickle(
        w.Stop(), [this](absl::string_view key) -> absl::StatusOr<absl::Span<const uint8_t>> {
          if (key != "s") return absl::InvalidArgumentError(absl::StrCat("no storage ", key));
          return absl::Span<const uint8_t>(storage_);
        });
  }

  std::vector<uint8_t> storage_;
};

TEST_F(TensorPickleTest, ReadsStridedViewsInRowMajorOrder) {
  PickleWriter w;
  w.Tensor("s", 12, 1, {2, 3}, {1, 4});  // the transpose of a [3, 4] block, from element 1
  absl::StatusOr<TorchCheckpoint> c = ReadTensor(w);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->root().kind, PickleValue::Kind::kTensor);
  const TorchTensor& t = *c->root().tensor;
  EXPECT_EQ(t.dtype, TorchDType::kFloat32);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
  absl::StatusOr<std::vector<float>> values = TensorToFloats(t);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, (std::vector<float>{1, 5, 9, 2, 6, 10}));
}

TEST_F(TensorPickleTest, SizeOneDimensionsMayHaveAnyStride) {
  PickleWriter w;
  w.Tensor("s", 12, 2, {1, 3, 1}, {std::numeric_limits<int64_t>::max(), 3, int64_t{1} << 62});
  absl::StatusOr<TorchCheckpoint> c = ReadTensor(w);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<std::vector<float>> values = TensorToFloats(*c->root().tensor);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, (std::vector<float>{2, 5, 8}));
}

TEST_F(TensorPickleTest, ComplexElementsAreRealImaginaryPairs) {
  PickleWriter w;
  w.Tensor("s", 6, 2, {2}, {2}, "ComplexFloatStorage");
  absl::StatusOr<TorchCheckpoint> c = ReadTensor(w);
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<std::vector<float>> values = TensorToFloats(*c->root().tensor);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, (std::vector<float>{4, 5, 8, 9}));
}

TEST_F(TensorPickleTest, RefusesViewsOutsideTheStorage) {
  PickleWriter last_row;
  last_row.Tensor("s", 12, 0, {3, 5}, {4, 1});  // ends at element 12
  ExpectError(ReadTensor(last_row), "reaches outside its storage of 12 elements");
  PickleWriter huge_stride;
  huge_stride.Tensor("s", 12, 0, {2}, {int64_t{1} << 62});
  ExpectError(ReadTensor(huge_stride), "reaches outside its storage");
  PickleWriter negative;
  negative.Tensor("s", 12, 11, {2}, {-1});
  ExpectError(ReadTensor(negative), "both must be >= 0");
  PickleWriter wrong_numel;
  wrong_numel.Tensor("s", 13, 0, {2}, {1});
  ExpectError(ReadTensor(wrong_numel), "holds 48 bytes, but its persistent id says 13 elements");
  PickleWriter missing;
  missing.Tensor("t", 12, 0, {2}, {1});
  ExpectError(ReadTensor(missing), "no storage t");
  PickleWriter bfloat;
  bfloat.Tensor("s", 24, 0, {2}, {1}, "BFloat16Storage");
  absl::StatusOr<TorchCheckpoint> c = ReadTensor(bfloat);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(TensorToFloats(*c->root().tensor).status().ToString(),
              HasSubstr("is bfloat16; only float32 and complex64 convert to floats"));
}

// A stored ZIP archive of `entries`, as zipfile writes one (sizes in the local headers).
std::vector<uint8_t> MakeZip(const std::vector<std::pair<std::string, std::string>>& entries,
                             uint16_t method = 0) {
  std::vector<uint8_t> out;
  std::vector<uint8_t> central;
  for (const auto& [name, data] : entries) {
    const uint32_t crc = ZipCrc32(
        absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(data.data()), data.size()));
    const size_t offset = out.size();
    PutFixed32(&out, 0x04034b50);
    PutFixed16(&out, 20);
    PutFixed16(&out, 0);
    PutFixed16(&out, method);
    PutFixed32(&out, 0);
    PutFixed32(&out, crc);
    PutFixed32(&out, static_cast<uint32_t>(data.size()));
    PutFixed32(&out, static_cast<uint32_t>(data.size()));
    PutFixed16(&out, static_cast<uint16_t>(name.size()));
    PutFixed16(&out, 0);
    out.insert(out.end(), name.begin(), name.end());
    out.insert(out.end(), data.begin(), data.end());
    PutFixed32(&central, 0x02014b50);
    PutFixed16(&central, 20);
    PutFixed16(&central, 20);
    PutFixed16(&central, 0);
    PutFixed16(&central, method);
    PutFixed32(&central, 0);
    PutFixed32(&central, crc);
    PutFixed32(&central, static_cast<uint32_t>(data.size()));
    PutFixed32(&central, static_cast<uint32_t>(data.size()));
    PutFixed16(&central, static_cast<uint16_t>(name.size()));
    PutFixed16(&central, 0);
    PutFixed16(&central, 0);
    PutFixed16(&central, 0);
    PutFixed16(&central, 0);
    PutFixed32(&central, 0);
    PutFixed32(&central, static_cast<uint32_t>(offset));
    central.insert(central.end(), name.begin(), name.end());
  }
  const size_t cd_offset = out.size();
  out.insert(out.end(), central.begin(), central.end());
  PutFixed32(&out, 0x06054b50);
  PutFixed32(&out, 0);
  PutFixed16(&out, static_cast<uint16_t>(entries.size()));
  PutFixed16(&out, static_cast<uint16_t>(entries.size()));
  PutFixed32(&out, static_cast<uint32_t>(central.size()));
  PutFixed32(&out, static_cast<uint32_t>(cd_offset));
  PutFixed16(&out, 0);
  return out;
}

TEST(ZipArchiveTest, FindsEntriesAndChecksTheirCrc) {
  std::vector<uint8_t> zip = MakeZip({{"a/data.pkl", "hello"}, {"a/version", "3\n"}});
  absl::StatusOr<ZipArchive> archive = ZipArchive::Parse(zip);
  ASSERT_TRUE(archive.ok()) << archive.status();
  ASSERT_EQ(archive->entries().size(), 2u);
  const ZipEntry* entry = archive->Find("a/data.pkl");
  ASSERT_NE(entry, nullptr);
  absl::StatusOr<absl::Span<const uint8_t>> data = archive->Read(*entry);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(std::string(data->begin(), data->end()), "hello");
  EXPECT_EQ(archive->Find("a/missing"), nullptr);

  zip[30 + 10] ^= 1;  // a byte of "hello"
  archive = ZipArchive::Parse(zip);
  ASSERT_TRUE(archive.ok()) << archive.status();
  EXPECT_EQ(archive->Read(*archive->Find("a/data.pkl")).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(ZipArchiveTest, RefusesWhatTorchNeverWrites) {
  EXPECT_THAT(ZipArchive::Parse(MakeZip({{"a/x", "abc"}}, /*method=*/8)).status().ToString(),
              HasSubstr("entry 'a/x' is compressed (method 8)"));
  EXPECT_THAT(ZipArchive::Parse(MakeZip({{"a/x", "1"}, {"a/x", "2"}})).status().ToString(),
              HasSubstr("entry 'a/x' appears twice"));
  EXPECT_THAT(ZipArchive::Parse(MakeZip({})).status().ToString(), HasSubstr("has no entries"));
  std::vector<uint8_t> zip = MakeZip({{"a/x", "abc"}});
  zip.push_back(0);  // the end record no longer ends the file
  EXPECT_THAT(ZipArchive::Parse(zip).status().ToString(),
              HasSubstr("no end-of-central-directory record"));
  zip = MakeZip({{"a/x", "abc"}});
  zip[30] = 'b';  // the local header's copy of the name
  EXPECT_THAT(ZipArchive::Parse(zip).status().ToString(),
              HasSubstr("local header at offset 0 names 'b/x' but the central directory says "
                        "'a/x'"));
}

TEST(ZipArchiveTest, TorchCheckpointNeedsOnePickleAndLittleEndian) {
  const std::vector<uint8_t> pickle = PickleWriter().Int(7).Stop();
  const std::string pkl(pickle.begin(), pickle.end());
  absl::StatusOr<TorchCheckpoint> c =
      TorchCheckpoint::Read(MakeZip({{"m/data.pkl", pkl}, {"m/byteorder", "little"}}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->root().int_value, 7);
  ExpectError(TorchCheckpoint::Read(MakeZip({{"m/data.pkl", pkl}, {"m/byteorder", "big"}})),
              "byteorder is 'big'");
  ExpectError(TorchCheckpoint::Read(MakeZip({{"m/data.pkl", pkl}, {"n/data.pkl", pkl}})),
              "holds two pickles");
  ExpectError(TorchCheckpoint::Read(MakeZip({{"data.pkl", pkl}})), "no '<archive>/data.pkl' entry");
  ExpectError(TorchCheckpoint::Read(MakeZip({{"m/data.pkl", pkl}, {"m/version", "three"}})),
              "version record 'm/version' is 'three'");
}

}  // namespace
}  // namespace kvtier::triattention
