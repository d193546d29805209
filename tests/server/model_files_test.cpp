// model_files_test.cpp: atomic file writes and bounded reads (server/src/model_files.h), and the
// safetensors model format (server/src/safetensors.h): the byte layout checked by hand, exact
// round trips, files laid out as other writers do, and every rejection.
#include <dirent.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "edgefl/model.h"
#include "model_files.h"
#include "safetensors.h"

namespace edgefl {
namespace server {
namespace {

class TempDir {
 public:
  TempDir() {
    const char* base = getenv("TMPDIR");
    std::string pattern =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/edgefl_files_XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    REQUIRE(mkdtemp(buf.data()) != nullptr);
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, ec);
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::set<std::string> list_dir(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

std::vector<uint8_t> bytes_of(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

Span<const uint8_t> span(const std::vector<uint8_t>& v) {
  return Span<const uint8_t>(v.data(), v.size());
}

std::vector<uint8_t> slurp(const std::string& path) {
  std::vector<uint8_t> out;
  std::string error;
  const Status st = read_file(path, 1 << 30, &out, &error);
  INFO(error);
  REQUIRE(st == Status::kOk);
  return out;
}

ModelSpec spec_of(const char* text) {
  ModelSpec spec;
  REQUIRE(parse_model_spec(text, &spec) == Status::kOk);
  return spec;
}

// Little-endian float32 bytes.
void put_f32(float f, std::vector<uint8_t>* out) {
  uint32_t bits;
  memcpy(&bits, &f, 4);
  for (int i = 0; i < 4; ++i) out->push_back(uint8_t(bits >> (8 * i)));
}

// A safetensors file from a header (not padded unless the caller pads it) and float data.
std::vector<uint8_t> make_file(const std::string& header, const std::vector<float>& data) {
  std::vector<uint8_t> out;
  for (int i = 0; i < 8; ++i) out.push_back(uint8_t(uint64_t(header.size()) >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  for (float f : data) put_f32(f, &out);
  return out;
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  REQUIRE(at != std::string::npos);
  return s.replace(at, from.size(), to);
}

std::vector<float> iota_floats(size_t n, float start = 0.5f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + float(i);
  return v;
}

// mlp:2-3-2: fc1.weight [3,2] (6), fc1.bias [3], fc2.weight [2,3] (6), fc2.bias [2]: 17 floats.
const char* const kTinySpec = "mlp:2-3-2";
const std::string kTinyTensors = R"("fc1.weight":{"dtype":"F32","shape":[3,2],"data_offsets":[0,24]},)"
                                 R"("fc1.bias":{"dtype":"F32","shape":[3],"data_offsets":[24,36]},)"
                                 R"("fc2.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[36,60]},)"
                                 R"("fc2.bias":{"dtype":"F32","shape":[2],"data_offsets":[60,68]})";
const std::string kTinyHeader = "{" + kTinyTensors + "}";

Status decode_tiny(const std::vector<uint8_t>& file, std::string* error,
                   std::vector<float>* params = nullptr) {
  std::vector<float> local;
  return decode_safetensors(span(file), spec_of(kTinySpec), params != nullptr ? params : &local, nullptr,
                            error);
}

}  // namespace

TEST_SUITE("server.model_files") {
  TEST_CASE("write_file_atomic writes the bytes, replaces the old file and leaves no temporary file") {
    TempDir dir;
    std::string error;
    const std::vector<uint8_t> first = bytes_of("first version");
    REQUIRE(write_file_atomic(dir.path(), "model.bin", span(first), &error) == Status::kOk);
    CHECK(slurp(dir.file("model.bin")) == first);
    std::vector<uint8_t> second(100'000);
    for (size_t i = 0; i < second.size(); ++i) second[i] = uint8_t(i * 13);
    REQUIRE(write_file_atomic(dir.path() + "/", "model.bin", span(second), &error) == Status::kOk);
    CHECK(slurp(dir.file("model.bin")) == second);
    REQUIRE(write_file_atomic(dir.path(), "empty.bin", Span<const uint8_t>(), &error) == Status::kOk);
    CHECK(slurp(dir.file("empty.bin")).empty());
    CHECK(list_dir(dir.path()) == std::set<std::string>{"model.bin", "empty.bin"});
    struct stat st;
    REQUIRE(stat(dir.file("model.bin").c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0644);
  }

  TEST_CASE("write_file_atomic leaves the old file intact when the write fails") {
    TempDir dir;
    const std::vector<uint8_t> old = bytes_of("the old model");
    REQUIRE(write_file_atomic(dir.path(), "model.bin", span(old), nullptr) == Status::kOk);
    const std::vector<uint8_t> big(1 << 16, 0xAB);
    std::string error;

    SUBCASE("the temporary file cannot be created") {
      const std::string temp = dir.file(".model.bin.tmp-" + std::to_string(long(getpid())));
      REQUIRE(mkdir(temp.c_str(), 0700) == 0);  // occupied by a directory: open() fails, even for root
      CHECK(write_file_atomic(dir.path(), "model.bin", span(big), &error) == Status::kIoError);
      CHECK(error.find("creating") != std::string::npos);
      CHECK(slurp(dir.file("model.bin")) == old);
      REQUIRE(rmdir(temp.c_str()) == 0);
    }
    SUBCASE("the write fails half-way (file size limit, in a child process)") {
      const pid_t child = fork();
      REQUIRE(child >= 0);
      if (child == 0) {
        signal(SIGXFSZ, SIG_IGN);  // write() then fails with EFBIG instead of killing us
        struct rlimit limit;
        if (getrlimit(RLIMIT_FSIZE, &limit) != 0) _exit(10);
        limit.rlim_cur = 4096;
        if (setrlimit(RLIMIT_FSIZE, &limit) != 0) _exit(11);
        std::string e;
        if (write_file_atomic(dir.path(), "model.bin", span(big), &e) != Status::kIoError) _exit(12);
        if (e.find("writing") == std::string::npos) _exit(13);
        _exit(0);
      }
      int wstatus = 0;
      REQUIRE(waitpid(child, &wstatus, 0) == child);
      REQUIRE(WIFEXITED(wstatus));
      CHECK(WEXITSTATUS(wstatus) == 0);
      CHECK(slurp(dir.file("model.bin")) == old);
    }
    SUBCASE("the directory is not writable") {
      if (geteuid() == 0) {
        MESSAGE("running as root: permission bits do not stop writes; covered by the other subcases");
      } else {
        REQUIRE(chmod(dir.path().c_str(), 0555) == 0);
        CHECK(write_file_atomic(dir.path(), "model.bin", span(big), &error) == Status::kIoError);
        REQUIRE(chmod(dir.path().c_str(), 0755) == 0);
        CHECK(slurp(dir.file("model.bin")) == old);
      }
    }
    SUBCASE("the directory does not exist") {
      CHECK(write_file_atomic(dir.file("missing"), "model.bin", span(big), &error) == Status::kIoError);
      CHECK(!error.empty());
    }
    CHECK(list_dir(dir.path()) == std::set<std::string>{"model.bin"});  // no temporary file left
  }

  TEST_CASE("write_file_atomic refuses names that are not plain file names") {
    TempDir dir;
    const std::vector<uint8_t> b = bytes_of("x");
    for (const char* name : {"", ".hidden", ".", "..", "a/b", "/abs"}) {
      CAPTURE(name);
      CHECK(write_file_atomic(dir.path(), name, span(b), nullptr) == Status::kInvalidArgument);
    }
    CHECK(write_file_atomic("", "a", span(b), nullptr) == Status::kInvalidArgument);
    CHECK(list_dir(dir.path()).empty());
  }

  TEST_CASE("read_file is bounded and reads only regular files") {
    TempDir dir;
    const std::vector<uint8_t> b = bytes_of("0123456789");
    REQUIRE(write_file_atomic(dir.path(), "f", span(b), nullptr) == Status::kOk);
    std::vector<uint8_t> out = bytes_of("unchanged");
    std::string error;
    CHECK(read_file(dir.file("f"), 10, &out, &error) == Status::kOk);
    CHECK(out == b);
    out = bytes_of("unchanged");
    CHECK(read_file(dir.file("f"), 9, &out, &error) == Status::kIoError);
    CHECK(error.find("limit") != std::string::npos);
    CHECK(out == bytes_of("unchanged"));
    CHECK(read_file(dir.file("absent"), 100, &out, &error) == Status::kIoError);
    CHECK(read_file(dir.path(), 100, &out, &error) == Status::kIoError);
    CHECK(read_file(dir.file("f"), 100, nullptr, &error) == Status::kInvalidArgument);
    CHECK(out == bytes_of("unchanged"));
  }

  TEST_CASE("remove_temp_files clears what a crashed writer left, and only that") {
    TempDir dir;
    for (const char* name : {".model.bin.tmp-123", ".a.tmp-1", ".model.bin.tmp-abc", "model.bin.tmp-1",
                             "model.bin", ".tmp-5", ".x.tmp-"}) {
      std::ofstream(dir.file(name)) << "x";
    }
    size_t removed = 0;
    REQUIRE(remove_temp_files(dir.path(), &removed, nullptr) == Status::kOk);
    CHECK(removed == 2);
    CHECK(list_dir(dir.path()) ==
          std::set<std::string>{".model.bin.tmp-abc", "model.bin.tmp-1", "model.bin", ".tmp-5", ".x.tmp-"});
    CHECK(remove_temp_files(dir.file("missing"), &removed, nullptr) == Status::kIoError);
  }
}

TEST_SUITE("server.safetensors") {
  TEST_CASE("the byte layout, by hand") {
    const ModelSpec spec = spec_of(kTinySpec);
    const std::vector<float> params = iota_floats(17);
    std::vector<uint8_t> file;
    std::string error;
    REQUIRE(encode_safetensors(spec, Span<const float>(params.data(), params.size()), {{"round", "3"}}, &file,
                               &error) == Status::kOk);
    const std::string json =
        R"({"__metadata__":{"edgefl.model_spec":"mlp:2-3-2","format":"pt","round":"3"},)" + kTinyTensors +
        "}";
    const size_t header = (json.size() + 7) / 8 * 8;
    REQUIRE(file.size() == 8 + header + 17 * 4);
    // 8-byte little-endian header length, a multiple of 8.
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | file[size_t(i)];
    CHECK(n == header);
    // The JSON, then spaces.
    const std::string text(file.begin() + 8, file.begin() + 8 + long(header));
    CHECK(text.substr(0, json.size()) == json);
    CHECK(text.substr(json.size()) == std::string(header - json.size(), ' '));
    // The data: the flat vector, float32 little-endian.
    std::vector<uint8_t> data;
    for (float f : params) put_f32(f, &data);
    CHECK(std::vector<uint8_t>(file.begin() + 8 + long(header), file.end()) == data);
    CHECK(file[8 + header] == 0x00);  // 0.5f = 0x3F000000, little-endian
    CHECK(file[8 + header + 3] == 0x3F);
  }

  TEST_CASE("cnn tensors carry PyTorch's names and layouts") {
    const ModelSpec spec = spec_of("cnn");
    const size_t n = parameter_count(spec);
    REQUIRE(n == 55338);
    const std::vector<float> params(n, 0.25f);
    std::vector<uint8_t> file;
    REQUIRE(encode_safetensors(spec, Span<const float>(params.data(), n), {}, &file, nullptr) == Status::kOk);
    uint64_t header = 0;
    for (int i = 7; i >= 0; --i) header = (header << 8) | file[size_t(i)];
    const std::string text(file.begin() + 8, file.begin() + 8 + long(header));
    for (const char* entry : {
             R"("conv1.weight":{"dtype":"F32","shape":[16,1,3,3],"data_offsets":[0,576]})",
             R"("conv1.bias":{"dtype":"F32","shape":[16],"data_offsets":[576,640]})",
             R"("conv2.weight":{"dtype":"F32","shape":[32,16,3,3],)",
             R"("fc1.weight":{"dtype":"F32","shape":[32,1568],)",
             R"("fc2.weight":{"dtype":"F32","shape":[10,32],)",
             R"("fc2.bias":{"dtype":"F32","shape":[10],"data_offsets":[221312,221352]})",
             R"("edgefl.model_spec":"cnn:16-32-32")",
         }) {
      CAPTURE(entry);
      CHECK(text.find(entry) != std::string::npos);
    }
    CHECK(file.size() == 8 + header + n * 4);
  }

  TEST_CASE("round trips are exact") {
    for (const char* text : {"cnn", "mlp:784-128-10", "cnn:8-16-64,in=3x32x32,classes=100", kTinySpec}) {
      CAPTURE(text);
      const ModelSpec spec = spec_of(text);
      const size_t n = parameter_count(spec);
      std::vector<float> params(n);
      init_parameters(spec, 7, Span<float>(params.data(), n));
      // Values that must survive bit for bit.
      params[0] = -0.0f;
      params[1] = std::numeric_limits<float>::denorm_min();
      params[2] = -std::numeric_limits<float>::max();
      params[n - 1] = 1e-30f;
      const std::vector<std::pair<std::string, std::string>> meta = {
          {"round", "12"},
          {"note", "quote \" backslash \\ newline \n tab \t ctl \x01 utf8 \xC3\xA9 \xF0\x9F\x98\x80"}};
      std::vector<uint8_t> file;
      std::string error;
      REQUIRE(encode_safetensors(spec, Span<const float>(params.data(), n), meta, &file, &error) ==
              Status::kOk);
      std::vector<float> back = {1.0f};
      std::map<std::string, std::string> meta_back;
      const Status st = decode_safetensors(span(file), spec, &back, &meta_back, &error);
      INFO(error);
      REQUIRE(st == Status::kOk);
      REQUIRE(back.size() == n);
      CHECK(memcmp(back.data(), params.data(), n * 4) == 0);
      CHECK(meta_back.size() == 4);
      CHECK(meta_back["format"] == "pt");
      CHECK(meta_back["round"] == "12");
      CHECK(meta_back["note"] == meta[1].second);
      CHECK(meta_back["edgefl.model_spec"].rfind(text[0] == 'c' ? "cnn:" : "mlp:", 0) == 0);
    }
  }

  TEST_CASE("files laid out by other writers decode by name") {
    // Python's safetensors sorts tensors (here fc1.bias, fc1.weight, ...), escapes freely, may
    // skip metadata and padding; whitespace is allowed around the JSON tokens.
    const std::string header =
        "{ \"fc1.b\\u0069as\" : {\"shape\":[3],\"dtype\":\"F32\",\"data_offsets\":[0,12]},\n"
        "  \"fc1.weight\":{\"dtype\":\"F32\",\"data_offsets\":[12,36],\"shape\":[3,2]},\r\n"
        "  \"fc2.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[36,44]},\t"
        "  \"fc2.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[44,68]},"
        "  \"__metadata__\":{\"format\":\"pt\",\"edgefl.model_spec\":\"mlp:2-3-2\",\"who\":\"caf\\u00e9 "
        "\\ud83d\\ude00\"}}";
    // Data in file order: fc1.bias = 100.., fc1.weight = 200.., fc2.bias = 300.., fc2.weight = 400..
    std::vector<float> data;
    for (int i = 0; i < 3; ++i) data.push_back(100.0f + float(i));
    for (int i = 0; i < 6; ++i) data.push_back(200.0f + float(i));
    for (int i = 0; i < 2; ++i) data.push_back(300.0f + float(i));
    for (int i = 0; i < 6; ++i) data.push_back(400.0f + float(i));
    std::vector<float> params;
    std::map<std::string, std::string> meta;
    std::string error;
    const Status st =
        decode_safetensors(span(make_file(header, data)), spec_of(kTinySpec), &params, &meta, &error);
    INFO(error);
    REQUIRE(st == Status::kOk);
    const std::vector<float> want = {200, 201, 202, 203, 204, 205, 100, 101, 102,
                                     400, 401, 402, 403, 404, 405, 300, 301};
    CHECK(params == want);
    CHECK(meta["who"] == "caf\xC3\xA9 \xF0\x9F\x98\x80");
  }

  TEST_CASE("decode rejects truncated files and bad header lengths") {
    std::string error;
    std::vector<uint8_t> good = make_file(kTinyHeader, iota_floats(17));
    REQUIRE(decode_tiny(good, &error) == Status::kOk);
    CHECK(decode_tiny({}, &error) == Status::kTruncated);
    CHECK(decode_tiny({1, 0, 0}, &error) == Status::kTruncated);
    // Every truncation fails, none reads out of bounds.
    for (size_t len = 0; len < good.size(); ++len) {
      std::vector<uint8_t> cut(good.begin(), good.begin() + long(len));
      CAPTURE(len);
      CHECK(decode_tiny(cut, &error) != Status::kOk);
    }
    // Header length past the end of the file.
    std::vector<uint8_t> long_header = good;
    long_header[0] = uint8_t(kTinyHeader.size() + 17 * 4 + 1);
    long_header[1] = uint8_t((kTinyHeader.size() + 17 * 4 + 1) >> 8);
    CHECK(decode_tiny(long_header, &error) == Status::kTruncated);
    CHECK(error.find("past the end") != std::string::npos);
    // Header length above the 1 MiB limit (and beyond any file), and the largest u64.
    std::vector<uint8_t> huge = good;
    huge[0] = 0;
    huge[1] = 0;
    huge[2] = 0x10;
    huge[3] = 0x01;
    CHECK(decode_tiny(huge, &error) == Status::kCorruptPayload);
    CHECK(error.find("limit") != std::string::npos);
    for (int i = 0; i < 8; ++i) huge[size_t(i)] = 0xFF;
    CHECK(decode_tiny(huge, &error) == Status::kCorruptPayload);
  }

  TEST_CASE("decode rejects bad JSON") {
    const std::vector<float> data = iota_floats(17);
    const std::string t = kTinyTensors;
    for (const std::string& header : std::vector<std::string>{
             std::string(""),
             std::string("   "),
             std::string("[1,2]"),
             "{" + t,                   // unterminated
             "{" + t + ",}",            // trailing comma
             "{" + t + "} x",           // bytes after the object
             "{" + t + "}{}",           // two objects
             "{" + t + ",\"x\":true}",  // literals are not allowed
             "{" + t + ",\"x\":null}",
             "{" + t + ",\"x\":1.5}",  // numbers are integers
             "{" + t + ",\"x\":-1}",
             "{" + t + ",\"x\":012}",
             "{" + t + ",\"x\":99999999999999999999}",            // > 2^64
             "{" + t + ",\"fc1.bias\":{}}",                       // duplicate key
             "{" + t + ",\"__metadata__\":{\"a\":\"\\x\"}}",      // unknown escape
             "{" + t + ",\"__metadata__\":{\"a\":\"\\ud800\"}}",  // lone surrogate
             "{" + t + ",\"__metadata__\":{\"a\":\"\\udc00x\"}}",
             "{" + t + ",\"__metadata__\":{\"a\":\"\\u12\"}}",
             "{" + t + ",\"__metadata__\":{\"a\":\"tab\there\"}}",     // raw control character
             "{" + t + ",\"__metadata__\":{\"a\":\"\xC3\"}}",          // invalid UTF-8
             "{" + t + ",\"__metadata__\":{\"a\":\"\xC0\xAF\"}}",      // overlong
             "{" + t + ",\"__metadata__\":{\"a\":\"\xED\xA0\x80\"}}",  // encoded surrogate
             "{" + t + ",\"__metadata__\":{\"a\":1}}",                 // metadata values are strings
             "{" + t + ",\"__metadata__\":[]}",
             "{" + t + ",\"x\":[[[[[[[[[[1]]]]]]]]]]}",  // too deep
             "{" + t + " \"x\":1}",                      // missing comma
             std::string("{\"fc1.weight\" {}}"),         // missing colon
             "{" + t + ",1:2}",                          // non-string key
         }) {
      CAPTURE(header);
      std::string error;
      CHECK(decode_tiny(make_file(header, data), &error) == Status::kCorruptPayload);
      CHECK(!error.empty());
    }
  }

  TEST_CASE("decode rejects bad tensor entries and offsets") {
    std::string error;
    const std::vector<float> d17 = iota_floats(17), d18 = iota_floats(18), d15 = iota_floats(15);
    struct Case {
      std::string header;
      const std::vector<float>* data;
      Status want;
      const char* message;
    };
    const std::string h = kTinyHeader;
    const Case cases[] = {
        {replace(h, "\"F32\",\"shape\":[3,2]", "\"F16\",\"shape\":[3,2]"), &d17, Status::kCorruptPayload,
         "[3,2] in F16 needs 12"},
        {replace(h, "\"F32\",\"shape\":[3]", "\"BF16\",\"shape\":[3]"), &d17, Status::kCorruptPayload,
         "[3] in BF16 needs 6"},
        {replace(h, "\"F32\",\"shape\":[3]", "\"I64\",\"shape\":[3]"), &d17, Status::kCorruptPayload,
         "F32, F16 or BF16"},
        {replace(h, "\"dtype\":\"F32\",\"shape\":[3]", "\"dtype\":32,\"shape\":[3]"), &d17,
         Status::kCorruptPayload, "dtype"},
        {replace(h, "\"data_offsets\":[24,36]", "\"data_offsets\":[20,32]"), &d17, Status::kCorruptPayload,
         "overlaps"},
        {replace(h, "\"data_offsets\":[60,68]", "\"data_offsets\":[64,72]"), &d17, Status::kCorruptPayload,
         "past"},
        {replace(h, "\"data_offsets\":[60,68]", "\"data_offsets\":[64,72]"), &d18, Status::kCorruptPayload,
         "gap"},
        {h, &d18, Status::kCorruptPayload, "cover 68 of the 72"},
        {replace(h, "\"data_offsets\":[60,68]", "\"data_offsets\":[60,64]"), &d17, Status::kCorruptPayload,
         "needs 8"},
        {replace(h, "\"data_offsets\":[60,68]", "\"data_offsets\":[68,60]"), &d17, Status::kCorruptPayload,
         "begin after"},
        {replace(h, "\"data_offsets\":[60,68]", "\"data_offsets\":[60]"), &d17, Status::kCorruptPayload,
         "[begin, end]"},
        {replace(h, "\"data_offsets\":[60,68]", "\"data_offsets\":[60,68,76]"), &d17, Status::kCorruptPayload,
         "[begin, end]"},
        {replace(h, ",\"data_offsets\":[60,68]", ""), &d17, Status::kCorruptPayload, "lacks"},
        {replace(h, "\"shape\":[2],", "\"shape\":[2],\"extra\":1,"), &d17, Status::kCorruptPayload,
         "unknown field"},
        {replace(h, "\"shape\":[2],", "\"shape\":[\"2\"],"), &d17, Status::kCorruptPayload, "shape"},
        {replace(h, "\"shape\":[2],", "\"shape\":[1,1,1,1,1,1,1,1,2],"), &d17, Status::kCorruptPayload,
         "at most 8"},
        {replace(h, "\"shape\":[2],", "\"shape\":[4294967296,4294967296],"), &d17, Status::kCorruptPayload,
         "too large"},
        {replace(h, "{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[60,68]}", "[]"), &d17,
         Status::kCorruptPayload, "not an object"},
        // Valid files for another model.
        {replace(h, "\"shape\":[3,2]", "\"shape\":[2,3]"), &d17, Status::kDimensionMismatch,
         "the model wants [3,2]"},
        {replace(h, "\"shape\":[3]", "\"shape\":[3,1]"), &d17, Status::kDimensionMismatch, "fc1.bias"},
        {replace(h, ",\"fc2.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[60,68]}", ""), &d15,
         Status::kDimensionMismatch, "missing tensor \"fc2.bias\""},
        {replace(h, "}}", "},\"fc3.bias\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[68,72]}}"), &d18,
         Status::kDimensionMismatch, "unexpected tensor \"fc3.bias\""},
        {replace(h, "{", "{\"__metadata__\":{\"edgefl.model_spec\":\"mlp:2-3-3\"},"), &d17,
         Status::kDimensionMismatch, "mlp:2-3-3"},
    };
    for (const Case& c : cases) {
      CAPTURE(c.header);
      error.clear();
      CHECK(decode_tiny(make_file(c.header, *c.data), &error) == c.want);
      CHECK(error.find(c.message) != std::string::npos);
      CAPTURE(error);
    }
  }

  TEST_CASE("decode rejects non-finite values, another model's file, and leaves outputs alone on failure") {
    std::vector<float> data = iota_floats(17);
    data[9] = std::nanf("");
    std::vector<float> params = {42.0f};
    std::string error;
    CHECK(decode_tiny(make_file(kTinyHeader, data), &error, &params) == Status::kNonFiniteInput);
    data[9] = -INFINITY;
    CHECK(decode_tiny(make_file(kTinyHeader, data), &error, &params) == Status::kNonFiniteInput);
    CHECK(params == std::vector<float>{42.0f});

    const ModelSpec cnn = spec_of("cnn");
    const std::vector<float> weights(parameter_count(cnn), 1.0f);
    std::vector<uint8_t> file;
    REQUIRE(encode_safetensors(cnn, Span<const float>(weights.data(), weights.size()), {}, &file, nullptr) ==
            Status::kOk);
    CHECK(decode_safetensors(span(file), spec_of("mlp:784-128-10"), &params, nullptr, &error) ==
          Status::kDimensionMismatch);
    CHECK(decode_safetensors(span(file), spec_of("cnn:16-32-32,classes=11"), &params, nullptr, &error) ==
          Status::kDimensionMismatch);
    CHECK(params == std::vector<float>{42.0f});
    CHECK(decode_safetensors(span(file), cnn, nullptr, nullptr, &error) == Status::kInvalidArgument);
    CHECK(decode_safetensors(span(file), ModelSpec{ModelKind::kMlp}, &params, nullptr, &error) ==
          Status::kInvalidSpec);
  }

  TEST_CASE("flipping any header byte never crashes the decoder") {
    const ModelSpec spec = spec_of(kTinySpec);
    const std::vector<float> params = iota_floats(17);
    std::vector<uint8_t> file;
    REQUIRE(encode_safetensors(spec, Span<const float>(params.data(), params.size()), {{"k", "v"}}, &file,
                               nullptr) == Status::kOk);
    size_t accepted = 0;
    for (size_t i = 0; i < file.size() - 17 * 4; ++i) {
      for (const uint8_t x : {uint8_t(0x01), uint8_t(0x20), uint8_t(0x80), uint8_t(0xFF)}) {
        std::vector<uint8_t> mutated = file;
        mutated[i] ^= x;
        std::vector<float> out;
        if (decode_safetensors(span(mutated), spec, &out, nullptr, nullptr) == Status::kOk) {
          ++accepted;
          CHECK(out.size() == 17);
        }
      }
    }
    MESSAGE("mutations still accepted (metadata text, padding): " << accepted);
  }

  TEST_CASE("any model by its tensors: F32, F16 and BF16, any names and shapes, in data order") {
    // A file as safetensors.torch.save_file could write it for a user's nn.Module: a BF16 weight, an
    // F16 scalar, an F32 tensor of rank 3; the JSON lists them out of data order.
    const std::string header = R"({"__metadata__":{"edgefl.input":"x / 255"},)"
                               R"("head.w":{"dtype":"F32","shape":[1,2,1],"data_offsets":[10,18]},)"
                               R"("body.0.weight":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},)"
                               R"("temperature":{"dtype":"F16","shape":[],"data_offsets":[8,10]}})";
    std::vector<uint8_t> data;
    for (uint16_t h :
         {uint16_t(0x3FC0), uint16_t(0xC000), uint16_t(0x0000), uint16_t(0x8000)}) {  // bf16: 1.5, -2, 0, -0
      data.push_back(uint8_t(h));
      data.push_back(uint8_t(h >> 8));
    }
    data.push_back(0x01);  // f16 0x0001: the smallest subnormal, 2^-24
    data.push_back(0x00);
    std::vector<uint8_t> f32;
    put_f32(0.1f, &f32);
    put_f32(-3e38f, &f32);
    data.insert(data.end(), f32.begin(), f32.end());
    std::vector<uint8_t> file;
    for (int i = 0; i < 8; ++i) file.push_back(uint8_t(uint64_t(header.size()) >> (8 * i)));
    file.insert(file.end(), header.begin(), header.end());
    file.insert(file.end(), data.begin(), data.end());

    SafetensorsModel model;
    std::string error;
    REQUIRE(read_safetensors(span(file), &model, &error) == Status::kOk);
    REQUIRE(model.tensors.size() == 3);
    CHECK(model.tensors[0] == TensorDesc{"body.0.weight", {2, 2}, TensorDtype::kBf16});
    CHECK(model.tensors[1] == TensorDesc{"temperature", {}, TensorDtype::kF16});
    CHECK(model.tensors[2] == TensorDesc{"head.w", {1, 2, 1}, TensorDtype::kF32});
    const std::vector<float> want = {1.5f, -2.0f, 0.0f, -0.0f, 0x1p-24f, 0.1f, -3e38f};
    REQUIRE(model.values.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      CHECK(memcmp(&model.values[i], &want[i], 4) == 0);
    }
    CHECK(model.metadata.at("edgefl.input") == "x / 255");

    // Written back: the same names and shapes, F32, the caller's metadata; read back exactly.
    std::vector<uint8_t> written;
    REQUIRE(encode_safetensors(model.tensors, Span<const float>(model.values.data(), model.values.size()),
                               {{"edgefl.round", "3"}}, &written, &error) == Status::kOk);
    SafetensorsModel again;
    REQUIRE(read_safetensors(span(written), &again, &error) == Status::kOk);
    REQUIRE(again.tensors.size() == 3);
    for (size_t i = 0; i < 3; ++i) {
      CHECK(again.tensors[i].name == model.tensors[i].name);
      CHECK(again.tensors[i].shape == model.tensors[i].shape);
      CHECK(again.tensors[i].dtype == TensorDtype::kF32);
    }
    CHECK(memcmp(again.values.data(), model.values.data(), 4 * want.size()) == 0);
    CHECK(again.metadata.at("edgefl.round") == "3");
    CHECK(again.metadata.at("format") == "pt");
    // decode_safetensors by table: any file order and dtype, the table's order out.
    std::vector<float> params;
    REQUIRE(decode_safetensors(span(file), model.tensors, &params, nullptr, &error) == Status::kOk);
    CHECK(memcmp(params.data(), model.values.data(), 4 * want.size()) == 0);
    std::vector<TensorDesc> reordered = {model.tensors[2], model.tensors[0], model.tensors[1]};
    REQUIRE(decode_safetensors(span(written), reordered, &params, nullptr, &error) == Status::kOk);
    CHECK(params[0] == 0.1f);
    CHECK(params[2] == 1.5f);
    reordered[0].shape = {2, 1};
    CHECK(decode_safetensors(span(written), reordered, &params, nullptr, &error) ==
          Status::kDimensionMismatch);
    CHECK(error.find("head.w") != std::string::npos);

    // Bad files: each refused with its own status and message, the output untouched.
    struct Bad {
      std::vector<uint8_t> bytes;
      Status want;
      const char* message;
    };
    auto with = [&](const std::string& from, const std::string& to, std::vector<uint8_t> payload) {
      const std::string h = replace(header, from, to);
      std::vector<uint8_t> out;
      for (int i = 0; i < 8; ++i) out.push_back(uint8_t(uint64_t(h.size()) >> (8 * i)));
      out.insert(out.end(), h.begin(), h.end());
      out.insert(out.end(), payload.begin(), payload.end());
      return out;
    };
    std::vector<uint8_t> nan_f16 = data, inf_bf16 = data;
    nan_f16[8] = 0x00, nan_f16[9] = 0x7E;    // f16 NaN
    inf_bf16[2] = 0x80, inf_bf16[3] = 0xFF;  // bf16 -inf
    std::vector<uint8_t> over_cap(8, 0);
    over_cap[3] = 0x01;  // a 16 MiB header length
    const std::vector<uint8_t> truncated(file.begin(), file.end() - 1);
    const Bad bad[] = {
        {truncated, Status::kCorruptPayload, "run past"},
        {std::vector<uint8_t>(file.begin(), file.begin() + 20), Status::kTruncated, "runs past"},
        {over_cap, Status::kCorruptPayload, "exceeds the limit"},
        {with("[10,18]", "[8,16]", data), Status::kCorruptPayload, "overlaps"},
        {with("\"F16\"", "\"I64\"", data), Status::kCorruptPayload, "F32, F16 or BF16"},
        {with("\"F16\"", "\"F8_E4M3\"", data), Status::kCorruptPayload, "F8_E4M3"},
        {nan_f16, Status::kNonFiniteInput, "\"temperature\" element 0"},
        {inf_bf16, Status::kNonFiniteInput, "\"body.0.weight\" element 1"},
        {with("\"shape\":[1,2,1],\"data_offsets\":[10,18]",
              "\"shape\":[1073741824,2],\"data_offsets\":[10,8589934602]", data),
         Status::kDimensionTooLarge, "EDGEFL_MAX_DIMENSION"},
        {with("\"head.w\"", "\"head w\"", data), Status::kInvalidSpec, "printable ASCII without spaces"},
        {with("\"shape\":[1,2,1]", "\"shape\":[1,0,2,1]", data), Status::kCorruptPayload, "needs 0"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
      CAPTURE(i);
      if (bad[i].want == Status::kNonFiniteInput) {
        // with() was not used: patch the data of the original header
        std::vector<uint8_t> f;
        for (int k = 0; k < 8; ++k) f.push_back(uint8_t(uint64_t(header.size()) >> (8 * k)));
        f.insert(f.end(), header.begin(), header.end());
        f.insert(f.end(), bad[i].bytes.begin(), bad[i].bytes.end());
        SafetensorsModel untouched = model;
        CHECK(read_safetensors(span(f), &untouched, &error) == bad[i].want);
        CHECK(untouched.values == model.values);
      } else {
        SafetensorsModel untouched = model;
        CHECK(read_safetensors(span(bad[i].bytes), &untouched, &error) == bad[i].want);
        CHECK(untouched.values == model.values);
      }
      CAPTURE(error);
      CHECK(error.find(bad[i].message) != std::string::npos);
    }

    // More tensors than a model may have (1025 scalars).
    std::string many = "{";
    std::vector<uint8_t> many_data;
    for (int i = 0; i < 1025; ++i) {
      if (i > 0) many += ",";
      many += "\"t" + std::to_string(i) + "\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[" +
              std::to_string(4 * i) + "," + std::to_string(4 * i + 4) + "]}";
      put_f32(1.0f, &many_data);
    }
    many += "}";
    std::vector<uint8_t> many_file;
    for (int i = 0; i < 8; ++i) many_file.push_back(uint8_t(uint64_t(many.size()) >> (8 * i)));
    many_file.insert(many_file.end(), many.begin(), many.end());
    many_file.insert(many_file.end(), many_data.begin(), many_data.end());
    CHECK(read_safetensors(span(many_file), &model, &error) == Status::kInvalidSpec);
    CHECK(error.find("at most 1024") != std::string::npos);
    CHECK(read_safetensors(span(file), nullptr, &error) == Status::kInvalidArgument);
  }

  TEST_CASE("encode refuses bad input") {
    const ModelSpec spec = spec_of(kTinySpec);
    std::vector<float> params = iota_floats(17);
    std::vector<uint8_t> out = {7};
    std::string error;
    const Span<const float> p(params.data(), params.size());
    CHECK(encode_safetensors(spec, Span<const float>(params.data(), 16), {}, &out, &error) ==
          Status::kInvalidArgument);
    CHECK(encode_safetensors(spec, p, {{"format", "np"}}, &out, &error) == Status::kInvalidArgument);
    CHECK(encode_safetensors(spec, p, {{"edgefl.model_spec", "x"}}, &out, &error) ==
          Status::kInvalidArgument);
    CHECK(encode_safetensors(spec, p, {{"a", "1"}, {"a", "2"}}, &out, &error) == Status::kInvalidArgument);
    CHECK(encode_safetensors(spec, p, {{"a", "\xFF"}}, &out, &error) == Status::kInvalidArgument);
    CHECK(encode_safetensors(spec, p, {}, nullptr, &error) == Status::kInvalidArgument);
    CHECK(encode_safetensors(ModelSpec{ModelKind::kMlp}, p, {}, &out, &error) == Status::kInvalidSpec);
    params[3] = INFINITY;
    CHECK(encode_safetensors(spec, p, {}, &out, &error) == Status::kNonFiniteInput);
    CHECK(out == std::vector<uint8_t>{7});
  }
}

}  // namespace server
}  // namespace edgefl
