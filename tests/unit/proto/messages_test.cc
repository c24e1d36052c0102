// Tests of the public API contract (proto/kvtier/v1): every message of every file survives a
// binary and a JSON round trip with every field set; the services expose exactly the documented
// methods, each with its own request and response message; and every element of the contract is
// documented. Messages and files are enumerated through the descriptors, so new ones are covered
// without editing this test.
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/message.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "kvtier/v1/common.pb.h"
#include "kvtier/v1/layout.pb.h"
#include "kvtier/v1/service.grpc.pb.h"

namespace kvtier::v1 {
namespace {

using ::google::protobuf::Descriptor;
using ::google::protobuf::DescriptorPool;
using ::google::protobuf::EnumDescriptor;
using ::google::protobuf::FieldDescriptor;
using ::google::protobuf::FileDescriptor;
using ::google::protobuf::FileDescriptorSet;
using ::google::protobuf::Message;
using ::google::protobuf::MessageFactory;
using ::google::protobuf::MethodDescriptor;
using ::google::protobuf::OneofDescriptor;
using ::google::protobuf::Reflection;
using ::google::protobuf::ServiceDescriptor;
using ::google::protobuf::SourceLocation;
using ::google::protobuf::util::MessageDifferencer;

constexpr char kPackage[] = "kvtier.v1";
constexpr char kServiceFile[] = "kvtier/v1/service.proto";
// Deepest nesting of sub-messages the filler follows; the contract has no recursive messages, so
// reaching it means a message became recursive and this test needs a rule for it.
constexpr int kMaxDepth = 8;

// The methods of each service. Changing this list is a deliberate change of the public contract.
const std::map<std::string, std::set<std::string>>& ExpectedMethods() {
  static const auto* const kMethods = new std::map<std::string, std::set<std::string>>{
      {"kvtier.v1.KvTier",
       {"Hello", "RegisterEngine", "Unregister", "KeepAlive", "Lookup", "Offload", "Onboard",
        "Park", "Resume", "Release", "Pin", "Unpin", "Stats", "WatchEvents"}},
      {"kvtier.v1.KvTierAdmin", {"Evict", "Clear", "Verify", "Drain"}},
  };
  return *kMethods;
}

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, ',')) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

// The contract's files as proto/CMakeLists.txt lists them, e.g. "kvtier/v1/cache.proto".
std::vector<std::string> ListedFileNames() { return SplitCommas(KVTIER_PROTO_FILES); }

// The listed files from the generated pool (nullptr for a file the binary does not contain).
std::vector<const FileDescriptor*> GeneratedFiles() {
  std::vector<const FileDescriptor*> files;
  for (const std::string& name : ListedFileNames()) {
    files.push_back(DescriptorPool::generated_pool()->FindFileByName(name));
  }
  return files;
}

void CollectPackageFiles(const FileDescriptor* file, std::set<std::string>* names) {
  if (file->package() != kPackage || !names->insert(file->name()).second) return;
  for (int i = 0; i < file->dependency_count(); ++i) {
    CollectPackageFiles(file->dependency(i), names);
  }
}

void CollectMessages(const Descriptor* message, std::vector<const Descriptor*>* out) {
  if (message->options().map_entry()) return;  // covered through the map field that owns it
  out->push_back(message);
  for (int i = 0; i < message->nested_type_count(); ++i) {
    CollectMessages(message->nested_type(i), out);
  }
}

// Every message type (nested ones included) of every listed file.
std::vector<const Descriptor*> AllMessages() {
  std::vector<const Descriptor*> messages;
  for (const FileDescriptor* file : GeneratedFiles()) {
    if (file == nullptr) continue;  // reported by ContractFilesAreAllCompiledIn
    for (int i = 0; i < file->message_type_count(); ++i) {
      CollectMessages(file->message_type(i), &messages);
    }
  }
  return messages;
}

