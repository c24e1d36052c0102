// `kvtier-codec encode`, `decode` and `inspect`: files of flat pages <-> files of cold blocks.
// Files are streamed one page or block at a time, so memory stays at one page plus one block
// whatever the file size. Outputs are written under a temporary name and renamed when complete.
// The block size of a file comes from its first block's header (ParseColdBlockHeaderPrefix); every
// block is then checked whole by the codec.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "codec/codec.h"
#include "codec/cold_block.h"
#include "common/annotate.h"
#include "common/file_reading.h"
#include "common/status_macros.h"
#include "tools/codec/commands.h"
#include "tools/codec/file_io.h"

namespace kvtier::tools {
namespace {

std::string FormatRatio(uint64_t hot_bytes, uint64_t block_bytes) {
  return absl::StrFormat("%.3fx",
                         static_cast<double>(hot_bytes) / static_cast<double>(block_bytes));
}

}  // namespace

absl::StatusOr<codec::PageLayout> LoadLayoutFile(const std::string& path) {
  constexpr uint64_t kMaxLayoutBytes = uint64_t{64} << 20;
  KVTIER_ASSIGN_OR_RETURN(std::string json, ReadRegularFile(path, kMaxLayoutBytes, "input file"));
  absl::StatusOr<codec::PageLayout> layout = codec::ParseLayoutJson(json);
  if (!layout.ok()) return WithContext(path, layout.status());
  return layout;
}

absl::StatusOr<codec::CodecSpec> CodecSpecFromFlags(const cli::Values& flags) {
  KVTIER_ASSIGN_OR_RETURN(std::string text, flags.RequiredString("codec"));
  absl::StatusOr<codec::CodecSpec> spec = codec::CodecSpec::Parse(text);
  if (!spec.ok()) return cli::UsageError(absl::StrCat("flag --codec: ", spec.status().message()));
  KVTIER_ASSIGN_OR_RETURN(std::optional<uint32_t> alignment, flags.OptionalUint32("alignment"));
  if (alignment.has_value()) spec->alignment_bytes = *alignment;
  return spec;
}

absl::StatusOr<std::unique_ptr<codec::Codec>> CreateCodec(const codec::PageLayout& layout,
                                                          const codec::CodecSpec& spec,
                                                          absl::string_view layout_name) {
  absl::StatusOr<std::unique_ptr<codec::Codec>> codec = codec::Codec::Create(layout, spec);
  if (!codec.ok()) {
    return WithContext(absl::StrCat("cannot use codec ", spec.ToString(), " (alignment ",
                                    spec.alignment_bytes, ") with layout ", layout_name),
                       codec.status());
  }
  return codec;
}

absl::Status WithContext(absl::string_view context, const absl::Status& status) {
  return Annotate(status, absl::StrCat(context, ": ", absl::StatusCodeToString(status.code())));
}

absl::Status BlockError(absl::string_view path, uint64_t index, uint64_t offset,
                        const absl::Status& status) {
  return WithContext(absl::StrCat(path, ": block ", index, " at offset ", offset), status);
}

absl::StatusOr<codec::ColdBlockHeader> ProbeFirstBlockHeader(const std::string& path) {
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  absl::StatusOr<codec::ColdBlockHeader> header = codec::ParseColdBlockHeaderPrefix(file->data());
  if (!header.ok()) {
    return WithContext(absl::StrCat(path, ": block 0 at offset 0"), header.status());
  }
  return header;
}

absl::Status RunEncode(const cli::Values& flags) {
  KVTIER_ASSIGN_OR_RETURN(std::string layout_path, flags.RequiredString("layout"));
  KVTIER_ASSIGN_OR_RETURN(codec::CodecSpec spec, CodecSpecFromFlags(flags));
  KVTIER_ASSIGN_OR_RETURN(std::string in_path, flags.RequiredString("in"));
  KVTIER_ASSIGN_OR_RETURN(std::string out_path, flags.RequiredString("out"));
  KVTIER_RETURN_IF_ERROR(CheckDistinctFiles(in_path, out_path));

  KVTIER_ASSIGN_OR_RETURN(codec::PageLayout layout, LoadLayoutFile(layout_path));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<codec::Codec> codec,
                          CreateCodec(layout, spec, layout_path));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<InputFile> in, InputFile::Open(in_path));
  const uint64_t page_bytes = codec::FlatPageBytes(layout);
  KVTIER_ASSIGN_OR_RETURN(uint64_t pages, CountUnits(*in, page_bytes, "page"));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> out, OutputFile::Create(out_path));

  std::vector<uint8_t> page(page_bytes);
  std::vector<uint8_t> block(codec->block_bytes());
  std::vector<codec::BufferEncodeStats> stats;
  uint64_t nonfinite = 0;
  for (uint64_t i = 0; i < pages; ++i) {
    const uint64_t offset = i * page_bytes;
    KVTIER_RETURN_IF_ERROR(in->ReadAt(offset, absl::MakeSpan(page)));
    absl::Status status = codec->Encode(codec::FlatPageView(layout, absl::MakeConstSpan(page)),
                                        absl::MakeSpan(block), &stats);
    if (!status.ok()) {
      return WithContext(absl::StrCat(in_path, ": page ", i, " at offset ", offset), status);
    }
    for (const codec::BufferEncodeStats& s : stats) nonfinite += s.nonfinite_values;
    KVTIER_RETURN_IF_ERROR(out->Append(block));
  }
  KVTIER_RETURN_IF_ERROR(out->Commit());

  const uint64_t hot_bytes = layout.HotBytes();
  std::string summary = absl::StrFormat(
      "kvtier-codec: encoded %d pages with %s: hot bytes %d (%d per page), block bytes %d (%d per "
      "page), ratio %s",
      pages, spec.ToString(), pages * hot_bytes, hot_bytes, pages * codec->block_bytes(),
      codec->block_bytes(), FormatRatio(hot_bytes, codec->block_bytes()));
  if (nonfinite > 0) {
    absl::StrAppend(&summary, "; ", nonfinite,
                    " NaN/Inf input values (encoded as codec/FORMAT.md describes)");
  }
  absl::FPrintF(stderr, "%s\n", summary);
  return absl::OkStatus();
}

