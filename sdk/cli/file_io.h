// file_io.h: whole-file reads and writes for the edgefl tool, with size caps and error messages.
#ifndef EDGEFL_CLI_FILE_IO_H_
#define EDGEFL_CLI_FILE_IO_H_

#include <stddef.h>
#include <stdint.h>

#include <string>
#include <vector>

namespace edgefl {
namespace cli {

// Reads the file at `path` into *bytes. Fails (false, *error = "<path>: <reason>") if it cannot be
// opened or read, is not a regular file, or is larger than `max_bytes` (checked before reading).
bool read_file_bytes(const std::string& path, size_t max_bytes, std::vector<uint8_t>* bytes,
                     std::string* error);

// Creates or truncates `path` and writes bytes[0, size). Fails (false, *error set) on any I/O error;
// a partially written regular file is then removed (devices and other special files never are).
bool write_file_bytes(const std::string& path, const uint8_t* bytes, size_t size, std::string* error);

// "dir/sub/name.npy" -> "name.npy".
std::string path_basename(const std::string& path);

}  // namespace cli
}  // namespace edgefl

#endif  // EDGEFL_CLI_FILE_IO_H_
