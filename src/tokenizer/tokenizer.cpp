#include "tokenizer/tokenizer.h"

#include <limits>

#include "core/error.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace qwenrt {
namespace {

// Buffers for one encode call, so that the per-piece work allocates nothing in the steady
// state and concurrent calls share no mutable state apart from the BPE cache.
struct EncodeScratch {
  EncodeScratch(const Tokenizer::Impl& impl, size_t text_size) {
    // A memo that grows with the text (up to 512 KiB) and never costs more than the text.
    while (bpe.memo_size < (size_t{1} << 15) && bpe.memo_size * 16 < text_size) bpe.memo_size *= 2;
    for (const auto& splitter : impl.splitters)
      match_states.emplace_back(std::make_unique<tok::RegexSplitter::MatchState>(splitter));
    pieces.resize(impl.splitters.size());
  }
  std::vector<tok::Segment> segments;
  std::vector<tok::Segment> normalized_segments;
  std::vector<std::unique_ptr<tok::RegexSplitter::MatchState>> match_states;
  std::vector<std::vector<tok::Span>> pieces;  // one list per split step
  std::string normalized;
  tok::BpeScratch bpe;
};

void pre_tokenize(const Tokenizer::Impl& impl, std::string_view text, size_t step,
                  EncodeScratch& scratch, std::vector<int32_t>& ids) {
  if (step == impl.splitters.size()) {
    impl.bpe->encode_piece(text, ids, scratch.bpe);
    return;
  }
  std::vector<tok::Span>& pieces = scratch.pieces[step];
  pieces.clear();
  impl.splitters[step].split(text, *scratch.match_states[step], pieces);
  for (size_t i = 0; i < pieces.size(); ++i) {
    // pieces[step] is not touched by deeper steps, so indexing stays valid.
    const auto [begin, end] = scratch.pieces[step][i];
    pre_tokenize(impl, text.substr(begin, end - begin), step + 1, scratch, ids);
  }
}

}  // namespace

void Tokenizer::Impl::encode(std::string_view text, bool allow_special,
                             std::vector<int32_t>& ids) const {
  if (text.size() >= std::numeric_limits<uint32_t>::max()) {
    throw Error(ErrorCategory::kInvalidArgument, "text to encode is larger than 4 GiB");
  }
  const size_t valid = tok::utf8_valid_prefix(text);
  if (valid != text.size()) {
    throw Error(ErrorCategory::kInvalidArgument,
                "text to encode is not valid UTF-8 (byte offset " + std::to_string(valid) + ")");
  }
  if (text.empty()) return;
  EncodeScratch scratch(*this, text.size());
  std::string whole_nfc;  // tiktoken's wrapper normalises the whole text, added tokens too
  if (nfc_whole_text && nfc && nfc->normalize(text, whole_nfc)) text = whole_nfc;
  scratch.segments.clear();
  raw_matcher->split(text, !allow_special, scratch.segments);
  for (const tok::Segment& segment : scratch.segments) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
      continue;
    }
    // HF normalises each stretch of text between added tokens on its own.
    std::string_view piece = text.substr(segment.begin, segment.end - segment.begin);
    if (nfc && !nfc_whole_text && nfc->normalize(piece, scratch.normalized)) piece = scratch.normalized;
    if (normalized_matcher->empty()) {
      pre_tokenize(*this, piece, 0, scratch, ids);
      continue;
    }
    scratch.normalized_segments.clear();
    normalized_matcher->split(piece, !allow_special, scratch.normalized_segments);
    for (const tok::Segment& inner : scratch.normalized_segments) {
      if (inner.id >= 0) {
        ids.push_back(inner.id);
      } else {
        pre_tokenize(*this, piece.substr(inner.begin, inner.end - inner.begin), 0, scratch, ids);
      }
    }
  }
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::filesystem::path& model_dir_or_tokenizer_json) {
  return Tokenizer(load_tokenizer_impl(model_dir_or_tokenizer_json));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  impl_->encode(text, allow_special, ids);
  return ids;
}

void Tokenizer::encode_into(std::string_view text, bool allow_special,
                            std::vector<int32_t>& ids) const {
  impl_->encode(text, allow_special, ids);
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  const auto index = static_cast<size_t>(id);
  const uint32_t begin = impl_->token_bytes_at[index];
  return std::string_view(impl_->token_bytes)
      .substr(begin, impl_->token_bytes_at[index + 1] - begin);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    bytes.append(token_bytes(id));
  }
  std::string text;
  text.reserve(bytes.size());
  tok::append_utf8_lossy(bytes, text);
  return text;
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= vocab_size() || impl_->kind[static_cast<size_t>(id)] == Impl::Kind::kNone) {
    return std::nullopt;
  }
  return impl_->token_text[static_cast<size_t>(id)];
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const auto it = impl_->added_ids.find(token); it != impl_->added_ids.end()) return it->second;
  if (const auto it = impl_->bpe_vocab.find(token); it != impl_->bpe_vocab.end()) return it->second;
  return std::nullopt;
}

int32_t Tokenizer::vocab_size() const {
  return static_cast<int32_t>(impl_->kind.size());
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() &&
         impl_->kind[static_cast<size_t>(id)] == Impl::Kind::kSpecial;
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const {
  return impl_->added;
}
bool Tokenizer::qwen_v1() const { return impl_->nfc_whole_text; }  // only qwen.tiktoken's loader sets it

std::optional<int32_t> Tokenizer::eos_id() const {
  return impl_->eos;
}
std::optional<int32_t> Tokenizer::bos_id() const {
  return impl_->bos;
}
std::optional<int32_t> Tokenizer::pad_id() const {
  return impl_->pad;
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer), skip_special_(skip_special) {}

std::string StreamDecoder::push(int32_t id) {
  if (skip_special_ && tokenizer_->is_special(id)) return {};
  pending_.append(tokenizer_->token_bytes(id));
  return tok::take_finished_utf8(pending_);
}

std::string StreamDecoder::flush() {
  std::string text;
  tok::append_utf8_lossy(pending_, text);
  pending_.clear();
  return text;
}

}  // namespace qwenrt
