// npy.h: reading and writing NumPy .npy files for the edgefl tool (hosted code, not the SDK core).
//
// Reads little-endian float32 ('<f4') and float16 ('<f2') arrays of any shape in C order, format
// versions 1.0, 2.0 and 3.0, and flattens them to float32 (float16 converts exactly). Writes 1-D
// float32 arrays in format 1.0 with the header padded to 64 bytes, as numpy.save does.
//
// The reader treats its input as untrusted: every length is checked before it is used, the
// header dictionary is parsed strictly (exactly the keys 'descr', 'fortran_order' and 'shape'),
// and failures come back as a message that says what is wrong. It never throws on bad bytes
// (only std::bad_alloc can escape, and only for sizes below the caps below).
#ifndef EDGEFL_CLI_NPY_H_
#define EDGEFL_CLI_NPY_H_

#include <stddef.h>
#include <stdint.h>

#include <string>
#include <vector>

namespace edgefl {
namespace cli {

// Largest header dictionary accepted, in bytes (numpy itself writes < 100 bytes for our arrays).
constexpr size_t kNpyMaxHeaderBytes = 64 * 1024;
// Largest element count accepted (the product of the shape); matches EDGEFL_MAX_DIMENSION.
constexpr uint64_t kNpyMaxElements = uint64_t{1} << 30;

enum class NpyDtype : uint8_t { kFloat32 = 0, kFloat16 = 1 };

// A parsed .npy array, flattened in C order and converted to float32.
struct NpyArray {
  NpyDtype dtype = NpyDtype::kFloat32;  // the dtype stored in the file
  uint8_t major_version = 0;            // format version of the file (1, 2 or 3)
  std::vector<uint64_t> shape;          // empty for a 0-d array (one element)
  std::vector<float> values;            // product(shape) values
};

// Parses the whole file `bytes[0, size)`. Returns true and fills *out on success; otherwise
// returns false, leaves *out unspecified and puts a one-line reason into *error.
bool parse_npy(const uint8_t* bytes, size_t size, NpyArray* out, std::string* error);

// Reads and parses the file at `path` (same contract as parse_npy; the message names the file).
bool read_npy_file(const std::string& path, NpyArray* out, std::string* error);

// The bytes of a 1-D float32 .npy file (format 1.0, header padded so the data starts at a
// multiple of 64 bytes) holding values[0, n).
std::vector<uint8_t> serialize_npy_f32(const float* values, size_t n);

// Writes serialize_npy_f32(values, n) to `path`. Returns false with *error set on I/O failure.
bool write_npy_f32_file(const std::string& path, const float* values, size_t n, std::string* error);

// IEEE binary16 -> binary32, exact for every input (subnormals, infinities, NaN payloads).
float half_to_float(uint16_t h);

// "(2, 3)" / "(5,)" / "()": the Python spelling of a shape, for messages.
std::string npy_shape_string(const std::vector<uint64_t>& shape);

}  // namespace cli
}  // namespace edgefl

#endif  // EDGEFL_CLI_NPY_H_