std::vector<const ServiceDescriptor*> AllServices() {
  std::vector<const ServiceDescriptor*> services;
  for (const FileDescriptor* file : GeneratedFiles()) {
    if (file == nullptr) continue;
    for (int i = 0; i < file->service_count(); ++i) services.push_back(file->service(i));
  }
  return services;
}

std::vector<const MethodDescriptor*> AllMethods() {
  std::vector<const MethodDescriptor*> methods;
  for (const ServiceDescriptor* service : AllServices()) {
    for (int i = 0; i < service->method_count(); ++i) methods.push_back(service->method(i));
  }
  return methods;
}

// Number of distinct fillings needed so that every member of every oneof of `message` is set once.
int VariantCount(const Descriptor* message) {
  int variants = 1;
  // Real oneofs come first in oneof_decl; synthetic ones (proto3 `optional`) follow them.
  for (int i = 0; i < message->real_oneof_decl_count(); ++i) {
    variants = std::max(variants, message->oneof_decl(i)->field_count());
  }
  return variants;
}

// Sets every field of a message to a non-default value through reflection: sub-messages
// recursively, two elements in each repeated field, and in each oneof the member selected by the
// variant. Values differ from field to field.
class MessageFiller {
 public:
  void Fill(Message* message, int variant) { FillMessage(message, variant, 0); }

 private:
  // True when `field` is set by this filling (false for oneof members other than the selected).
  static bool Selected(const FieldDescriptor* field, int variant) {
    const OneofDescriptor* oneof = field->real_containing_oneof();
    return oneof == nullptr || oneof->field(variant % oneof->field_count()) == field;
  }

  void FillMessage(Message* message, int variant, int depth) {
    const Descriptor* descriptor = message->GetDescriptor();
    ASSERT_LT(depth, kMaxDepth) << descriptor->full_name() << " nests too deeply";
    // Well-known types get valid values so that their JSON form exists.
    if (descriptor->full_name() == "google.protobuf.Duration" ||
        descriptor->full_name() == "google.protobuf.Timestamp") {
      const Reflection* reflection = message->GetReflection();
      reflection->SetInt64(message, descriptor->FindFieldByName("seconds"), 1000 + Next());
      reflection->SetInt32(message, descriptor->FindFieldByName("nanos"),
                           static_cast<int32_t>(500 + Next()));
      return;
    }
    for (int i = 0; i < descriptor->field_count(); ++i) {
      const FieldDescriptor* field = descriptor->field(i);
      if (!Selected(field, variant)) continue;
      if (field->is_repeated()) {
        for (int n = 0; n < 2; ++n) AddValue(message, field, depth);
      } else {
        SetValue(message, field, depth);
      }
    }
  }

  int64_t Next() { return ++counter_; }

  // A non-zero value of `field`'s enum, different on successive calls where the enum allows.
  int EnumValue(const FieldDescriptor* field) {
    const EnumDescriptor* type = field->enum_type();
    std::vector<int> non_zero;
    for (int i = 0; i < type->value_count(); ++i) {
      if (type->value(i)->number() != 0) non_zero.push_back(type->value(i)->number());
    }
    EXPECT_FALSE(non_zero.empty()) << type->full_name() << " has no non-zero value";
    if (non_zero.empty()) return 0;
    return non_zero[static_cast<size_t>(Next()) % non_zero.size()];
  }

  std::string StringValue() { return "s" + std::to_string(Next()) + " \u00e9\u4e2d"; }
  std::string BytesValue() {
    std::string bytes("\x00\xff\x7f\x80", 4);
    bytes += std::to_string(Next());
    return bytes;
  }

