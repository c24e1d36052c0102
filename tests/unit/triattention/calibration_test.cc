// Tests of the calibration loaders (triattention/calibration.h) on files that make_calibration.py
// writes at test time, with Debian's /usr/bin/python3 and the standard library only: official
// torch.save files in several layouts (zipfile, torch's miniz layout, strided shared storages,
// minimal metadata), the flat form and safetensors, whose values must come out exactly and agree
// with each other; hostile variants, each of which must fail with the code and message a user
// would need; and CheckGeometry.
#include "triattention/calibration.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/special_files.h"

extern char** environ;

namespace kvtier::triattention {
namespace {

using ::testing::HasSubstr;

constexpr char kPython[] = "/usr/bin/python3";
constexpr char kScript[] = KVTIER_MAKE_CALIBRATION_SCRIPT;

// The fixture geometry and values, as make_calibration.py writes them.
constexpr int kLayers = 3;
constexpr int kHeads = 4;
constexpr int kBands = 8;
constexpr int kMissingLayer = 1;
constexpr int kMissingHead = 2;

float Real(int l, int h, int f) { return static_cast<float>(l + h / 100.0 + f / 10000.0); }
float Imag(int l, int h, int f) { return static_cast<float>(h / 10.0 - (l + 1) - f / 1000.0); }
float Abs(int l, int h, int f) { return static_cast<float>(2 + l + h / 10.0 + f / 100.0); }
size_t Index(int l, int h, int f) { return (static_cast<size_t>(l) * kHeads + h) * kBands + f; }

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class CalibrationFilesTest : public ::testing::Test {
 protected:
  // Writes every fixture once for the whole suite.
  static void SetUpTestSuite() {
    std::string pattern = (std::filesystem::path(::testing::TempDir()) / "calibration_XXXXXX");
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << std::strerror(errno);
    dir_ = new std::string(pattern);
    ASSERT_EQ(::access(kPython, X_OK), 0)
        << kPython << " is needed to write the calibration fixtures (apt-get install python3)";
    std::vector<char*> argv = {const_cast<char*>(kPython), const_cast<char*>(kScript), dir_->data(),
                               nullptr};
    pid_t pid = 0;
    const int spawn_error = posix_spawn(&pid, kPython, nullptr, nullptr, argv.data(), environ);
    ASSERT_EQ(spawn_error, 0) << "cannot run " << kPython << ": " << std::strerror(spawn_error);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid) << std::strerror(errno);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << kScript << " failed with status " << status;
  }

  static void TearDownTestSuite() {
    if (dir_ != nullptr) std::filesystem::remove_all(*dir_);
    delete dir_;
    dir_ = nullptr;
  }

  void SetUp() override { ASSERT_NE(dir_, nullptr); }

  static std::string Path(const std::string& name) { return *dir_ + "/" + name; }

  static Calibration Load(const std::string& name) {
    absl::StatusOr<Calibration> c = LoadCalibration(Path(name));
    EXPECT_TRUE(c.ok()) << name << ": " << c.status();
    return c.ok() ? *std::move(c) : Calibration();
  }

  // The statistics of the fixture; with `all_present`, the left-out head is present with zeros
  // (as the flat and safetensors forms carry it).
  static void ExpectFixtureValues(const Calibration& c, bool all_present) {
    ASSERT_EQ(c.layers, kLayers);
    ASSERT_EQ(c.heads, kHeads);
    ASSERT_EQ(c.bands, kBands);
    EXPECT_EQ(c.head_dim, 2 * kBands);
    EXPECT_EQ(c.rope_style, "half");
    ASSERT_EQ(c.q_mean_real.size(), size_t{kLayers * kHeads * kBands});
    ASSERT_EQ(c.q_mean_imag.size(), c.q_mean_real.size());
    ASSERT_EQ(c.q_abs_mean.size(), c.q_mean_real.size());
    ASSERT_EQ(c.present.size(), size_t{kLayers * kHeads});
    for (int l = 0; l < kLayers; ++l) {
      for (int h = 0; h < kHeads; ++h) {
        const bool missing = l == kMissingLayer && h == kMissingHead;
        EXPECT_EQ(c.present[l * kHeads + h], missing && !all_present ? 0 : 1) << l << "," << h;
        for (int f = 0; f < kBands; ++f) {
          const size_t i = Index(l, h, f);
          EXPECT_EQ(c.q_mean_real[i], missing ? 0.0f : Real(l, h, f)) << l << "," << h << "," << f;
          EXPECT_EQ(c.q_mean_imag[i], missing ? 0.0f : Imag(l, h, f)) << l << "," << h << "," << f;
          EXPECT_EQ(c.q_abs_mean[i], missing ? 0.0f : Abs(l, h, f)) << l << "," << h << "," << f;
        }
      }
    }
  }