absl::Status RunDecode(const cli::Values& flags) {
  KVTIER_ASSIGN_OR_RETURN(std::string layout_path, flags.RequiredString("layout"));
  KVTIER_ASSIGN_OR_RETURN(std::string in_path, flags.RequiredString("in"));
  KVTIER_ASSIGN_OR_RETURN(std::string out_path, flags.RequiredString("out"));
  KVTIER_RETURN_IF_ERROR(CheckDistinctFiles(in_path, out_path));
  if (flags.Has("alignment") && !flags.Has("codec")) {
    return cli::UsageError(
        "flag --alignment needs --codec (without --codec, the codec and alignment are read from "
        "the first block's header)");
  }
  std::optional<codec::CodecSpec> flag_spec;
  if (flags.Has("codec")) {
    KVTIER_ASSIGN_OR_RETURN(flag_spec, CodecSpecFromFlags(flags));
  }

  KVTIER_ASSIGN_OR_RETURN(codec::PageLayout layout, LoadLayoutFile(layout_path));
  codec::CodecSpec spec;
  if (flag_spec.has_value()) {
    spec = *flag_spec;
  } else {
    KVTIER_ASSIGN_OR_RETURN(codec::ColdBlockHeader header, ProbeFirstBlockHeader(in_path));
    const uint64_t fingerprint = codec::LayoutFingerprint(layout);
    if (header.layout_fingerprint != fingerprint) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: block 0 at offset 0: written for layout fingerprint %016x, but %s has fingerprint "
          "%016x (another model or page geometry)",
          in_path, header.layout_fingerprint, layout_path, fingerprint));
    }
    spec.codec = header.codec;
    spec.rope_lossless = (header.codec_flags & codec::kCodecFlagRopeLossless) != 0;
    spec.alignment_bytes = header.alignment_bytes;
  }
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<codec::Codec> codec,
                          CreateCodec(layout, spec, layout_path));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<InputFile> in, InputFile::Open(in_path));
  const uint64_t block_bytes = codec->block_bytes();
  KVTIER_ASSIGN_OR_RETURN(uint64_t blocks,
                          CountUnits(*in, block_bytes, absl::StrCat(spec.ToString(), " block")));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> out, OutputFile::Create(out_path));

  std::vector<uint8_t> block(block_bytes);
  std::vector<uint8_t> page(codec::FlatPageBytes(layout), 0);  // row-stride gaps stay zero
  const codec::MutableHotPageView view = codec::FlatPageView(layout, absl::MakeSpan(page));
  for (uint64_t i = 0; i < blocks; ++i) {
    const uint64_t offset = i * block_bytes;
    KVTIER_RETURN_IF_ERROR(in->ReadAt(offset, absl::MakeSpan(block)));
    absl::Status status = codec->Decode(block, view);
    if (!status.ok()) return BlockError(in_path, i, offset, status);
    KVTIER_RETURN_IF_ERROR(out->Append(page));
  }
  KVTIER_RETURN_IF_ERROR(out->Commit());
  absl::FPrintF(stderr,
                "kvtier-codec: decoded %d blocks of %s (%d bytes each) into %d pages of %d bytes\n",
                blocks, spec.ToString(), block_bytes, blocks, page.size());
  return absl::OkStatus();
}

absl::Status RunInspect(const cli::Values& flags) {
  KVTIER_ASSIGN_OR_RETURN(std::string in_path, flags.RequiredString("in"));
  KVTIER_ASSIGN_OR_RETURN(std::optional<uint64_t> block_flag, flags.OptionalUint64("block"));
  const bool json = flags.Has("json");

  KVTIER_ASSIGN_OR_RETURN(codec::ColdBlockHeader header, ProbeFirstBlockHeader(in_path));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<InputFile> in, InputFile::Open(in_path));
  const uint64_t block_bytes = header.block_bytes;
  const uint64_t blocks = in->size() / block_bytes;
  const uint64_t index = block_flag.value_or(0);
  if (index >= blocks) {
    return absl::OutOfRangeError(absl::StrCat(in_path, ": block ", index,
                                              " out of range: the file holds ", blocks,
                                              " blocks of ", block_bytes, " bytes"));
  }
  const uint64_t offset = index * block_bytes;
  if (index != 0) {
    std::vector<uint8_t> block(block_bytes);
    KVTIER_RETURN_IF_ERROR(in->ReadAt(offset, absl::MakeSpan(block)));
    absl::StatusOr<codec::ColdBlockHeader> parsed = codec::ParseColdBlockHeader(block);
    if (!parsed.ok()) return BlockError(in_path, index, offset, parsed.status());
    header = *std::move(parsed);
  }
  if (json) {
    absl::PrintF("%s\n", codec::ColdBlockHeaderToJson(header));
  } else {
    absl::PrintF("%s: block %d of %d at offset %d\n%s", in_path, index, blocks, offset,
                 codec::ColdBlockHeaderToText(header));
  }
  return absl::OkStatus();
}

}  // namespace kvtier::tools