  void SetValue(Message* message, const FieldDescriptor* field, int depth) {
    const Reflection* reflection = message->GetReflection();
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        reflection->SetInt32(message, field, static_cast<int32_t>(-7 - Next()));
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        reflection->SetInt64(message, field, -(int64_t{1} << 40) - Next());
        break;
      case FieldDescriptor::CPPTYPE_UINT32:
        reflection->SetUInt32(message, field, 0x80000000u + static_cast<uint32_t>(Next()));
        break;
      case FieldDescriptor::CPPTYPE_UINT64:
        reflection->SetUInt64(message, field, (uint64_t{1} << 63) + static_cast<uint64_t>(Next()));
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        reflection->SetDouble(message, field, 0.5 + static_cast<double>(Next()));
        break;
      case FieldDescriptor::CPPTYPE_FLOAT:
        reflection->SetFloat(message, field, 0.25f + static_cast<float>(Next()));
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        reflection->SetBool(message, field, true);
        break;
      case FieldDescriptor::CPPTYPE_ENUM:
        reflection->SetEnumValue(message, field, EnumValue(field));
        break;
      case FieldDescriptor::CPPTYPE_STRING:
        reflection->SetString(
            message, field,
            field->type() == FieldDescriptor::TYPE_BYTES ? BytesValue() : StringValue());
        break;
      case FieldDescriptor::CPPTYPE_MESSAGE:
        FillMessage(reflection->MutableMessage(message, field), 0, depth + 1);
        break;
    }
  }

  void AddValue(Message* message, const FieldDescriptor* field, int depth) {
    const Reflection* reflection = message->GetReflection();
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        reflection->AddInt32(message, field, static_cast<int32_t>(-7 - Next()));
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        reflection->AddInt64(message, field, -(int64_t{1} << 40) - Next());
        break;
      case FieldDescriptor::CPPTYPE_UINT32:
        reflection->AddUInt32(message, field, 0x80000000u + static_cast<uint32_t>(Next()));
        break;
      case FieldDescriptor::CPPTYPE_UINT64:
        reflection->AddUInt64(message, field, (uint64_t{1} << 63) + static_cast<uint64_t>(Next()));
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        reflection->AddDouble(message, field, 0.5 + static_cast<double>(Next()));
        break;
      case FieldDescriptor::CPPTYPE_FLOAT:
        reflection->AddFloat(message, field, 0.25f + static_cast<float>(Next()));
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        reflection->AddBool(message, field, true);
        break;
      case FieldDescriptor::CPPTYPE_ENUM:
        reflection->AddEnumValue(message, field, EnumValue(field));
        break;
      case FieldDescriptor::CPPTYPE_STRING:
        reflection->AddString(
            message, field,
            field->type() == FieldDescriptor::TYPE_BYTES ? BytesValue() : StringValue());
        break;
      case FieldDescriptor::CPPTYPE_MESSAGE:
        FillMessage(reflection->AddMessage(message, field), 0, depth + 1);
        break;
    }
  }

  int64_t counter_ = 0;
};

// Names of the fields of `message` that the given variant should have set but are not (or do not
// have two elements), so a filler that silently skips a field type fails the test.
std::vector<std::string> UnsetFields(const Message& message, int variant) {
  std::vector<std::string> unset;
  const Descriptor* descriptor = message.GetDescriptor();
  const Reflection* reflection = message.GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    const OneofDescriptor* oneof = field->real_containing_oneof();
    if (oneof != nullptr && oneof->field(variant % oneof->field_count()) != field) continue;
    bool set = field->is_repeated() ? reflection->FieldSize(message, field) == 2
                                    : reflection->HasField(message, field);
    if (!set) unset.push_back(field->name());
  }
  return unset;
}

std::unique_ptr<Message> NewMessage(const Descriptor* descriptor) {
  const Message* prototype = MessageFactory::generated_factory()->GetPrototype(descriptor);
  return std::unique_ptr<Message>(prototype == nullptr ? nullptr : prototype->New());
}

TEST(ProtoFilesTest, ContractFilesAreAllCompiledIn) {
  std::vector<std::string> listed = ListedFileNames();
  ASSERT_FALSE(listed.empty()) << "KVTIER_PROTO_FILES is empty";
  std::vector<const FileDescriptor*> files = GeneratedFiles();
  for (size_t i = 0; i < listed.size(); ++i) {
    ASSERT_NE(files[i], nullptr) << listed[i]
                                 << " is not in the generated pool: service.proto must import it "
                                    "(kvtier_proto keeps service.pb.o linked)";
    EXPECT_EQ(files[i]->package(), kPackage) << listed[i];
    EXPECT_EQ(files[i]->syntax(), FileDescriptor::SYNTAX_PROTO3) << listed[i];
  }
}