  static void ExpectRopeTables(const Calibration& c) {
    ASSERT_TRUE(c.omega.has_value());
    ASSERT_TRUE(c.freq_scale_sq.has_value());
    ASSERT_EQ(c.omega->size(), size_t{kBands});
    ASSERT_EQ(c.freq_scale_sq->size(), size_t{kBands});
    for (int f = 0; f < kBands; ++f) {
      EXPECT_EQ((*c.omega)[f], std::ldexp(1.0f, -f)) << f;
      EXPECT_EQ((*c.freq_scale_sq)[f], 1.5625f) << f;
    }
  }

  static std::string* dir_;
};

std::string* CalibrationFilesTest::dir_ = nullptr;

TEST_F(CalibrationFilesTest, OfficialFileLoadsExactValues) {
  const Calibration c = Load("official.pt");
  ExpectFixtureValues(c, /*all_present=*/false);
  EXPECT_EQ(c.model_name, "test/tiny-model");
  EXPECT_FALSE(c.omega.has_value());
  EXPECT_FALSE(c.freq_scale_sq.has_value());
}

TEST_F(CalibrationFilesTest, OfficialLayoutsAgree) {
  // torch's own zip layout (data descriptors, 64-byte padding, ZIP64 end records), the CPU
  // calibrate.py layout (stride-2 views of a shared storage, slices at offsets), and metadata
  // without sampled_heads, model_name or head_dim.
  const Calibration reference = Load("official.pt");
  for (const char* name :
       {"official_miniz.pt", "official_strided.pt", "official_minimal_metadata.pt"}) {
    SCOPED_TRACE(name);
    const Calibration c = Load(name);
    ExpectFixtureValues(c, /*all_present=*/false);
    EXPECT_EQ(c.q_mean_real, reference.q_mean_real);
    EXPECT_EQ(c.q_mean_imag, reference.q_mean_imag);
    EXPECT_EQ(c.q_abs_mean, reference.q_abs_mean);
    EXPECT_EQ(c.present, reference.present);
  }
  EXPECT_EQ(Load("official_minimal_metadata.pt").model_name, "");
}

TEST_F(CalibrationFilesTest, FlatFileLoadsExactValues) {
  const Calibration c = Load("flat.pt");
  ExpectFixtureValues(c, /*all_present=*/true);
  ExpectRopeTables(c);
  EXPECT_EQ(c.model_name, "");
}

TEST_F(CalibrationFilesTest, SafetensorsFileLoadsExactValues) {
  const Calibration c = Load("calibration.safetensors");
  ExpectFixtureValues(c, /*all_present=*/true);
  ExpectRopeTables(c);
  EXPECT_EQ(c.model_name, "test/tiny-model");
}

TEST_F(CalibrationFilesTest, SafetensorsHeaderStartingWithAPickleByteLoads) {
  const Calibration c = Load("header_0x380.safetensors");
  ExpectFixtureValues(c, /*all_present=*/true);
  ExpectRopeTables(c);
}

TEST_F(CalibrationFilesTest, ThreeFormsAgree) {
  const Calibration official = Load("official.pt");
  const Calibration flat = Load("flat.pt");
  const Calibration safetensors = Load("calibration.safetensors");
  for (const Calibration* c : {&flat, &safetensors}) {
    EXPECT_EQ(c->layers, official.layers);
    EXPECT_EQ(c->heads, official.heads);
    EXPECT_EQ(c->bands, official.bands);
    EXPECT_EQ(c->head_dim, official.head_dim);
    EXPECT_EQ(c->q_mean_real, official.q_mean_real);
    EXPECT_EQ(c->q_mean_imag, official.q_mean_imag);
    EXPECT_EQ(c->q_abs_mean, official.q_abs_mean);
  }
  EXPECT_EQ(flat.omega, safetensors.omega);
  EXPECT_EQ(flat.freq_scale_sq, safetensors.freq_scale_sq);
}

TEST_F(CalibrationFilesTest, ParseFunctionsMatchLoadAndRefuseTheOtherForm) {
  const std::vector<uint8_t> torch_bytes = ReadBytes(Path("official.pt"));
  const std::vector<uint8_t> st_bytes = ReadBytes(Path("calibration.safetensors"));
  absl::StatusOr<Calibration> from_torch = ParseTorchCalibration(torch_bytes);
  ASSERT_TRUE(from_torch.ok()) << from_torch.status();
  EXPECT_EQ(from_torch->q_abs_mean, Load("official.pt").q_abs_mean);
  absl::StatusOr<Calibration> from_st = ParseSafetensorsCalibration(st_bytes);
  ASSERT_TRUE(from_st.ok()) << from_st.status();
  EXPECT_EQ(from_st->q_mean_imag, Load("calibration.safetensors").q_mean_imag);

  absl::StatusOr<Calibration> wrong = ParseTorchCalibration(st_bytes);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.status().ToString(), HasSubstr("no end-of-central-directory record"));
  wrong = ParseSafetensorsCalibration(torch_bytes);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.status().ToString(), HasSubstr("safetensors header length"));
  wrong = ParseSafetensorsCalibration({});
  EXPECT_THAT(wrong.status().ToString(), HasSubstr("too short"));
  wrong = ParseTorchCalibration({});
  EXPECT_THAT(wrong.status().ToString(), HasSubstr("too short"));
}

