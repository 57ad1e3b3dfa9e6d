// tokenizer.model through Debian's libsentencepiece: ids as sentencepiece's encode (no BOS/EOS;
// those come from the model's config, tokenizer.hpp), decode as its decode.
#include <sentencepiece_processor.h>

#include "models/tokenizer/sp_charsmap.hpp"
#include "models/tokenizer/tokenizer.hpp"
#include "runtime/error.hpp"
#include "runtime/input_file.hpp"

namespace zf::tok {

namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) : path_(path) {
    const std::vector<uint8_t> bytes = read_input_file(path, path);
    const auto st = sp_.LoadFromSerializedProto(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    if (!st.ok()) throw InputError(path, "not a sentencepiece model (" + st.ToString() + ")");
    // the library walks the normalizers' tries unchecked on every encode and decode: a bad one is
    // a segmentation fault there, so it is refused here (sp_charsmap.hpp)
    check_sentencepiece_normalizers(sp_.serialized_model_proto(), path);
    if (sp_.GetPieceSize() <= 0) throw InputError(path, "the model has no pieces");
  }
  std::vector<uint32_t> encode(std::string_view text, const std::function<void(size_t)>& progress) const override {
    check_utf8(text, "text");
    std::vector<int> ids;
    const auto st = sp_.Encode(text, &ids);
    if (!st.ok()) throw Error(path_ + ": sentencepiece encode failed: " + st.ToString());
    if (progress) progress(ids.size());
    return std::vector<uint32_t>(ids.begin(), ids.end());
  }
  std::string decode(const std::vector<uint32_t>& ids, bool skip_special_tokens) const override {
    std::vector<int> v;
    v.reserve(ids.size());
    for (uint32_t id : ids) {
      if (id >= static_cast<uint32_t>(sp_.GetPieceSize()))
        throw InputError(path_ + ": decode", "id " + std::to_string(id) + " is not in the vocabulary");
      v.push_back(static_cast<int>(id));
    }
    std::string out;
    const auto st = sp_.Decode(v, &out);
    if (!st.ok()) throw Error(path_ + ": sentencepiece decode failed: " + st.ToString());
    (void)skip_special_tokens;  // sentencepiece's decode drops control pieces (BOS, EOS) always
    return out;
  }
  uint64_t vocab_size() const override { return static_cast<uint64_t>(sp_.GetPieceSize()); }
  bool has_id(uint32_t id) const override { return id < static_cast<uint32_t>(sp_.GetPieceSize()); }
  std::string describe() const override {
    return path_ + " (sentencepiece, " + std::to_string(sp_.GetPieceSize()) + " ids)";
  }

 private:
  std::string path_;
  sentencepiece::SentencePieceProcessor sp_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path) {
  return std::make_unique<SentencePieceTokenizer>(path);
}

}  // namespace zf::tok