TEST(ProtoFilesTest, ServiceFileImportsExactlyTheListedFiles) {
  // The generated pool of every binary that links kvtier_proto holds every file (needed by gRPC
  // server reflection) because service.proto reaches all of them.
  const ServiceDescriptor* service =
      DescriptorPool::generated_pool()->FindServiceByName(std::string(KvTier::service_full_name()));
  ASSERT_NE(service, nullptr) << "service.proto is not linked in";
  const FileDescriptor* service_file = service->file();
  EXPECT_EQ(service_file->name(), kServiceFile);
  std::set<std::string> reachable;
  CollectPackageFiles(service_file, &reachable);
  std::vector<std::string> listed_vector = ListedFileNames();
  std::set<std::string> listed(listed_vector.begin(), listed_vector.end());
  EXPECT_EQ(reachable, listed);
}

TEST(ProtoFilesTest, EnumerationFindsTheContractsMessages) {
  std::set<std::string> names;
  for (const Descriptor* message : AllMessages()) names.insert(message->full_name());
  // Spot checks that enumeration walks more than one file.
  EXPECT_TRUE(names.count(PageLayout::descriptor()->full_name()));
  EXPECT_TRUE(names.count(ItemResult::descriptor()->full_name()));
  EXPECT_TRUE(names.count("kvtier.v1.Event"));
  EXPECT_TRUE(names.count("kvtier.v1.PoolRegistration"));
  for (const MethodDescriptor* method : AllMethods()) {
    EXPECT_TRUE(names.count(method->input_type()->full_name()))
        << method->full_name() << " takes " << method->input_type()->full_name()
        << ", which is not a message of the contract's files";
    EXPECT_TRUE(names.count(method->output_type()->full_name()))
        << method->full_name() << " returns " << method->output_type()->full_name()
        << ", which is not a message of the contract's files";
  }
}

class MessageRoundTripTest : public testing::TestWithParam<std::string> {};

TEST_P(MessageRoundTripTest, EveryFieldSurvivesBinaryAndJson) {
  const Descriptor* descriptor =
      DescriptorPool::generated_pool()->FindMessageTypeByName(GetParam());
  ASSERT_NE(descriptor, nullptr) << GetParam();
  for (int variant = 0; variant < VariantCount(descriptor); ++variant) {
    SCOPED_TRACE("variant " + std::to_string(variant));
    std::unique_ptr<Message> original = NewMessage(descriptor);
    ASSERT_NE(original, nullptr) << "no generated class for " << GetParam();
    MessageFiller filler;
    filler.Fill(original.get(), variant);
    ASSERT_FALSE(testing::Test::HasFatalFailure());
    std::vector<std::string> unset = UnsetFields(*original, variant);
    EXPECT_TRUE(unset.empty()) << "fields left at their default: " << testing::PrintToString(unset);

    std::string wire;
    ASSERT_TRUE(original->SerializeToString(&wire));
    EXPECT_FALSE(wire.empty());
    std::unique_ptr<Message> parsed = NewMessage(descriptor);
    ASSERT_TRUE(parsed->ParseFromString(wire));
    EXPECT_TRUE(parsed->GetReflection()->GetUnknownFields(*parsed).empty());
    MessageDifferencer binary_differ;
    std::string binary_report;
    binary_differ.ReportDifferencesToString(&binary_report);
    EXPECT_TRUE(binary_differ.Compare(*original, *parsed)) << binary_report;

    // kvtierctl --json and the layout JSON rely on the JSON mapping too.
    std::string json;
    ASSERT_TRUE(google::protobuf::util::MessageToJsonString(*original, &json).ok());
    std::unique_ptr<Message> from_json = NewMessage(descriptor);
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, from_json.get()).ok()) << json;
    MessageDifferencer json_differ;
    std::string json_report;
    json_differ.ReportDifferencesToString(&json_report);
    EXPECT_TRUE(json_differ.Compare(*original, *from_json)) << json_report << "\n" << json;
  }
}