struct HostileFile {
  const char* name;
  absl::StatusCode code;
  const char* message;  // a substring of the error
};

void PrintTo(const HostileFile& file, std::ostream* os) { *os << file.name; }

class HostileCalibrationTest : public CalibrationFilesTest,
                               public ::testing::WithParamInterface<HostileFile> {};

TEST_P(HostileCalibrationTest, FailsWithAPreciseMessage) {
  const HostileFile& file = GetParam();
  absl::StatusOr<Calibration> c = LoadCalibration(Path(file.name));
  ASSERT_FALSE(c.ok()) << file.name << " loaded";
  EXPECT_EQ(c.status().code(), file.code) << c.status();
  EXPECT_THAT(c.status().ToString(), HasSubstr(file.message));
  // Every error names the file.
  EXPECT_THAT(c.status().ToString(), HasSubstr(file.name));
}

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

INSTANTIATE_TEST_SUITE_P(
    Files, HostileCalibrationTest,
    ::testing::Values(
        // Code instead of data.
        HostileFile{"global_os_system.pt", kInvalid,
                    "calibration pickle uses os.system, which a calibration file does not need"},
        HostileFile{"global_builtins_eval.pt", kInvalid,
                    "calibration pickle uses builtins.eval, which a calibration file does not "
                    "need"},
        HostileFile{"opcode_inst.pt", kInvalid, "uses opcode 0x69 ('i')"},
        HostileFile{"backward_hooks.pt", kInvalid, "backward_hooks is a dict that is not empty"},
        // Broken containers.
        HostileFile{"compressed.pt", kInvalid,
                    "entry 'archive/data.pkl' is compressed (method 8); torch.save writes stored"},
        HostileFile{"truncated_zip.pt", kInvalid, "no end-of-central-directory record"},
        HostileFile{"truncated_pickle.pt", kInvalid, "without STOP"},
        HostileFile{"zip64_end_record.pt", kInvalid, "ZIP64 sizes are not supported"},
        HostileFile{"byteorder_big.pt", kInvalid,
                    "byteorder is 'big'; only little-endian files are supported"},
        HostileFile{"crc_mismatch.pt", absl::StatusCode::kDataLoss,
                    "entry 'archive/data/0' (32 bytes) has CRC-32"},
        HostileFile{"legacy.pt", kInvalid, "legacy (pre-zip, torch < 1.6) torch.save pickle"},
        // Broken storages.
        HostileFile{"storage_missing.pt", kInvalid,
                    "names storage '5', but the archive has no entry 'archive/data/5'"},
        HostileFile{"storage_offset_out_of_range.pt", kInvalid,
                    "with offset 3, shape [8] and strides [1] reaches outside its storage of 8 "
                    "elements"},
        HostileFile{"storage_size_mismatch.pt", kInvalid,
                    "holds 32 bytes, but its persistent id says 9 elements of torch.FloatStorage"},
        // Wrong content.
        HostileFile{"root_list.pt", kInvalid, "holds a list; expected a dict"},
        HostileFile{"neither_form.pt", kInvalid,
                    "neither 'stats' (official form) nor 'E_q' (flat form); its keys: 'foo', "
                    "'bar'"},
        HostileFile{"wrong_dtype.pt", kInvalid,
                    "stats['layer00_head01']['q_mean_real'] is bfloat16; expected float32"},
        HostileFile{"mismatched_lengths.pt", kInvalid,
                    "stats['layer02_head03']['q_abs_mean'] has 7 values, but "
                    "stats['layer00_head00']['q_mean_real'] has 8"},
        HostileFile{"nan.pt", kInvalid,
                    "stats['layer00_head02']['q_mean_imag'] has the non-finite value nan at [3]"},
        HostileFile{"negative_abs.pt", kInvalid,
                    "stats['layer01_head00']['q_abs_mean'] has the negative value -0.5 at [5]"},
        HostileFile{"rope_interleaved.pt", kInvalid, "rope_style is 'interleaved'; only 'half'"},
        HostileFile{"duplicate_sampled.pt", kInvalid, "sampled_heads lists [0, 1] twice"},
        HostileFile{"unsampled_stats.pt", kInvalid,
                    "stats entry 'layer02_head00' is not listed in metadata sampled_heads"},
        HostileFile{"sampled_without_stats.pt", kInvalid,
                    "sampled_heads lists [1, 2], but stats has no 'layer01_head02' entry"},
        HostileFile{"bad_key.pt", kInvalid,
                    "stats key 'layer1_head03' is not of the form layerLL_headHH"},
        HostileFile{"head_dim_mismatch.pt", kInvalid,
                    "head_dim is 32, but stats['layer00_head00']['q_mean_real'] has 8 frequency "
                    "bands (head_dim 16)"},
        HostileFile{"flat_missing_key.pt", kInvalid,
                    "flat calibration file has no 'freq_scale_sq'"},
        HostileFile{"flat_wrong_dtype.pt", kInvalid, "E_q is float32; expected complex64"},
        // Safetensors.
        HostileFile{"st_truncated.safetensors", kInvalid,
                    "safetensors tensor 'E_q_norm' has data_offsets [768, 1152] outside the "
                    "data region of 1140 bytes"},
        HostileFile{"st_header_too_long.safetensors", kInvalid,
                    "safetensors header length 1099511627776 exceeds the limit"},
        HostileFile{"st_f16.safetensors", kInvalid, "E_q_norm is F16; expected F32"},
        HostileFile{"st_missing.safetensors", kInvalid,
                    "safetensors calibration file has no 'E_q_imag' tensor"},
        HostileFile{"st_shape_mismatch.safetensors", kInvalid,
                    "E_q_imag has shape [3, 8, 4], but E_q_real has [3, 4, 8]"},
        HostileFile{"st_inf.safetensors", kInvalid,
                    "calibration tensor omega has the non-finite value inf at [2]"},
        HostileFile{"st_rope_interleaved.safetensors", kInvalid,
                    "safetensors metadata rope_style is 'interleaved'"},
        HostileFile{"st_overlap.safetensors", kInvalid,
                    "safetensors tensor 'omega' starts at 1180, but tensor 'freq_scale_sq' ends "
                    "at 1184 (overlap)"},
        HostileFile{"st_out_of_range.safetensors", kInvalid,
                    "safetensors tensor 'token_count' has data_offsets [1216, 1248] outside the "
                    "data region of 1240 bytes"},
        HostileFile{"st_size_mismatch.safetensors", kInvalid,
                    "safetensors tensor 'omega' spans 32 bytes, but F32 [9] needs 36"},
        HostileFile{"st_duplicate_key.safetensors", kInvalid,
                    "safetensors header has the key 'omega' twice"}),
    [](const ::testing::TestParamInfo<HostileFile>& info) {
      std::string name = info.param.name;
      for (char& ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return name;
    });

TEST_F(CalibrationFilesTest, LoadReportsFileSystemErrors) {
  absl::StatusOr<Calibration> c = LoadCalibration(Path("does_not_exist.pt"));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(c.status().ToString(), HasSubstr("does_not_exist.pt"));
  c = LoadCalibration(*dir_);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().ToString(), HasSubstr("is a directory, not a regular file"));
}

