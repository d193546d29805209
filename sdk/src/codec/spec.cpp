// Parsing, validation and canonical formatting of codec specs (grammar in edgefl/codec.h).
// Freestanding: no strtod/printf (newlib's strtod allocates); numbers are parsed and printed here.
#include <string.h>

#include "codec/codec_internal.h"
#include "codec/count_sketch_codec.h"
#include "codec/skc_codec.h"
#include "codec/spec_args.h"
#include "codec/values.h"
#include "core/bitio.h"
#include "core/text.h"
#include "edgefl/codec.h"

namespace edgefl {

namespace {

using codec_internal::Arg;
using codec_internal::parse_float;
using codec_internal::parse_uint;

struct Cursor {
  const char* p;
  const char* end;
  bool at_end() const { return p == end; }
  bool match(const char* word) {
    const size_t len = strlen(word);
    if (size_t(end - p) < len || memcmp(p, word, len) != 0) return false;
    p += len;
    return true;
  }
};

bool split_arg(const char* begin, const char* end, Arg* arg) {
  if (begin == end) return false;
  const char* eq = static_cast<const char*>(memchr(begin, '=', size_t(end - begin)));
  if (eq != nullptr) {
    if (eq == begin || eq + 1 == end) return false;
    *arg = Arg{begin, size_t(eq - begin), eq + 1, size_t(end - eq - 1)};
  } else if ((*begin >= '0' && *begin <= '9') || *begin == '.') {
    *arg = Arg{begin, 0, begin, size_t(end - begin)};
  } else {
    *arg = Arg{begin, size_t(end - begin), end, 0};
  }
  return true;
}

bool is_power_of_two(uint32_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

// Applies one argument of a sparsifier stage.
bool apply_sparsifier_arg(const Arg& a, bool first, CodecSpec* s) {
  if (a.key_len == 0) {  // positional: density or threshold
    if (!first) return false;
    if (s->sparsifier == SparsifierKind::kThreshold)
      return parse_float(a.value, a.value_end(), &s->threshold);
    return text::parse_decimal(a.value, a.value_end(), &s->density);
  }
  if (a.key_is("k") && a.value_len > 0 && s->sparsifier != SparsifierKind::kThreshold) {
    return parse_uint(a.value, a.value_end(), &s->k) && s->k > 0;
  }
  if (a.key_is("approx") && a.value_len == 0 && s->sparsifier == SparsifierKind::kTopK) {
    s->sparsifier = SparsifierKind::kTopKApprox;
    return true;
  }
  if (a.key_is("sample") && a.value_len > 0 &&
      (s->sparsifier == SparsifierKind::kTopK || s->sparsifier == SparsifierKind::kTopKApprox)) {
    return text::parse_decimal(a.value, a.value_end(), &s->sample_fraction);
  }
  if (a.key_is("unscaled") && a.value_len == 0 && s->sparsifier == SparsifierKind::kRandomK) {
    s->randk_unscaled = true;
    return true;
  }
  if (a.key_is("idx") && a.value_len > 0 && s->sparsifier != SparsifierKind::kRandomK) {
    Cursor c{a.value, a.value_end()};
    if (c.match("ef") && c.at_end()) {
      s->index_coding = IndexCoding::kEliasFano;
    } else if (Cursor c2{a.value, a.value_end()}; c2.match("rice") && c2.at_end()) {
      s->index_coding = IndexCoding::kRice;
    } else if (Cursor c4{a.value, a.value_end()}; c4.match("blockrice") && c4.at_end()) {
      s->index_coding = IndexCoding::kBlockRice;
    } else if (Cursor c3{a.value, a.value_end()}; c3.match("auto") && c3.at_end()) {
      s->index_coding = IndexCoding::kAuto;
    } else {
      return false;
    }
    return true;
  }
  return false;
}

bool apply_value_arg(const Arg& a, CodecSpec* s) {
  if (s->values == ValueCoderKind::kSkCompress || s->values == ValueCoderKind::kCountSketch) {
    if (a.key_len != 0 && a.value_len == 0) return false;
#if EDGEFL_WITH_SKC
    if (s->values == ValueCoderKind::kSkCompress) return codec_internal::apply_skc_arg(a, s);
#endif
#if EDGEFL_WITH_COUNT_SKETCH
    if (s->values == ValueCoderKind::kCountSketch) return codec_internal::apply_count_sketch_arg(a, s);
#endif
    return false;
  }
  if (a.key_is("block") && a.value_len > 0 && s->values != ValueCoderKind::kQsgd &&
      s->values != ValueCoderKind::kFp32 && s->values != ValueCoderKind::kFp16 &&
      s->values != ValueCoderKind::kBf16) {
    return parse_uint(a.value, a.value_end(), &s->block);
  }
  if (a.key_is("bucket") && a.value_len > 0 && s->values == ValueCoderKind::kQsgd) {
    return parse_uint(a.value, a.value_end(), &s->block);
  }
  if (a.key_is("s") && a.value_len > 0 && s->values == ValueCoderKind::kQsgd) {
    uint32_t levels;
    if (!parse_uint(a.value, a.value_end(), &levels) || levels > 32767) return false;
    s->levels = uint16_t(levels);
    return true;
  }
  if (a.key_is("clip") && a.value_len == 0 && s->values == ValueCoderKind::kUniform) {
    s->clip = true;
    return true;
  }
  if (a.key_is("sm") && a.value_len == 0 && s->values == ValueCoderKind::kUniform) {
    s->sign_magnitude = true;
    return true;
  }
  if (a.key_is("ans") && a.value_len == 0 &&
      (s->values == ValueCoderKind::kUniform || s->values == ValueCoderKind::kBf16)) {
    s->entropy_coded = true;
    return true;
  }
  if (a.key_is("det") && a.value_len == 0 && s->values == ValueCoderKind::kUniform) {
    s->stochastic = false;
    return true;
  }
  if (a.key_is("shared") && a.value_len > 0 && s->values == ValueCoderKind::kUniform) {
    return parse_float(a.value, a.value_end(), &s->shared_step) && s->shared_step > 0.0f;
  }
  return false;
}

// Parses the stage name; returns false if it is not a value coder.
bool parse_value_name(const char* begin, const char* end, CodecSpec* s) {
  const size_t len = size_t(end - begin);
  auto is = [&](const char* w) { return strlen(w) == len && memcmp(begin, w, len) == 0; };
  if (is("fp32")) {
    s->values = ValueCoderKind::kFp32;
    s->bits = 32;
    s->block = 0;
    return true;
  }
  if (is("fp16")) {
    s->values = ValueCoderKind::kFp16;
    s->bits = 16;
    s->block = 0;
    return true;
  }
  if (is("bf16")) {
    s->values = ValueCoderKind::kBf16;
    s->bits = 16;
    s->block = 0;
    return true;
  }
#if EDGEFL_WITH_SKC
  if (is("skc")) return codec_internal::set_skc_defaults(s);
#endif
#if EDGEFL_WITH_COUNT_SKETCH
  if (is("cs")) return codec_internal::set_count_sketch_defaults(s);
#endif
  if (is("qsgd")) {
    s->values = ValueCoderKind::kQsgd;
    s->levels = 7;
    s->block = 512;
    return true;
  }
  if (is("tern")) {
    s->values = ValueCoderKind::kTernGrad;
    s->bits = 2;
    s->block = 256;
    return true;
  }
  if (is("sign")) {
    s->values = ValueCoderKind::kScaledSign;
    s->bits = 1;
    s->block = 256;
    return true;
  }
  if (len == 2 && begin[0] == 'q' &&
      (begin[1] == '1' || begin[1] == '2' || begin[1] == '4' || begin[1] == '8')) {
    s->values = ValueCoderKind::kUniform;
    s->bits = uint8_t(begin[1] - '0');
    s->block = 256;
    return true;
  }
#if EDGEFL_WITH_HADAMARD
  if (len == 3 && begin[0] == 'h' && begin[1] == 'q' && begin[2] >= '1' && begin[2] <= '4') {
    s->values = ValueCoderKind::kHadamard;
    s->bits = uint8_t(begin[2] - '0');
    s->block = 256;
    return true;
  }
#endif
  return false;
}

bool parse_sparsifier_name(const char* begin, const char* end, CodecSpec* s) {
  const size_t len = size_t(end - begin);
  auto is = [&](const char* w) { return strlen(w) == len && memcmp(begin, w, len) == 0; };
  if (is("topk")) {
    s->sparsifier = SparsifierKind::kTopK;
    return true;
  }
  if (is("thresh")) {
    s->sparsifier = SparsifierKind::kThreshold;
    return true;
  }
  if (is("randk")) {
    s->sparsifier = SparsifierKind::kRandomK;
    s->index_coding = IndexCoding::kNone;
    return true;
  }
  return false;
}

// Parses one stage [begin, end) into `s`. `want_sparsifier`: the stage must be a sparsifier
// (true) or a value coder (false).
bool parse_stage(const char* begin, const char* end, bool want_sparsifier, CodecSpec* s) {
  const char* colon = static_cast<const char*>(memchr(begin, ':', size_t(end - begin)));
  const char* name_end = colon ? colon : end;
  if (want_sparsifier ? !parse_sparsifier_name(begin, name_end, s) : !parse_value_name(begin, name_end, s)) {
    return false;
  }
  if (colon == nullptr) return !want_sparsifier;  // sparsifiers need their parameter
  const char* p = colon + 1;
  if (p == end) return false;
  bool first = true;
  bool positional_seen = false;
  while (p <= end) {
    const char* comma = static_cast<const char*>(memchr(p, ',', size_t(end - p)));
    const char* arg_end = comma ? comma : end;
    Arg a;
    if (!split_arg(p, arg_end, &a)) return false;
    if (want_sparsifier) {
      if (!apply_sparsifier_arg(a, first, s)) return false;
      if (a.key_len == 0 || a.key_is("k")) positional_seen = true;
    } else if (!apply_value_arg(a, s)) {
      return false;
    }
    first = false;
    if (comma == nullptr) break;
    p = comma + 1;
  }
  return !want_sparsifier || positional_seen;
}

}  // namespace

Status validate_codec_spec(const CodecSpec& s) {
  if (!codec_internal::codec_family_compiled(s.values)) return Status::kInvalidSpec;  // edgefl/config.h
  auto finite_positive = [](float v) { return v > 0.0f && v <= 3.0e38f; };
  switch (s.sparsifier) {
    case SparsifierKind::kNone: break;
    case SparsifierKind::kTopK:
    case SparsifierKind::kTopKApprox:
    case SparsifierKind::kRandomK:
      if (s.k == 0 && !(s.density > 0.0 && s.density <= 1.0)) return Status::kInvalidSpec;
      if (s.sparsifier == SparsifierKind::kTopKApprox &&
          !(s.sample_fraction == 0.0 || (s.sample_fraction > 0.0 && s.sample_fraction <= 1.0 / 40))) {
        return Status::kInvalidSpec;
      }
      if (s.sparsifier == SparsifierKind::kTopK && s.sample_fraction != 0.0) return Status::kInvalidSpec;
      break;
    case SparsifierKind::kThreshold:
      if (!finite_positive(s.threshold)) return Status::kInvalidSpec;
      break;
    default: return Status::kInvalidSpec;
  }
#if EDGEFL_WITH_SKC
  if (s.values == ValueCoderKind::kSkCompress) return codec_internal::validate_skc_spec(s);
#endif
#if EDGEFL_WITH_COUNT_SKETCH
  if (s.values == ValueCoderKind::kCountSketch) return codec_internal::validate_count_sketch_spec(s);
#endif
  if (s.sparsifier == SparsifierKind::kNone || s.sparsifier == SparsifierKind::kRandomK) {
    if (s.index_coding != IndexCoding::kNone && s.index_coding != IndexCoding::kEliasFano) {
      return Status::kInvalidSpec;
    }
  } else if (s.index_coding != IndexCoding::kEliasFano && s.index_coding != IndexCoding::kRice &&
             s.index_coding != IndexCoding::kBlockRice && s.index_coding != IndexCoding::kAuto) {
    return Status::kInvalidSpec;
  }
  if (s.randk_unscaled && s.sparsifier != SparsifierKind::kRandomK) return Status::kInvalidSpec;
  if (s.clip && !(s.values == ValueCoderKind::kUniform && s.shared_step != 0.0f)) return Status::kInvalidSpec;
  if (s.entropy_coded && s.values != ValueCoderKind::kUniform && s.values != ValueCoderKind::kBf16)
    return Status::kInvalidSpec;
  if (s.sign_magnitude && !(s.values == ValueCoderKind::kUniform && s.shared_step == 0.0f && s.bits >= 2)) {
    return Status::kInvalidSpec;
  }
  switch (s.values) {
    case ValueCoderKind::kFp32:
      if (s.bits != 32) return Status::kInvalidSpec;
      break;
    case ValueCoderKind::kFp16:
    case ValueCoderKind::kBf16:
      if (s.bits != 16) return Status::kInvalidSpec;
      break;
    case ValueCoderKind::kUniform:
      if (s.bits != 1 && s.bits != 2 && s.bits != 4 && s.bits != 8) return Status::kInvalidSpec;
      if (s.shared_step != 0.0f) {
        // Steps above kMaxScale / 2^31 could make a summed code decode to a non-finite value.
        if (!finite_positive(s.shared_step) || s.shared_step > values::kMaxScale / 2147483648.0f ||
            s.bits < 2) {
          return Status::kInvalidSpec;
        }
      } else if (s.block < 1 || s.block > EDGEFL_MAX_BLOCK || s.clip) {
        return Status::kInvalidSpec;
      }
      break;
    case ValueCoderKind::kQsgd:
      if (s.levels < 1 || s.levels > 32767 || s.block < 1 || s.block > EDGEFL_MAX_BLOCK) {
        return Status::kInvalidSpec;
      }
      break;
    case ValueCoderKind::kTernGrad:
    case ValueCoderKind::kScaledSign:
      if (s.block < 1 || s.block > EDGEFL_MAX_BLOCK) return Status::kInvalidSpec;
      break;
    case ValueCoderKind::kHadamard:
      if (s.bits < 1 || s.bits > 4 || !is_power_of_two(s.block) || s.block < 16 || s.block > 1024) {
        return Status::kInvalidSpec;
      }
      break;
    default: return Status::kInvalidSpec;
  }
  return Status::kOk;
}

Status parse_codec_spec(const char* text, CodecSpec* spec) {
  if (text == nullptr || spec == nullptr) return Status::kInvalidArgument;
  const size_t len = strlen(text);
  if (len == 0 || len > 256) return Status::kInvalidSpec;
  // The alias of edgefl's sparse codec: sparq:FRACTION = topk:FRACTION,approx,idx=auto+q4.
  char expanded[300];
  if (len > 6 && memcmp(text, "sparq:", 6) == 0) {
    if (memchr(text, '+', len) != nullptr || memchr(text + 6, ',', len - 6) != nullptr)
      return Status::kInvalidSpec;
    text::Appender e{expanded, sizeof(expanded)};
    e.put("topk:");
    for (size_t i = 6; i < len; ++i) e.put(text[i]);
    e.put(",approx,idx=auto+q4:sm,ans");
    if (e.len >= sizeof(expanded)) return Status::kInvalidSpec;
    expanded[e.len] = '\0';
    return parse_codec_spec(expanded, spec);
  }
  CodecSpec s;
  s.index_coding = IndexCoding::kNone;
  const char* end = text + len;
  const char* plus = static_cast<const char*>(memchr(text, '+', len));
  bool ok = false;
  if (plus != nullptr) {
    if (memchr(plus + 1, '+', size_t(end - plus - 1)) != nullptr) return Status::kInvalidSpec;
    s.index_coding = IndexCoding::kEliasFano;
    ok = parse_stage(text, plus, /*want_sparsifier=*/true, &s) && plus + 1 < end &&
         parse_stage(plus + 1, end, /*want_sparsifier=*/false, &s);
  } else {
    CodecSpec sparse;
    sparse.index_coding = IndexCoding::kEliasFano;
    if (parse_stage(text, end, /*want_sparsifier=*/true, &sparse)) {
      s = sparse;  // values stay fp32 (the defaults of CodecSpec)
      ok = true;
    } else {
      ok = parse_stage(text, end, /*want_sparsifier=*/false, &s);
    }
  }
  if (s.sparsifier == SparsifierKind::kRandomK) s.index_coding = IndexCoding::kNone;
  // skc codes its own keys: the sparsifier's index coding does not apply.
  if (s.values == ValueCoderKind::kSkCompress && s.index_coding == IndexCoding::kEliasFano) {
    s.index_coding = IndexCoding::kNone;
  }
  if (!ok || validate_codec_spec(s) != Status::kOk) return Status::kInvalidSpec;
  *spec = s;
  return Status::kOk;
}

size_t format_codec_spec(const CodecSpec& s, char* buf, size_t cap) {
  text::Appender a{buf, cap};
  if (s.sparsifier != SparsifierKind::kNone) {
    a.put(s.sparsifier == SparsifierKind::kThreshold ? "thresh:"
          : s.sparsifier == SparsifierKind::kRandomK ? "randk:"
                                                     : "topk:");
    if (s.sparsifier == SparsifierKind::kThreshold) {
      a.put_float(s.threshold);
    } else if (s.k != 0) {
      a.put("k=");
      a.put_uint(s.k);
    } else {
      a.put_double(s.density);
    }
    if (s.sparsifier == SparsifierKind::kTopKApprox) {
      a.put(",approx");
      if (s.sample_fraction != 0.0f) {
        a.put(",sample=");
        a.put_double(s.sample_fraction);
      }
    }
    if (s.randk_unscaled) a.put(",unscaled");
    if (s.index_coding == IndexCoding::kRice) a.put(",idx=rice");
    if (s.index_coding == IndexCoding::kBlockRice) a.put(",idx=blockrice");
    if (s.index_coding == IndexCoding::kAuto) a.put(",idx=auto");
    a.put('+');
  }
  switch (s.values) {
    case ValueCoderKind::kFp32: a.put("fp32"); break;
    case ValueCoderKind::kFp16: a.put("fp16"); break;
    case ValueCoderKind::kBf16:
      a.put("bf16");
      if (s.entropy_coded) a.put(":ans");
      break;
    case ValueCoderKind::kUniform:
      a.put('q');
      a.put_uint(s.bits);
      if (s.shared_step != 0.0f) {
        a.put(":shared=");
        a.put_float(s.shared_step);
        if (!s.stochastic) a.put(",det");
        if (s.clip) a.put(",clip");
        if (s.entropy_coded) a.put(",ans");
      } else {
        a.put(":block=");
        a.put_uint(s.block);
        if (!s.stochastic) a.put(",det");
        if (s.sign_magnitude) a.put(",sm");
        if (s.entropy_coded) a.put(",ans");
      }
      break;
    case ValueCoderKind::kHadamard:
      a.put("hq");
      a.put_uint(s.bits);
      a.put(":block=");
      a.put_uint(s.block);
      break;
    case ValueCoderKind::kQsgd:
      a.put("qsgd:s=");
      a.put_uint(s.levels);
      a.put(",bucket=");
      a.put_uint(s.block);
      break;
    case ValueCoderKind::kTernGrad:
      a.put("tern:block=");
      a.put_uint(s.block);
      break;
    case ValueCoderKind::kScaledSign:
      a.put("sign:block=");
      a.put_uint(s.block);
      break;
    case ValueCoderKind::kSkCompress:
#if EDGEFL_WITH_SKC
      codec_internal::format_skc_spec(s, &a);
#endif
      break;
    case ValueCoderKind::kCountSketch:
#if EDGEFL_WITH_COUNT_SKETCH
      codec_internal::format_count_sketch_spec(s, &a);
#endif
      break;
  }
  if (cap > 0) buf[a.len < cap ? a.len : cap - 1] = '\0';
  return a.len;
}

const char* sparsifier_name(SparsifierKind kind) {
  switch (kind) {
    case SparsifierKind::kNone: return "none";
    case SparsifierKind::kTopK: return "topk";
    case SparsifierKind::kTopKApprox: return "topk_approx";
    case SparsifierKind::kThreshold: return "threshold";
    case SparsifierKind::kRandomK: return "randk";
  }
  return "unknown";
}

const char* value_coder_name(ValueCoderKind kind) {
  switch (kind) {
    case ValueCoderKind::kFp32: return "fp32";
    case ValueCoderKind::kFp16: return "fp16";
    case ValueCoderKind::kBf16: return "bf16";
    case ValueCoderKind::kUniform: return "uniform";
    case ValueCoderKind::kQsgd: return "qsgd";
    case ValueCoderKind::kTernGrad: return "terngrad";
    case ValueCoderKind::kScaledSign: return "scaled_sign";
    case ValueCoderKind::kHadamard: return "hadamard";
    case ValueCoderKind::kSkCompress: return "skcompress";
    case ValueCoderKind::kCountSketch: return "count_sketch";
  }
  return "unknown";
}

const char* index_coding_name(IndexCoding coding) {
  switch (coding) {
    case IndexCoding::kNone: return "none";
    case IndexCoding::kEliasFano: return "elias_fano";
    case IndexCoding::kRice: return "rice";
    case IndexCoding::kBlockRice: return "block_rice";
    case IndexCoding::kAuto: return "auto";
  }
  return "unknown";
}

bool needs_error_feedback(const CodecSpec& s) {
  return s.sparsifier == SparsifierKind::kTopK || s.sparsifier == SparsifierKind::kTopKApprox ||
         s.sparsifier == SparsifierKind::kThreshold ||
         (s.sparsifier == SparsifierKind::kRandomK && s.randk_unscaled) ||
         s.values == ValueCoderKind::kScaledSign || (s.values == ValueCoderKind::kUniform && !s.stochastic) ||
         (s.values == ValueCoderKind::kUniform && s.clip);
}

}  // namespace edgefl