std::vector<std::string> AllMessageNames() {
  std::vector<std::string> names;
  for (const Descriptor* message : AllMessages()) names.push_back(message->full_name());
  return names;
}

std::string TestNameOf(const testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  std::replace(name.begin(), name.end(), '.', '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(AllMessages, MessageRoundTripTest, testing::ValuesIn(AllMessageNames()),
                         TestNameOf);

TEST(ServiceTest, ServicesExposeExactlyTheExpectedMethods) {
  std::map<std::string, std::set<std::string>> actual;
  for (const ServiceDescriptor* service : AllServices()) {
    std::set<std::string>& methods = actual[service->full_name()];
    for (int i = 0; i < service->method_count(); ++i) methods.insert(service->method(i)->name());
  }
  EXPECT_EQ(actual, ExpectedMethods());
  EXPECT_EQ(KvTier::service_full_name(), std::string("kvtier.v1.KvTier"));
  EXPECT_EQ(KvTierAdmin::service_full_name(), std::string("kvtier.v1.KvTierAdmin"));
}

TEST(ServiceTest, OnlyWatchEventsStreamsAndOnlyFromTheServer) {
  const ServiceDescriptor* service =
      DescriptorPool::generated_pool()->FindServiceByName("kvtier.v1.KvTier");
  ASSERT_NE(service, nullptr);
  const MethodDescriptor* watch = service->FindMethodByName("WatchEvents");
  ASSERT_NE(watch, nullptr);
  EXPECT_TRUE(watch->server_streaming());
  EXPECT_FALSE(watch->client_streaming());
  for (const MethodDescriptor* method : AllMethods()) {
    EXPECT_FALSE(method->client_streaming()) << method->full_name();
    if (method != watch) {
      EXPECT_FALSE(method->server_streaming()) << method->full_name();
    }
  }
}

TEST(ServiceTest, EveryMethodHasItsOwnRequestAndResponse) {
  std::map<std::string, int> uses;
  for (const MethodDescriptor* method : AllMethods()) {
    const std::string prefix = std::string(kPackage) + "." + method->name();
    EXPECT_EQ(method->input_type()->full_name(), prefix + "Request") << method->full_name();
    EXPECT_EQ(method->output_type()->full_name(), prefix + "Response") << method->full_name();
    ++uses[method->input_type()->full_name()];
    ++uses[method->output_type()->full_name()];
  }
  for (const auto& [type, count] : uses) EXPECT_EQ(count, 1) << type << " is shared by methods";
  // And no request or response message is left without its method.
  for (const Descriptor* message : AllMessages()) {
    const std::string& name = message->name();
    bool rpc_shaped = (name.size() > 7 && name.ends_with("Request")) ||
                      (name.size() > 8 && name.ends_with("Response"));
    if (rpc_shaped) {
      EXPECT_TRUE(uses.count(message->full_name())) << message->full_name();
    }
  }
}

// ---- Documentation: every element of the contract carries a leading comment, and every field's
// comment says who sets it. Checked on the descriptor set protoc wrote with source info.

class DocumentationChecker {
 public:
  explicit DocumentationChecker(std::vector<std::string>* problems) : problems_(problems) {}

  void CheckFile(const FileDescriptor* file) {
    for (int i = 0; i < file->message_type_count(); ++i) CheckMessage(file->message_type(i));
    for (int i = 0; i < file->enum_type_count(); ++i) CheckEnum(file->enum_type(i));
    for (int i = 0; i < file->service_count(); ++i) {
      const ServiceDescriptor* service = file->service(i);
      Require(service, service->full_name());
      for (int m = 0; m < service->method_count(); ++m) {
        Require(service->method(m), service->method(m)->full_name());
      }
    }
  }

 private:
  template <typename T>
  std::string Comment(const T* element) {
    SourceLocation location;
    if (!element->GetSourceLocation(&location)) return "";
    const std::string& text = location.leading_comments;
    size_t begin = text.find_first_not_of(" \n\t");
    return begin == std::string::npos ? "" : text.substr(begin);
  }

  template <typename T>
  std::string Require(const T* element, const std::string& name) {
    std::string comment = Comment(element);
    if (comment.empty()) problems_->push_back(name + ": no leading comment");
    return comment;
  }

  void CheckMessage(const Descriptor* message) {
    Require(message, message->full_name());
    for (int i = 0; i < message->field_count(); ++i) {
      const FieldDescriptor* field = message->field(i);
      std::string comment = Require(field, field->full_name());
      if (!comment.empty() && comment.find("Set by:") == std::string::npos) {
        problems_->push_back(field->full_name() + ": comment does not say \"Set by:\"");
      }
    }
    for (int i = 0; i < message->real_oneof_decl_count(); ++i) {
      Require(message->oneof_decl(i), message->oneof_decl(i)->full_name());
    }
    for (int i = 0; i < message->nested_type_count(); ++i) {
      if (!message->nested_type(i)->options().map_entry()) CheckMessage(message->nested_type(i));
    }
    for (int i = 0; i < message->enum_type_count(); ++i) CheckEnum(message->enum_type(i));
  }

  void CheckEnum(const EnumDescriptor* type) {
    Require(type, type->full_name());
    for (int i = 0; i < type->value_count(); ++i) {
      Require(type->value(i), type->value(i)->full_name());
    }
  }

  std::vector<std::string>* problems_;
};

TEST(DocumentationTest, EveryElementIsDocumented) {
  std::ifstream in(KVTIER_PROTO_DESCRIPTOR_SET, std::ios::binary);
  ASSERT_TRUE(in.good()) << "cannot open " << KVTIER_PROTO_DESCRIPTOR_SET;
  FileDescriptorSet set;
  ASSERT_TRUE(set.ParseFromIstream(&in)) << KVTIER_PROTO_DESCRIPTOR_SET;
  DescriptorPool pool;
  for (const auto& file_proto : set.file()) {
    ASSERT_NE(pool.BuildFile(file_proto), nullptr) << file_proto.name();
  }
  std::vector<std::string> problems;
  DocumentationChecker checker(&problems);
  for (const std::string& name : ListedFileNames()) {
    const FileDescriptor* documented = pool.FindFileByName(name);
    ASSERT_NE(documented, nullptr) << name << " is missing from " << KVTIER_PROTO_DESCRIPTOR_SET;
    // The descriptor set describes the same contract as the compiled code.
    const FileDescriptor* compiled = DescriptorPool::generated_pool()->FindFileByName(name);
    ASSERT_NE(compiled, nullptr) << name;
    google::protobuf::FileDescriptorProto documented_proto;
    google::protobuf::FileDescriptorProto compiled_proto;
    documented->CopyTo(&documented_proto);
    compiled->CopyTo(&compiled_proto);
    documented->CopyJsonNameTo(&documented_proto);  // protoc writes json_name; make both explicit
    compiled->CopyJsonNameTo(&compiled_proto);
    std::string stale_report;
    MessageDifferencer stale_differ;
    stale_differ.ReportDifferencesToString(&stale_report);
    EXPECT_TRUE(stale_differ.Compare(compiled_proto, documented_proto)) << name << ":\n"
                                                                        << stale_report;
    checker.CheckFile(documented);
  }
  std::string report;
  for (const std::string& problem : problems) report += "\n  " + problem;
  EXPECT_TRUE(problems.empty()) << problems.size() << " undocumented elements:" << report;
}

}  // namespace
}  // namespace kvtier::v1