// A FIFO, a socket and a device are refused at once, without waiting for a writer (the loader used
// to open a FIFO for reading and hang there until one came).
TEST_F(CalibrationFilesTest, LoadRefusesFilesThatAreNotRegularWithoutBlocking) {
  const std::string fifo = Path("calibration.fifo");
  ASSERT_TRUE(kvtier::testing::MakeFifo(fifo));
  std::optional<absl::Status> st =
      kvtier::testing::CallGuardingFifo(fifo, [&] { return LoadCalibration(fifo).status(); });
  ::unlink(fifo.c_str());
  ASSERT_TRUE(st.has_value()) << "LoadCalibration blocked on a FIFO";
  EXPECT_EQ(st->code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st->message(),
            "calibration file " + fifo + " is a FIFO (named pipe), not a regular file");

  const std::string socket_path = Path("calibration.sock");
  const int fd = kvtier::testing::BindUnixSocket(socket_path);
  ASSERT_GE(fd, 0);
  const absl::Status socket_status = LoadCalibration(socket_path).status();
  ::close(fd);
  ::unlink(socket_path.c_str());
  EXPECT_EQ(socket_status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(socket_status.message(), HasSubstr("is a socket, not a regular file"));

  const absl::Status device = LoadCalibration("/dev/zero").status();
  EXPECT_EQ(device.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(device.message(), HasSubstr("/dev/zero is a character device, not a regular file"));
}

TEST(CheckGeometryTest, AcceptsTheMatchingModel) {
  Calibration c;
  c.layers = 36;
  c.heads = 32;
  c.bands = 64;
  c.head_dim = 128;
  EXPECT_TRUE(CheckGeometry(c, 36, 32, 128).ok());
}

TEST(CheckGeometryTest, NamesBothSidesOfEachMismatch) {
  Calibration c;
  c.layers = 36;
  c.heads = 32;
  c.bands = 64;
  c.head_dim = 128;
  absl::Status s = CheckGeometry(c, 28, 32, 128);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "calibration has 36 layers, the model 28");
  s = CheckGeometry(c, 36, 28, 128);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "calibration has 32 query heads, the model 28");
  s = CheckGeometry(c, 36, 32, 64);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "calibration has head_dim 128 (64 frequency bands), the model 64");
  s = CheckGeometry(c, 0, 32, 128);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.ToString(), HasSubstr("model geometry must be positive"));
}

TEST_F(CalibrationFilesTest, LoadedFixtureChecksAgainstItsGeometry) {
  const Calibration c = Load("official.pt");
  EXPECT_TRUE(CheckGeometry(c, kLayers, kHeads, 2 * kBands).ok());
  EXPECT_EQ(CheckGeometry(c, 28, kHeads, 2 * kBands).message(),
            "calibration has 3 layers, the model 28");
}

}  // namespace
}  // namespace kvtier::triattention
